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

``StreamSubscriptions`` holds one connection's streams, and only them: the subscription state
(the Session's table, presence, metrics) is gateway/connection/subscriptions.py's, which ``open``s
a stream, ``attach``es it to the subscription it entered (or ``cancel``s it), ``start``s it once
live and ``release``s it; the driver writes client publishes into it (``publish``) and ``close``s
them all. The connection is reached through ``StreamConn`` only: who asks, where the stream's
publications are queued, how its end unsubscribes. Presence is kept for stream subscriptions;
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
from gateway.protocol import codes
from gateway.protocol.messages import Publication, PublishRequest, SubscribeRequest
from gateway.protocol.subscription import Subscription
from gateway.proxy import proxy_pb2 as pb
from gateway.proxy.caller import Proxies, Proxy
from gateway.proxy.grpc import GrpcProxyTransport, request_message, to_plain
from gateway.proxy.replies import ProxyFailure, SubscribeGrant, parse_reply, subscribe_grant

if TYPE_CHECKING:
    from gateway.channels import ChannelRules
    from gateway.connection.authorization import Caller
    from gateway.protocol.codec import Codec


class StreamConn(Protocol):
    """What a stream uses of its connection (``gateway.connection.client.Client``)."""

    client_id: str
    codec: Codec

    @property
    def closed(self) -> bool: ...

    def caller(self) -> Caller: ...

    def send(self, payload: bytes) -> None: ...

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None: ...

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None: ...


log = logging.getLogger("taskcast.gateway.proxy.stream")

KIND = "subscribe_stream"


@dataclass(slots=True)
class _Stream:
    """One backend stream: opened and answered (``grant``), then attached to its subscription."""

    owner: StreamSubscriptions
    call: Any
    """The grpcio aio call (unary-stream or stream-stream)."""
    grant: SubscribeGrant
    bidirectional: bool
    sub: Subscription | None = None
    reader: asyncio.Task[None] | None = None
    closing: bool = False

    def attach(self, sub: Subscription) -> None:
        """Bind the stream to the subscription entered for it (its channel's stream now)."""
        self.sub = sub
        self.owner.open[sub.channel] = self

    def cancel(self) -> None:
        """Cancel the call (and its reader); idempotent."""
        self.closing = True
        self.call.cancel()
        if self.reader is not None and not self.reader.done():
            self.reader.cancel()


class StreamSubscriptions:
    """The backend streams of one connection's stream subscriptions (channel -> stream).

    Args:
        conn: The connection.
        proxies: The configured proxies (None: no proxy, a stream subscribe is answered 108).
    """

    def __init__(self, conn: StreamConn, proxies: Proxies | None) -> None:
        self.conn = conn
        self.proxies = proxies
        self.open: dict[str, _Stream] = {}

    def _proxy(self, channel: str) -> Proxy:
        proxy = self.proxies.for_channel(KIND, channel) if self.proxies is not None else None
        if proxy is None or proxy.protocol != "grpc":
            raise CommandError(codes.ERROR_NOT_AVAILABLE)
        return proxy

    async def open_stream(self, req: SubscribeRequest, rules: ChannelRules) -> _Stream:
        """Open the stream and read its first message, which answers the subscribe: the
        returned stream carries the grant and is not attached yet.

        Raises:
            CommandError: the backend's ``error``, or 100 when the stream fails or is silent.
            DisconnectError: the backend's ``disconnect``.
        """
        channel = req.channel
        proxy = self._proxy(channel)
        bidi = rules.options.subscribe_stream_proxy_bidirectional
        who = self.conn.caller()
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
            call, first = await self._open(proxy, request, proxy.headers(who.headers, who.emulated), bidi)
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
        return _Stream(self, call, grant, bidi)

    async def _open(
        self, proxy: Proxy, request: dict[str, Any], headers: dict[str, str], bidi: bool
    ) -> tuple[Any, pb.StreamSubscribeResponse]:
        """The open call and its first message (a ``subscribe_response``), within ``timeout``;
        ``headers``: the forwarded ones (``Proxy.headers``)."""
        transport = proxy.transport
        assert isinstance(transport, GrpcProxyTransport)
        message = request_message(KIND, request)
        metadata = transport.metadata(headers)
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

    def start(self, sub: Subscription) -> None:
        """``sub`` is live (its subscribe reply is queued): deliver its stream's publications."""
        stream = self.open.get(sub.channel)
        if stream is None or stream.sub is not sub or stream.closing or stream.reader is not None:
            return
        stream.reader = asyncio.get_running_loop().create_task(self._read(stream, sub.channel))

    async def _read(self, stream: _Stream, channel: str) -> None:
        client = self.conn
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
                client.send(
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

    def release(self, sub: Subscription) -> bool:
        """Cancel the stream of an ended subscription. False: ``sub`` has no stream (it is
        released from the hub)."""
        stream = self.open.get(sub.channel)
        if stream is None or stream.sub is not sub:
            return False
        del self.open[sub.channel]
        stream.cancel()
        return True

    def close(self) -> None:
        """The connection is gone: cancel every stream now (``release`` still runs per
        subscription)."""
        for stream in self.open.values():
            stream.cancel()
