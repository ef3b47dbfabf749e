"""One client connection: drives a sans-I/O ``Session`` over a ``Transport`` and carries out its
commands against the Node (PROTOCOL.md §1–§5).

Commands of a connection run strictly in order on one task that exists only while commands are
pending. Outgoing replies and pushes are queued and written with ONE transport write per event
loop tick; the queue is bounded in bytes (``client.queue_max_size``) and overflow disconnects the
client with 3008 — a slow client never slows anyone else. Error codes are translated here, once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway import commands
from gateway import subscribe as subscribing
from gateway.auth import ConnectToken, KeysUnavailable, TokenError, TokenExpired, TokenVerifier
from gateway.engine.base import EngineError
from gateway.errors import CommandError, DisconnectError
from gateway.hub import SharedPush
from gateway.liveness import Liveness
from gateway.node import VERSION, Node
from gateway.protocol import codec, codes
from gateway.protocol.messages import (
    ChannelRequest,
    ClientInfo,
    Command,
    ConnectRequest,
    HistoryRequest,
    Method,
    Publication,
    PublishRequest,
    RefreshRequest,
    RPCRequest,
    StreamPosition,
    SubRefreshRequest,
    SubscribeRequest,
    UnsubscribeRequest,
)
from gateway.protocol.session import Delivery, Execute, Pong, Session, State, Subscription, SubState

log = logging.getLogger("taskcast.gateway.client")

MAX_PENDING_COMMANDS = 1024
"""Commands queued on one connection before it is disconnected with 3013."""


class Transport(Protocol):
    """What a connection writes to. Adapters live in gateway/transports/."""

    name: str
    emulation: bool
    """SSE / HTTP-streaming with the /emulation endpoint: the connect reply carries session+node."""
    unidirectional: bool

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        """Write queued messages at once. When ``shared`` is set, its payload is exactly
        ``b"\\n".join(payloads)`` and its pre-built WebSocket frame may be written as is."""
        ...

    def buffered_bytes(self) -> int:
        """Bytes accepted by ``write`` but not yet sent to the peer."""
        ...

    def close(self, disconnect: codes.Disconnect) -> None: ...


class Client:
    """A connection. ``feed`` is called by the transport with each incoming frame."""

    def __init__(
        self,
        node: Node,
        transport: Transport,
        *,
        verifier: TokenVerifier,
        sub_verifier: TokenVerifier,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.settings = node.settings
        self.transport = transport
        self.verifier = verifier
        self.sub_verifier = sub_verifier
        self.clock = clock
        self.loop = asyncio.get_running_loop()
        self.session = Session(channel_limit=self.settings.client.channel_limit)
        self.client_id = str(uuid.uuid4())
        self.session_id = str(uuid.uuid4()) if transport.emulation or transport.unidirectional else ""
        self.user = ""
        self.conn_info: bytes | None = None
        self.name = ""
        self.expire_at: float | None = None
        self.closed = False
        self._registered = False
        self._inbox: deque[Command | Callable[[], Awaitable[object]]] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._pending: list[bytes] = []
        self._pending_pushes: list[SharedPush] | None = None
        """The shared pushes behind ``_pending`` while every queued item is one (else None)."""
        self._pending_bytes = 0
        self._base_buffered = 0
        self._queue_limit = self.settings.client.queue_max_size
        self.liveness = Liveness(self)
        self._after_reply: list[Callable[[], None]] = []
        self.liveness.start()
        node.connecting.add(self)

    # --- incoming ----------------------------------------------------------------------------

    def feed(self, frame: str | bytes) -> None:
        """Decode a frame and queue its commands, strictly in order (§1.2)."""
        if self.closed:
            return
        try:
            commands = codec.decode_frame(frame)
        except codec.ProtocolError as exc:
            log.info("bad frame from client %s: %s", self.client_id, exc)
            self.disconnect(exc.disconnect)
            return
        for cmd in commands:
            action = self.session.receive(cmd)
            if action is None:
                continue
            if isinstance(action, codes.Disconnect):
                self.disconnect(action)
                return
            if isinstance(action, Pong):
                continue
            if isinstance(action, Execute):
                if len(self._inbox) >= MAX_PENDING_COMMANDS:
                    # A client that sends faster than its commands can run: bound the memory
                    # it can pin, and let it reconnect.
                    self.disconnect(codes.DISCONNECT_TOO_MANY_REQUESTS)
                    return
                self._inbox.append(action.command)
        if self._inbox and self._worker is None:
            self._worker = self.loop.create_task(self._run_commands())

    async def _run_commands(self) -> None:
        try:
            while self._inbox and not self.closed:
                job = self._inbox.popleft()
                if isinstance(job, Command):
                    await self._dispatch(job)
                else:
                    await self._run_job(job)
        finally:
            self._worker = None

    async def _run_job(self, job: Callable[[], Awaitable[object]]) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except EngineError:
            log.warning("engine error in background job of client %s", self.client_id, exc_info=True)
        except Exception:
            log.exception("internal error in background job of client %s", self.client_id)
            self.disconnect(codes.DISCONNECT_SERVER_ERROR)

    async def _dispatch(self, cmd: Command) -> None:
        method = cmd.method
        assert method is not None
        started = time.perf_counter()
        try:
            result = await self._handle(cmd)
        except CommandError as exc:
            self._after_reply.clear()
            self.node.metrics.reply_errors.labels(method.value, str(exc.error.code), "").inc()
            if method is Method.CONNECT:
                self.session.connect_rejected()
                if self.transport.unidirectional:
                    self.disconnect(codes.uni_connect_disconnect(exc.error))
                    return
            self.send(codec.encode_error(cmd.id, exc.error))
            return
        except DisconnectError as exc:
            self.disconnect(exc.disconnect)
            return
        except EngineError:
            log.warning("engine error on %s for client %s", method.value, self.client_id, exc_info=True)
            self.send(codec.encode_error(cmd.id, codes.ERROR_INTERNAL))
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("internal error on %s for client %s", method.value, self.client_id)
            self.disconnect(codes.DISCONNECT_SERVER_ERROR)
            return
        finally:
            self.node.metrics.command_duration.labels(method.value, "").observe(time.perf_counter() - started)
        if result is not None:
            self.send(codec.encode_reply(cmd.id, method.value, result))
        after, self._after_reply = self._after_reply, []
        for callback in after:
            callback()
        if method is Method.CONNECT:
            self._after_connect_reply()

    def after_reply(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` right after the current command's reply is queued (not on error)."""
        self._after_reply.append(callback)

    async def _handle(self, cmd: Command) -> dict[str, Any] | None:
        req = cmd.request
        if isinstance(req, ConnectRequest):
            return await self._connect(req)
        if isinstance(req, SubscribeRequest):
            return await subscribing.subscribe(self, req)
        if isinstance(req, UnsubscribeRequest):
            await self.unsubscribe(req.channel)
            return {}
        if isinstance(req, PublishRequest):
            return await commands.publish(self, req)
        if isinstance(req, HistoryRequest):
            return await commands.history(self, req)
        if isinstance(req, ChannelRequest):
            return await commands.presence(self, req, stats=cmd.method is Method.PRESENCE_STATS)
        if isinstance(req, RefreshRequest):
            return await self._refresh(req)
        if isinstance(req, SubRefreshRequest):
            return await subscribing.sub_refresh(self, req)
        if isinstance(req, RPCRequest):
            return commands.rpc(self, req)
        if cmd.method is Method.SEND:
            raise DisconnectError(codes.DISCONNECT_NOT_AVAILABLE)
        raise CommandError(codes.ERROR_NOT_AVAILABLE)  # the v1 `ping` command

    # --- connect / refresh -------------------------------------------------------------------

    async def _verify_connect(self, token: str) -> ConnectToken | None:
        cfg = self.settings.client
        if not token:
            if cfg.insecure or cfg.allow_anonymous_connect_without_token:
                return None
            raise DisconnectError(codes.DISCONNECT_BAD_REQUEST)
        try:
            claims = await self.verifier.verify_connect(token)
        except TokenExpired:
            raise CommandError(codes.ERROR_TOKEN_EXPIRED) from None
        except KeysUnavailable:
            raise CommandError(codes.ERROR_INTERNAL) from None  # temporary: the SDK retries
        except TokenError:
            raise DisconnectError(codes.DISCONNECT_INVALID_TOKEN) from None
        if not claims.user and cfg.disallow_anonymous_connection_tokens:
            raise DisconnectError(codes.DISCONNECT_PERMISSION_DENIED)
        return claims

    async def _connect(self, req: ConnectRequest) -> dict[str, Any]:
        cfg = self.settings.client
        claims = await self._verify_connect(req.token)
        hub = self.node.hub
        if cfg.connection_limit and len(hub.clients) >= cfg.connection_limit:
            raise DisconnectError(codes.DISCONNECT_CONNECTION_LIMIT)
        if claims is not None:
            self.user = claims.user
            self.conn_info = claims.info
            if claims.expire_at is not None:
                if claims.expire_at <= self.clock():
                    raise CommandError(codes.ERROR_EXPIRED)
                self.expire_at = float(claims.expire_at)
        if (
            self.user
            and cfg.user_connection_limit
            and hub.user_connections(self.user) >= cfg.user_connection_limit
        ):
            raise DisconnectError(codes.DISCONNECT_CONNECTION_LIMIT)
        self.name = req.name
        server_subs = _server_subs(claims)
        if cfg.channel_limit and len(server_subs) > cfg.channel_limit:
            raise DisconnectError(codes.DISCONNECT_CHANNEL_LIMIT)
        self.liveness.cancel("stale")
        self.node.connecting.discard(self)
        hub.add_client(self)
        self._registered = True
        self.session.connected()
        self.node.metrics.connections_accepted.labels(
            self.transport.name, "json", req.name, req.version
        ).inc()
        subs_result: dict[str, Any] = {}
        for channel, server_sub in server_subs.items():
            subs_result[channel] = await subscribing.subscribe_server_side(
                self, channel, server_sub, req.subs.get(channel)
            )
        result: dict[str, Any] = {"client": self.client_id, "version": f"{VERSION} Taskcast"}
        self._put_expiry(result)
        if subs_result:
            result["subs"] = subs_result
        ping = int(cfg.ping_interval)
        if ping > 0:
            result["ping"] = ping
            if not self.transport.unidirectional:  # a unidirectional client cannot pong
                result["pong"] = cfg.pong_timeout > 0
        if self.session_id:
            result["session"] = self.session_id
        if self.transport.emulation:  # /emulation POSTs name the node holding the session
            result["node"] = self.node.uid
        if cfg.connect_include_server_time:
            result["time"] = int(self.clock() * 1000)
        return result

    def _after_connect_reply(self) -> None:
        """Runs once the connect reply is queued: server-side subscriptions go live (their
        buffered publications follow the reply) and the timers start."""
        if self.session.state is not State.CONNECTED:
            return
        for sub in list(self.session.subscriptions.values()):
            if sub.server_side and sub.state is SubState.SUBSCRIBING:
                subscribing.go_live(self, sub)
        interval = self.settings.client.ping_interval
        if interval > 0:
            self.liveness.start_pings(random.uniform(interval / 2, interval))
        self.liveness.schedule_expiry()

    def _put_expiry(self, result: dict[str, Any]) -> None:
        if self.expire_at is not None:
            result["expires"] = True
            result["ttl"] = max(1, int(self.expire_at - self.clock()))

    async def _refresh(self, req: RefreshRequest) -> dict[str, Any]:
        if not req.token:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        try:
            claims = await self.verifier.verify_connect(req.token)
        except TokenExpired:
            raise DisconnectError(codes.DISCONNECT_EXPIRED) from None
        except KeysUnavailable:
            raise CommandError(codes.ERROR_INTERNAL) from None
        except TokenError:
            raise DisconnectError(codes.DISCONNECT_INVALID_TOKEN) from None
        if claims.user != self.user:
            raise DisconnectError(codes.DISCONNECT_INVALID_TOKEN)
        if claims.expire_at is not None and claims.expire_at <= self.clock():
            raise CommandError(codes.ERROR_EXPIRED)
        self.expire_at = float(claims.expire_at) if claims.expire_at is not None else None
        if claims.info is not None:
            self.conn_info = claims.info
        self.liveness.schedule_expiry()
        result: dict[str, Any] = {"client": "", "version": ""}
        self._put_expiry(result)
        return result

    # --- channel commands ----------------------------------------------------------------------

    def client_info(self, sub: Subscription | None = None) -> ClientInfo:
        return ClientInfo(self.user, self.client_id, self.conn_info, sub.chan_info if sub else None)

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None:
        """Drop a subscription (client request, server API, expiry, insufficient state)."""
        sub = self.session.remove_subscription(channel)
        if sub is None:
            return
        if push is not None:
            self.node.metrics.server_unsubscribes.labels(str(push.code), "").inc()
            self.send(codec.encode_push(channel, "unsubscribe", {"code": push.code, "reason": push.reason}))
        self.liveness.cancel(f"sub:{channel}")
        await subscribing.release(self, sub)

    # --- publications from the hub -----------------------------------------------------------

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        sub = self.session.subscriptions.get(channel)
        if sub is None or self.closed:
            return
        if sub.state is SubState.SUBSCRIBED and not sub.positioned:
            self.enqueue(push.payload, push)  # the common case, kept short: it runs per delivery
            return
        if sub.state is SubState.SUBSCRIBING:
            sub.buffer.append((pub, epoch, push))
            return
        verdict = sub.check_position(pub.offset, epoch)
        if verdict is Delivery.DELIVER:
            self.enqueue(push.payload, push)
        elif verdict is Delivery.INSUFFICIENT_STATE:
            self.insufficient_state(sub)

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None:
        sub = self.session.subscriptions.get(channel)
        if sub is not None and sub.push_join_leave and sub.state is SubState.SUBSCRIBED:
            self.enqueue(push.payload, push)

    def check_position(self, channel: str, top: StreamPosition) -> None:
        sub = self.session.subscriptions.get(channel)
        if sub is None or not sub.positioned or sub.state is not SubState.SUBSCRIBED or self.closed:
            return
        if (sub.epoch and top.epoch != sub.epoch) or top.offset > sub.offset:
            self.insufficient_state(sub)

    def insufficient_state(self, sub: Subscription) -> None:
        """Message loss detected on a subscription (§3.2)."""
        if sub.server_side:
            self.disconnect(codes.DISCONNECT_INSUFFICIENT_STATE)
        else:
            self.spawn(lambda: self.unsubscribe(sub.channel, codes.UNSUBSCRIBE_INSUFFICIENT_STATE))

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None:
        """Run follow-up work (an unsubscribe after expiry, a presence refresh) in command order."""
        if self.closed:
            return
        self._inbox.append(job)
        if self._worker is None:
            self._worker = self.loop.create_task(self._run_commands())

    # --- outgoing ----------------------------------------------------------------------------

    def send(self, payload: bytes) -> None:
        """Queue a reply or connection-level push."""
        self.enqueue(payload, None)

    def enqueue(self, payload: bytes, shared: SharedPush | None) -> None:
        """Queue one message for the end-of-tick write. The first message of a tick schedules
        the flush and samples the transport's unsent bytes; the sum of both is bounded by
        ``client.queue_max_size`` (overflow ⇒ 3008, PROTOCOL.md §2.3)."""
        if self.closed:
            return
        pending = self._pending
        if not pending:
            self._base_buffered = self.transport.buffered_bytes()
            self._pending_pushes = []
            self.node.schedule_flush(self)
        self._pending_bytes += len(payload) + 1
        if self._queue_limit and self._pending_bytes + self._base_buffered > self._queue_limit:
            self.disconnect(codes.DISCONNECT_SLOW)
            return
        pending.append(payload)
        pushes = self._pending_pushes
        if pushes is not None:
            if shared is None:
                self._pending_pushes = None
            else:
                pushes.append(shared)

    def flush(self, frames: dict[tuple[int, ...], SharedPush] | None = None) -> None:
        """Write everything queued in one transport write. ``frames`` is shared by all
        connections flushed in the same tick: connections that queued the same sequence of
        shared pushes (a hot channel) reuse one joined frame instead of building their own."""
        pending = self._pending
        if not pending or self.closed:
            return
        pushes = self._pending_pushes
        self._pending, self._pending_pushes, self._pending_bytes = [], None, 0
        shared: SharedPush | None = None
        if pushes:
            if len(pushes) == 1:
                shared = pushes[0]
            elif frames is not None:
                key = tuple(map(id, pushes))
                shared = frames.get(key)
                if shared is None:
                    shared = frames[key] = SharedPush(b"\n".join(pending))
        try:
            self.transport.write(pending, shared)
        except Exception:
            log.debug("write failed for client %s", self.client_id, exc_info=True)
            self.disconnect(codes.DISCONNECT_WRITE_ERROR)

    def presence_tick(self) -> None:
        """Re-add this connection to presence of its channels (every presence_update_interval)."""
        for sub in self.session.subscriptions.values():
            if sub.presence and sub.state is SubState.SUBSCRIBED:
                self.spawn(
                    functools.partial(
                        self.node.presence.add, sub.channel, self.client_id, self.client_info(sub)
                    )
                )

    # --- closing -----------------------------------------------------------------------------

    def disconnect(self, disconnect: codes.Disconnect) -> None:
        """Close the connection with this code (idempotent). Queued output is flushed first."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        self.node.metrics.server_disconnects.labels(str(disconnect.code)).inc()
        try:
            self.transport.close(disconnect)
        except Exception:
            log.debug("close failed for client %s", self.client_id, exc_info=True)
        self.connection_lost()

    def connection_lost(self) -> None:
        """The transport is gone: release everything this connection held (idempotent)."""
        self.closed = True
        self.session.closed()
        self.node.connecting.discard(self)
        self.liveness.cancel_all()
        self._inbox.clear()
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
        if self._registered:
            self._registered = False
            self.node.hub.remove_client(self)
        subs = list(self.session.subscriptions.values())
        self.session.subscriptions.clear()
        self.session.namespace_counts.clear()
        if subs:
            self.node.background(self._release_all(subs))

    async def _release_all(self, subs: list[Subscription]) -> None:
        for sub in subs:
            await subscribing.release(self, sub)


def _server_subs(claims: ConnectToken | None) -> dict[str, subscribing.ServerSub]:
    """Server-side subscriptions from the connection token: ``subs`` wins over ``channels``."""
    if claims is None:
        return {}
    if claims.subs:
        return {ch: subscribing.ServerSub(s.info, s.data, s.override) for ch, s in claims.subs.items()}
    return {ch: subscribing.ServerSub() for ch in claims.channels}
