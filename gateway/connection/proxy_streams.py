"""Stream subscriptions: Centrifugo's ``channel.proxy.subscribe_stream`` (gRPC only).

A client subscribing to a channel of a namespace with ``subscribe_stream_proxy_enabled`` makes
the gateway open ``SubscribeUnidirectional`` (or, with ``subscribe_stream_proxy_bidirectional``,
``SubscribeBidirectional``) of proxy.proto to the backend. The stream's first message answers
the subscribe (``SubscribeResponse``: result / error / disconnect, within the proxy's
``timeout``); every later ``StreamSubscribeResponse.publication`` goes to THAT subscriber only,
never through the hub, the broker or history (Centrifugo: no recovery, no positioning, no
offsets). Unsubscribe and disconnect cancel the stream; the backend ending it unsubscribes the
client with 2000 (clean end) or 2500 (stream error), as Centrifugo does. Over a bidirectional
stream the client's ``publish`` to that channel is written into the stream instead of being
published.

``StreamSubscriptions`` holds one connection's streams; the client driver calls ``subscribe``,
``release``, ``publish`` and ``close`` and nothing else. Presence is kept for stream subscriptions;
join/leave messages are not emitted (they travel through the hub).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from gateway.errors import CommandError, DisconnectError
from gateway.protocol import codes, policy
from gateway.protocol.messages import Publication, PublishRequest, SubscribeRequest, SubscribeResult
from gateway.protocol.session import Subscription, SubState
from gateway.proxy import proxy_pb2 as pb
from gateway.proxy.caller import Proxies, Proxy
from gateway.proxy.grpc import GrpcProxyTransport, request_message, to_plain
from gateway.proxy.replies import ProxyFailure, parse_reply, subscribe_grant

if TYPE_CHECKING:
    from gateway.channels import ChannelRules
    from gateway.connection.authorization import Authorizer, Caller
    from gateway.connection.sendqueue import SendQueue
    from gateway.node import Node
    from gateway.protocol.codec import Codec
    from gateway.protocol.messages import ClientInfo
    from gateway.protocol.session import Session


class StreamOwner(Protocol):
    """What this module uses of its connection (``gateway.connection.client.Client``)."""

    authorizer: Authorizer
    node: Node
    session: Session
    codec: Codec
    send_queue: SendQueue
    client_id: str
    name: str
    clock: Callable[[], float]

    @property
    def closed(self) -> bool: ...

    def caller(self) -> Caller: ...

    def client_info(self, sub: Subscription | None = None) -> ClientInfo: ...

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None: ...

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None: ...


log = logging.getLogger("taskcast.gateway.proxy.stream")

KIND = "subscribe_stream"


@dataclass(slots=True)
class _Stream:
    call: Any
    """The grpcio aio call (unary-stream or stream-stream)."""
    sub: Subscription
    bidirectional: bool
    reader: asyncio.Task[None] | None = None
    closing: bool = False


class StreamSubscriptions:
    """The stream subscriptions of one connection (channel -> open backend stream)."""

    def __init__(self, client: StreamOwner) -> None:
        self.client = client
        self.open: dict[str, _Stream] = {}

    def _proxy(self, channel: str) -> Proxy:
        proxies = getattr(self.client.authorizer, "proxies", None)
        proxy = proxies.for_channel(KIND, channel) if isinstance(proxies, Proxies) else None
        if proxy is None or proxy.protocol != "grpc":
            raise CommandError(codes.ERROR_NOT_AVAILABLE)
        return proxy

    async def subscribe(
        self, req: SubscribeRequest, rules: ChannelRules
    ) -> tuple[SubscribeResult, Callable[[], None]]:
        """Open the stream and read its first message. Returns the subscribe result and the
        callback that starts delivery once the reply is queued.

        Raises:
            CommandError: the backend's ``error``, or 100 when the stream fails or is silent.
            DisconnectError: the backend's ``disconnect``.
        """
        client = self.client
        channel = req.channel
        proxy = self._proxy(channel)
        bidi = rules.options.subscribe_stream_proxy_bidirectional
        who = client.caller()
        request = proxy.base(KIND, client=who.who.client, transport=who.transport, protocol=who.protocol)
        request.update({"user": who.who.user, "channel": channel})
        if req.token:
            request["token"] = req.token
        proxy.put_data(request, req.data)
        if proxy.settings.include_connection_meta and who.meta is not None:
            request["meta"] = who.meta
        labels = ("grpc", KIND, proxy.name)
        metrics = proxy.metrics
        started = time.perf_counter()
        inflight = metrics.proxy_inflight.labels(*labels)
        inflight.inc()
        try:
            call, first = await self._open(proxy, request, who.headers, bidi)
        except ProxyFailure as exc:
            metrics.proxy_errors.labels(*labels).inc()
            log.warning("subscribe_stream proxy %s: %s", proxy.name, exc)
            raise CommandError(codes.ERROR_INTERNAL) from None
        finally:
            inflight.dec()
            metrics.proxy_duration.labels(*labels).observe(time.perf_counter() - started)
        try:
            reply = parse_reply(to_plain(first.subscribe_response))
            if reply.disconnect is not None:
                raise DisconnectError(reply.disconnect)
            if reply.error is not None:
                raise CommandError(reply.error)
            grant = subscribe_grant(reply.result)
        except ProxyFailure as exc:
            call.cancel()
            log.warning("unreadable subscribe_stream answer: %s", exc)
            raise CommandError(codes.ERROR_INTERNAL) from None
        except BaseException:
            call.cancel()
            raise
        if client.closed or channel in client.session.subscriptions:  # the connection moved on
            call.cancel()
            raise CommandError(codes.ERROR_ALREADY_SUBSCRIBED)
        flags = policy.subscription_flags(rules.options, who.who, policy.Asks(), grant.override)
        sub = Subscription(channel=channel, namespace=rules.namespace, presence=flags.presence)
        sub.chan_info = grant.info
        sub.expire_at = float(grant.expire_at) if grant.expire_at is not None else None
        if sub.presence:
            try:
                await client.node.presence.add(channel, client.client_id, client.client_info(sub))
            except BaseException:  # an engine failure: answered by the driver, no stream left open
                call.cancel()
                raise
        stream = _Stream(call, sub, bidi)
        client.session.add_subscription(sub)
        self.open[channel] = stream
        client.node.metrics.subscriptions_accepted.labels(client.name, "").inc()
        client.session.schedule_sub_expiry(sub)
        result = SubscribeResult(
            expires=sub.expire_at is not None,
            ttl=policy.expiry_ttl(sub.expire_at, client.clock()) if sub.expire_at is not None else 0,
            data=grant.data,
        )
        return result, lambda: self._go_live(stream)

    async def _open(
        self, proxy: Proxy, request: dict[str, Any], headers: Any, bidi: bool
    ) -> tuple[Any, pb.StreamSubscribeResponse]:
        """The open call and its first message (a ``subscribe_response``), within ``timeout``."""
        transport = proxy.transport
        assert isinstance(transport, GrpcProxyTransport)
        message = request_message(KIND, request)
        metadata = transport.metadata(proxy.headers(headers))
        call: Any = None
        try:
            async with asyncio.timeout(proxy.settings.timeout):
                if bidi:
                    call = transport.stub.SubscribeBidirectional(
                        metadata=metadata, compression=transport.compression
                    )
                    await call.write(pb.StreamSubscribeRequest(subscribe_request=message))
                else:
                    call = transport.stub.SubscribeUnidirectional(
                        message, metadata=metadata, compression=transport.compression
                    )
                first = await call.read()
        except TimeoutError:
            if call is not None:
                call.cancel()
            raise ProxyFailure("timeout") from None
        except grpc.aio.AioRpcError as exc:
            raise ProxyFailure("status", f"gRPC status {exc.code().name}") from None
        if first is grpc.aio.EOF or not first.HasField("subscribe_response"):
            call.cancel()
            raise ProxyFailure("malformed", "the stream's first message is no subscribe_response")
        return call, first

    def _go_live(self, stream: _Stream) -> None:
        """The subscribe reply is queued: start delivering the stream's publications."""
        if self.open.get(stream.sub.channel) is not stream or stream.closing:
            return
        stream.sub.state = SubState.SUBSCRIBED
        stream.reader = asyncio.get_running_loop().create_task(self._read(stream))

    async def _read(self, stream: _Stream) -> None:
        client = self.client
        channel = stream.sub.channel
        codec = client.codec
        end = codes.UNSUBSCRIBE_SERVER
        try:
            while True:
                message = await stream.call.read()
                if message is grpc.aio.EOF:
                    break
                if not message.HasField("publication") or client.closed:
                    continue
                pub = message.publication
                client.send_queue.put(
                    codec.encode_publication(channel, Publication(pub.data, tags=dict(pub.tags) or None))
                )
        except grpc.aio.AioRpcError as exc:
            if stream.closing or exc.code() is grpc.StatusCode.CANCELLED:
                return
            log.info("subscribe_stream of %s to %s failed: %s", client.client_id, channel, exc.code().name)
            end = codes.UNSUBSCRIBE_INSUFFICIENT_STATE
        if not stream.closing and self.open.get(channel) is stream:
            client.spawn(lambda: client.unsubscribe(channel, end))

    async def publish(self, req: PublishRequest) -> bool:
        """Write a client publish into the bidirectional stream of its channel. False: the
        channel has no bidirectional stream of this connection (publish as usual)."""
        stream = self.open.get(req.channel)
        if stream is None or not stream.bidirectional or stream.closing:
            return False
        try:
            await stream.call.write(pb.StreamSubscribeRequest(publication=pb.Publication(data=req.data)))
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            log.info("publish into subscribe_stream of %s failed: %s", req.channel, type(exc).__name__)
            raise CommandError(codes.ERROR_INTERNAL) from None
        return True

    async def release(self, sub: Subscription) -> bool:
        """Cancel the stream of an ended subscription and drop its presence. False: ``sub``
        is no stream subscription (the driver releases it from the hub)."""
        stream = self.open.get(sub.channel)
        if stream is None or stream.sub is not sub:
            return False
        del self.open[sub.channel]
        self._cancel(stream)
        if sub.presence:
            await self.client.node.presence.remove(sub.channel, self.client.client_id)
        return True

    def close(self) -> None:
        """The connection is gone: cancel every stream now (``release`` still runs per
        subscription and drops the presence)."""
        for stream in self.open.values():
            self._cancel(stream)

    @staticmethod
    def _cancel(stream: _Stream) -> None:
        stream.closing = True
        stream.call.cancel()
        if stream.reader is not None and not stream.reader.done():
            stream.reader.cancel()
