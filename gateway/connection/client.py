"""The single driver of one client connection: I/O, timers, command order and engine calls
around a sans-I/O ``Session`` (gateway/protocol/session.py) and the pure ``policy`` (PROTOCOL.md
§1–§5).

The Session decides protocol state (ordering, pings, expiry, the subscription table and every
subscription's state, changed only through its transitions) and encodes through the
connection's codec; the policy decides permissions, token claims and positioning;
this module carries their outcomes out against the Node and the Transport: connect, refresh,
publish/history/presence/RPC, disconnect. The life of each channel subscription (establish, go
live, release) is gateway/connection/subscriptions.py's, its deliveries gateway/connection/delivery.py's
``Fanout``; they reach this driver only through their protocols (``Driver``, ``Receiver``), as
the stream subscriptions do (``StreamConn``). Errors are translated to the wire here, once.

Commands of a connection run strictly in order on one task that exists only while commands are
pending (``CommandQueue``, gateway/connection/command_queue.py). Outgoing replies and pushes are
queued and written with ONE transport write per event loop tick (``Flusher``: every connection
with output in a tick is flushed by one callback, and connections that queued the same shared
pushes reuse one joined frame); the queue is bounded in bytes (``client.queue_max_size``) and
overflow disconnects with 3008 — a slow client never slows anyone else. A connection's next
deadline (``Session.next_deadline()``: pings, pong checks, expiry) is an entry on the node's one
deadline wheel (gateway/connection/wheel.py), not a loop timer of its own. A ping is one
prebuilt frame per codec, shared by every connection (its WebSocket frame is built once) and
written at once when nothing else is queued.

Connections are built by gateway/connection/factory.py (``ClientFactory``: what a node's
connections share). Only the transports, the factory and the composition root import this
module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping

from gateway.connection.authorization import Authorizer, Caller, TokenAuthorizer
from gateway.connection.command_queue import CommandQueue, Job, internal_error
from gateway.connection.dispatch import route
from gateway.connection.map_subscribe import MapSubscriptions
from gateway.connection.proxy_streams import StreamSubscriptions
from gateway.connection.refresh import ServerRefresher
from gateway.connection.sendqueue import Flusher, SendQueue, Transport
from gateway.connection.server_subscriptions import ServerSubscriptions
from gateway.connection.shared_poll import SharedPollSubscriptions
from gateway.connection.tokens import TokenVerifier
from gateway.connection.wheel import Wheel
from gateway.engine.base import EngineError
from gateway.errors import CommandError, DisconnectError
from gateway.hub import DirectTarget, SharedPush
from gateway.node import VERSION, Node
from gateway.protocol import codes, policy
from gateway.protocol.codec import Codec
from gateway.protocol.messages import (
    ClientInfo,
    Command,
    ConnectRequest,
    Method,
    Publication,
    RefreshRequest,
    RefreshResult,
    Result,
    StreamPosition,
    SubscribeRecovery,
)
from gateway.protocol.session import Action, Execute, ExpireSubscription, SendPing, Session, SessionConfig
from gateway.protocol.subscription import Subscription
from gateway.proxy.caller import Proxies

log = logging.getLogger("taskcast.gateway.client")
_PINGS: dict[bytes, SharedPush] = {}
"""The ping of each codec as one shared push: every connection writes the same object, so a
transport that caches its wire frame on it (the WebSocket's) builds that frame once."""


def _ping_push(frame: bytes) -> SharedPush:
    push = _PINGS.get(frame)
    if push is None:
        push = _PINGS[frame] = SharedPush(frame)
    return push


__all__ = ["Client", "Flusher", "Transport"]


class Client:
    """A connection. Transports call ``feed``, ``connection_lost`` and ``disconnect``; the hub,
    node and cluster use it as a ``gateway.hub.Connection`` (its channel-level members hand over
    to ``ServerSubscriptions`` or, for deliveries, its ``Fanout``, one call each); ``Subscriptions``
    uses it as its ``Driver``."""

    # Slots: one per connection, and an instance dict of 30 or more attributes costs 1.6 KiB on
    # CPython 3.11 (about 300 bytes as slots).
    __slots__ = (
        "__weakref__",
        "_after_reply",
        "_closed",
        "_decoded_before",
        "_decoded_metric",
        "_lost",
        "_registered",
        "_wheel",
        "authorizer",
        "client_id",
        "clock",
        "codec",
        "commands",
        "conn_info",
        "conn_meta",
        "emulated_headers",
        "fanout",
        "keeps_headers",
        "loop",
        "maps",
        "name",
        "node",
        "refresher",
        "send_queue",
        "session",
        "session_id",
        "settings",
        "shared_poll",
        "streams",
        "sub_verifier",
        "subscriptions",
        "transport",
        "user",
        "verifier",
    )

    def __init__(
        self,
        node: Node,
        transport: Transport,
        *,
        verifier: TokenVerifier,
        sub_verifier: TokenVerifier,
        clock: Callable[[], float] = time.time,
        flusher: Flusher | None = None,
        authorizer: Authorizer | None = None,
        codec: Codec | None = None,
        wheel: Wheel | None = None,
    ) -> None:
        self.node = node
        self.codec: Codec = codec or node.hub.codec
        self.settings = node.settings
        self.transport = transport
        self.verifier = verifier
        self.sub_verifier = sub_verifier
        self.clock = clock
        self.authorizer = authorizer or TokenAuthorizer(node.settings, verifier, sub_verifier, clock)
        self.loop = asyncio.get_running_loop()
        cfg = self.settings.client
        self.session = Session(
            self.codec,
            SessionConfig(
                channel_limit=cfg.channel_limit,
                ping_interval=cfg.ping_interval,
                pong_timeout=cfg.pong_timeout,
                stale_close_delay=cfg.stale_close_delay,
                expired_close_delay=cfg.expired_close_delay,
                expired_sub_close_delay=cfg.expired_sub_close_delay,
                unidirectional=transport.unidirectional,
            ),
            now=clock(),
        )
        self.client_id = str(uuid.uuid4())
        self.session_id = str(uuid.uuid4()) if transport.emulation or transport.unidirectional else ""
        self.user = ""
        self.conn_info: bytes | None = None
        self.conn_meta: bytes | None = None
        self.refresher = ServerRefresher(self, self.loop, clock)
        self.name = ""
        self._closed = False
        self._lost = False
        self._registered = False
        self.send_queue = SendQueue(
            transport,
            flusher or Flusher(),
            limit_bytes=cfg.queue_max_size,
            hold_bytes=cfg.queue_conflate_size,
            on_failure=self.disconnect,
            separator=self.codec.separator,
        )
        self.commands = CommandQueue(self, self.loop)
        self._decoded_before = 0
        self._decoded_metric = node.metrics.commands_decoded.labels(transport.name)
        self._after_reply: list[Callable[[], None]] = []
        # The wheel keeps the deadline: no attribute for it here (RSS per connection).
        self._wheel = wheel if wheel is not None else Wheel(clock)
        proxies = getattr(self.authorizer, "proxies", None)  # a ProxyAuthorizer's
        self.streams = StreamSubscriptions(  # channel.proxy.subscribe_stream
            self, proxies if isinstance(proxies, Proxies) else None
        )
        self.keeps_headers = isinstance(proxies, Proxies) and proxies.uses_emulated_headers
        self.shared_poll = SharedPollSubscriptions(self, node.shared_poll, clock)  # subscribe type 4
        self.emulated_headers: Mapping[str, str] = {}  # the connect's headers map, when a proxy forwards it
        self.subscriptions = ServerSubscriptions(
            self,
            node,
            self.session,
            self.send_queue,
            authorizer=self.authorizer,
            refresher=self.refresher,
            clock=clock,
            streams=self.streams,
        )
        self.fanout = self.subscriptions.fanout
        self.maps = MapSubscriptions(self, node, self.session, self.subscriptions, self.authorizer, clock)
        node.connecting.add(self)
        self._rearm()

    @property
    def closed(self) -> bool:
        return self._closed

    # --- incoming ----------------------------------------------------------------------------

    def feed(self, frame: bytes | str) -> None:
        """Decode a frame and queue its commands, strictly in order (§1.2). Never raises. The
        session decodes only what it accepts: at most ``MAX_FRAME_COMMANDS`` per frame and
        ``MAX_PENDING_COMMANDS`` queued, nothing after a connect until it succeeded."""
        if self._closed:
            return
        self._queue(self.session.receive_frame(frame, len(self.commands)))

    def _queue(self, actions: list[Action]) -> None:
        session = self.session
        decoded = session.decoded
        if decoded > self._decoded_before:
            self._decoded_metric.inc(decoded - self._decoded_before)
        self._decoded_before = decoded
        for action in actions:
            if isinstance(action, codes.Disconnect):
                error = session.protocol_error
                if error is not None:
                    log.info("bad frame from client %s: %s", self.client_id, error)
                elif action.code == codes.DISCONNECT_TOO_MANY_REQUESTS.code:
                    log.info("client %s sent too many commands", self.client_id)
                self.disconnect(action)
                return
            if isinstance(action, Execute):
                self.commands.push(action.command)

    def spawn(self, job: Job) -> None:
        """Run follow-up work (an unsubscribe after expiry, a presence refresh) in command order."""
        self.commands.spawn(job)

    def command_done(self) -> None:
        self._rearm()

    async def dispatch(self, cmd: Command) -> None:
        """Run one command and write its reply, or its error reply or disconnect: errors are
        translated to the wire here, once."""
        method = cmd.method
        assert method is not None
        started = time.perf_counter()
        try:
            result = await route(self, cmd)
        except CommandError as exc:
            self._after_reply.clear()
            self.node.metrics.reply_errors.labels(method.value, str(exc.error.code), "").inc()
            if method is Method.CONNECT:
                self.session.connect_rejected()
                if self.transport.unidirectional:
                    self.disconnect(codes.uni_connect_disconnect(exc.error))
                    return
            self.send(self.session.error(cmd.id, exc.error))
            return
        except DisconnectError as exc:
            self.disconnect(exc.disconnect)
            return
        except EngineError as exc:
            log.debug("engine error on %s for client %s: %s", method.value, self.client_id, exc)
            self._after_reply.clear()
            if method is Method.CONNECT:
                self.session.connect_rejected()  # an error reply ends the connect: nothing held runs
            self.send(self.session.error(cmd.id, codes.ERROR_INTERNAL))
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            internal_error(method.value, self.client_id, exc)
            self.disconnect(codes.DISCONNECT_SERVER_ERROR)
            return
        finally:
            self.node.metrics.command_duration.labels(method.value, "").observe(time.perf_counter() - started)
        self.send(self.session.reply(cmd.id, method, result))
        after, self._after_reply = self._after_reply, []
        for callback in after:
            callback()
        if method is Method.CONNECT and not self._closed:
            # What arrived after the connect is decoded only now that it succeeded.
            self._queue(self.session.resume(len(self.commands)))

    # --- the Driver of gateway/connection/subscriptions.py (and Requester of channel_commands.py) -------

    def who(self) -> policy.Who:
        """The connection as ``gateway.protocol.policy`` sees it."""
        return policy.Who(self.user, self.client_id, self.settings.client.insecure)

    def caller(self) -> Caller:
        """The connection as ``gateway.connection.authorization`` sees it."""
        return Caller(
            self.who(),
            self.transport.name,
            self.session.codec.name,
            getattr(self.transport, "request_headers", {}),
            self.conn_meta,
            self.emulated_headers,
        )

    def client_info(self, sub: Subscription | None = None) -> ClientInfo:
        return ClientInfo(self.user, self.client_id, self.conn_info, sub.chan_info if sub else None)

    def after_reply(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current command's success reply is queued (dropped on error)."""
        self._after_reply.append(callback)

    # --- gateway.connection.refresh.Conn ---------------------------------------------------------

    def subscription(self, channel: str) -> Subscription | None:
        return self.subscriptions.get(channel)

    def update_channel_info(self, sub: Subscription, info: bytes) -> None:
        self.session.update_channel_info(sub, info)

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None:
        await self.subscriptions.unsubscribe(channel, push)

    # --- connect / refresh -------------------------------------------------------------------

    async def handle_connect(self, req: ConnectRequest) -> Result:
        """The ``connect`` command (§2): authorize, register, subscribe the server-side channels."""
        cfg = self.settings.client
        self.emulated_headers = req.headers if self.keeps_headers else {}
        grant = await self.authorizer.connect(self.caller(), req)
        hub = self.node.hub
        if grant is not None:
            self.user = grant.user
            self.conn_info = grant.info
            self.conn_meta = grant.meta
            if self.authorizer.server_side_refresh:
                self.refresher.connection(grant.expire_at)
            else:
                self.session.set_expiry(float(grant.expire_at) if grant.expire_at is not None else None)
        if (
            self.user
            and cfg.user_connection_limit
            and hub.user_connections(self.user) >= cfg.user_connection_limit
        ):
            raise DisconnectError(codes.DISCONNECT_CONNECTION_LIMIT)
        self.name = req.name
        server_subs = await self.subscriptions.connect_channels(grant.subs if grant is not None else {})
        self.subscriptions.alive()  # closed meanwhile: registered nowhere, released by nothing
        self.node.connecting.discard(self)
        hub.add_client(self)
        self._registered = True
        self.node.lifecycle.connected(self.client_info(), self.transport.name)
        interval = cfg.ping_interval
        self.session.connected(
            now=self.clock(),
            first_ping_delay=random.uniform(interval / 2, interval) if interval > 0 else None,
        )
        self.node.metrics.connections_accepted.labels(
            self.transport.name, self.session.codec.name, req.name, req.version
        ).inc()
        subs = await self.subscriptions.subscribe_at_connect(server_subs, req.subs)
        result = self.session.connect_result(
            client=self.client_id,
            version=f"{VERSION} Taskcast",
            now=self.clock(),
            subs=subs,
            session=self.session_id,
            node=self.node.uid if self.transport.emulation else "",  # /emulation POSTs name it
            server_time=cfg.connect_include_server_time,
        )
        return dataclasses.replace(result, data=grant.data) if grant is not None and grant.data else result

    async def handle_refresh(self, req: RefreshRequest) -> RefreshResult:
        """The ``refresh`` command (§5.4): a new connection expiry (and info) from the authorizer."""
        grant = await self.authorizer.refresh(self.caller(), req)
        self.session.set_expiry(float(grant.expire_at) if grant.expire_at is not None else None)
        if grant.info is not None:
            self.conn_info = grant.info
        return self.session.refresh_result(self.clock())

    # --- gateway.hub.Connection: the channel-level members are the fan-out's and subscriptions' --

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        self.fanout.on_publication(channel, pub, epoch, push)  # the fan-out hot path

    def direct_target(self, channel: str) -> DirectTarget | None:
        return self.fanout.direct_target(channel)  # when the hub snapshots its fan-out

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None:
        self.fanout.on_join_leave(channel, key, push)

    def check_position(self, channel: str, top: StreamPosition) -> None:
        self.fanout.check_position(channel, top)

    def subscribe_server_side(
        self, channel: str, sub: policy.ServerSub, recovery: SubscribeRecovery | None
    ) -> None:
        self.subscriptions.subscribe_server_side(channel, sub, recovery)

    def unsubscribe_server_side(self, channel: str) -> None:
        self.shared_poll.drop_channel(channel, codes.UNSUBSCRIBE_SERVER)
        self.subscriptions.unsubscribe_server_side(channel)

    def presence_tick(self) -> None:
        self.subscriptions.presence_tick()

    def refresh_server_side(self, *, expired: bool, expire_at: int | None, info: bytes | None = None) -> None:
        if expired:
            self.disconnect(codes.DISCONNECT_EXPIRED)
            return
        if info is not None:
            self.conn_info = info
        if expire_at:
            self.session.set_expiry(float(expire_at))
            self._rearm()

    # --- timers ------------------------------------------------------------------------------

    def _rearm(self) -> None:
        """Put the connection on the wheel for the session's next deadline."""
        if self._closed:
            return
        self._wheel.schedule(self, self.session.next_deadline())  # unchanged slot: nothing to do

    def on_wheel(self) -> None:
        """The deadline wheel's visit (gateway/connection/wheel.py): act on what is due."""
        if self._closed:
            return
        for action in self.session.on_deadline(self.clock()):
            if isinstance(action, codes.Disconnect):
                self.disconnect(action)
                return
            if isinstance(action, SendPing):
                self.send_queue.put_now(action.frame, _ping_push(action.frame))
            elif isinstance(action, ExpireSubscription):
                self.spawn(functools.partial(self.unsubscribe, action.channel, codes.UNSUBSCRIBE_EXPIRED))
        self._rearm()

    # --- outgoing ----------------------------------------------------------------------------

    def send(self, payload: bytes) -> None:
        """Queue a reply or connection-level push for the end-of-tick write."""
        self.send_queue.put(payload)

    # --- closing -----------------------------------------------------------------------------

    def disconnect(self, disconnect: codes.Disconnect) -> None:
        """Close the connection with this code (idempotent). Queued output is flushed first."""
        if self._closed:
            return
        self.send_queue.flush()
        self._closed = True
        self.node.metrics.server_disconnects.labels(str(disconnect.code)).inc()
        try:
            self.transport.close(disconnect)
        except Exception:
            log.debug("close failed for client %s", self.client_id, exc_info=True)
        self.connection_lost(disconnect)

    def connection_lost(self, disconnect: codes.Disconnect = codes.DISCONNECT_CONNECTION_CLOSED) -> None:
        """The transport is gone (``disconnect``: why, for the lifecycle hooks): release
        everything this connection held (idempotent). Once released, the connection drops its
        parts (``_sever``): it is then freed by reference counting, with no collection."""
        if self._lost:
            return
        self._lost = True
        self._closed = True
        self.send_queue.close()
        self.session.closed()
        self.node.connecting.discard(self)
        self._wheel.cancel(self)
        self.refresher.close()
        self.streams.close()
        self.commands.close()
        if self._registered:
            self._registered = False
            self.node.hub.remove_client(self)
            self.node.lifecycle.disconnected(self.client_info(), disconnect)
        releasing = self.subscriptions.close(self._released)
        self.shared_poll.close()
        if not releasing:
            self._released()

    def _released(self) -> None:
        """Every subscription released: sever once the (cancelled) command task has ended too."""
        self.commands.when_done(self._sever)

    def _sever(self) -> None:
        """Drop the references to the parts: each references this connection (its driver), so
        keeping them would leave a reference cycle per closed connection for the garbage collector
        (and frozen connections, gateway/gc_pauses.py, for ever). Runs after every release step
        and after the command task's end, outside the transport's callbacks; a closed connection
        answers nothing through them."""
        self._after_reply.clear()
        del self.refresher, self.commands, self.streams, self.shared_poll
        del self.subscriptions, self.fanout, self.maps, self.send_queue
