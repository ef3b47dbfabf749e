"""The single driver of one client connection: I/O, timers and engine calls around a sans-I/O
``Session`` (gateway/protocol/session.py) and the pure ``policy`` (PROTOCOL.md §1–§5).

The Session decides protocol state (ordering, pings, expiry, subscription table) and encodes
through the connection's codec; the policy decides permissions, token claims and positioning;
this module carries their outcomes out against the Node and the Transport. Errors are
translated to the wire here, once.

Commands of a connection run strictly in order on one task that exists only while commands are
pending. Outgoing replies and pushes are queued and written with ONE transport write per event
loop tick (``Flusher``: every connection with output in a tick is flushed by one callback, and
connections that queued the same shared pushes reuse one joined frame); the queue is bounded in
bytes (``client.queue_max_size``) and overflow disconnects with 3008 — a slow client never slows
anyone else. One loop timer per connection is armed for ``Session.next_deadline()``.

Subscribing (§3.3 step 6): the connection is registered in the hub BEFORE history is read, so
publications arriving meanwhile are buffered on the subscription; they are merged with the
recovered history by offset (``Node.position``), the reply is written, and only then do the
remaining buffered publications go out (``_go_live``). Nothing is lost, nothing is sent twice,
and the reply always precedes the channel's publications.

Only the transports and the composition root import this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.auth import TokenVerifier
from gateway.authorization import Authorizer, Caller, TokenAuthorizer
from gateway.channels import ChannelRules, resolve
from gateway.config import ChannelOptions
from gateway.delivery import delta_push, negotiate_delta, recovered_for, subscription_filter
from gateway.engine.base import EngineError
from gateway.errors import CommandError, DisconnectError, GatewayError
from gateway.hub import DirectTarget, SharedPush
from gateway.node import VERSION, Node
from gateway.outbox import Flusher, Outbox, Transport
from gateway.personal import evict_other_connections, personal_channel
from gateway.protocol import codes, policy
from gateway.protocol.codec import Codec
from gateway.protocol.messages import (
    ChannelRequest,
    ClientInfo,
    Command,
    ConnectRequest,
    EmptyResult,
    HistoryPage,
    HistoryRequest,
    Method,
    PresenceResult,
    PresenceStatsResult,
    Publication,
    PublishRequest,
    RefreshRequest,
    RefreshResult,
    Result,
    RPCRequest,
    StreamPosition,
    SubRefreshRequest,
    SubRefreshResult,
    SubscribeRecovery,
    SubscribeRequest,
    SubscribeResult,
    UnsubscribeRequest,
)
from gateway.protocol.session import (
    Delivery,
    Execute,
    ExpireSubscription,
    SendPing,
    Session,
    SessionConfig,
    State,
    Subscription,
    SubState,
)
from gateway.server_refresh import ServerRefresher

log = logging.getLogger("taskcast.gateway.client")

_SUBSCRIBED, _SUBSCRIBING = SubState.SUBSCRIBED, SubState.SUBSCRIBING
"""Enum members as module constants for the per-delivery path (a member lookup on an enum class
costs ~10 plain name lookups on Python 3.11)."""

MAX_PENDING_COMMANDS = 1024
"""Commands queued on one connection before it is disconnected with 3013."""

Job = Callable[[], Awaitable[object]]


__all__ = ["Client", "ClientFactory", "Connect", "Flusher", "Transport"]


class ClientFactory:
    """Builds the connections of one node; ``connect`` is the callable transports get."""

    def __init__(
        self,
        node: Node,
        *,
        verifier: TokenVerifier,
        sub_verifier: TokenVerifier,
        clock: Callable[[], float] = time.time,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.node = node
        self.verifier = verifier
        self.sub_verifier = sub_verifier
        self.clock = clock
        self.authorizer = authorizer or TokenAuthorizer(node.settings, verifier, sub_verifier, clock)
        self.flusher = Flusher()

    def connect(self, transport: Transport, codec: Codec | None = None) -> Client:
        """A new connection on an open transport (the stale-connect deadline starts now),
        speaking ``codec`` (None: the node's default, JSON)."""
        return Client(
            self.node,
            transport,
            codec=codec,
            verifier=self.verifier,
            sub_verifier=self.sub_verifier,
            clock=self.clock,
            flusher=self.flusher,
            authorizer=self.authorizer,
        )


class Connect(Protocol):
    """What transports call to open a connection (``ClientFactory.connect``)."""

    def __call__(self, transport: Transport, codec: Codec | None = None, /) -> Client: ...


class Client:
    """A connection. Transports call ``feed``, ``connection_lost`` and ``disconnect``; the hub,
    node and cluster use it as a ``gateway.hub.Connection``."""

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
        self._registered = False
        self.outbox = Outbox(
            transport,
            flusher or Flusher(),
            limit_bytes=cfg.queue_max_size,
            hold_bytes=cfg.queue_conflate_size,
            on_failure=self.disconnect,
            separator=self.codec.separator,
        )
        self._inbox: deque[Command | Job] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._after_reply: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        node.connecting.add(self)
        self._rearm()

    @property
    def closed(self) -> bool:
        return self._closed

    # --- incoming ----------------------------------------------------------------------------

    def feed(self, frame: bytes | str) -> None:
        """Decode a frame and queue its commands, strictly in order (§1.2). Never raises."""
        if self._closed:
            return
        for action in self.session.receive_frame(frame):
            if isinstance(action, codes.Disconnect):
                if self.session.protocol_error is not None:
                    log.info("bad frame from client %s: %s", self.client_id, self.session.protocol_error)
                self.disconnect(action)
                return
            if isinstance(action, Execute):
                if len(self._inbox) >= MAX_PENDING_COMMANDS:
                    # A client that sends faster than its commands can run: bound the memory
                    # it can pin, and let it reconnect.
                    self.disconnect(codes.DISCONNECT_TOO_MANY_REQUESTS)
                    return
                self._inbox.append(action.command)
        if self._inbox and self._worker is None:
            self._worker = self.loop.create_task(self._run_commands())

    def spawn(self, job: Job) -> None:
        """Run follow-up work (an unsubscribe after expiry, a presence refresh) in command order."""
        if self._closed:
            return
        self._inbox.append(job)
        if self._worker is None:
            self._worker = self.loop.create_task(self._run_commands())

    async def _run_commands(self) -> None:
        try:
            while self._inbox and not self._closed:
                job = self._inbox.popleft()
                if isinstance(job, Command):
                    await self._dispatch(job)
                else:
                    await self._run_job(job)
                self._rearm()
        finally:
            self._worker = None

    async def _run_job(self, job: Job) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except EngineError as exc:
            # The engine logs its failures once per state change; per job: debug, no traceback.
            log.debug("engine error in background job of client %s: %s", self.client_id, exc)
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
            self.send(self.session.error(cmd.id, exc.error))
            return
        except DisconnectError as exc:
            self.disconnect(exc.disconnect)
            return
        except EngineError as exc:
            log.debug("engine error on %s for client %s: %s", method.value, self.client_id, exc)
            self._after_reply.clear()
            self.send(self.session.error(cmd.id, codes.ERROR_INTERNAL))
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("internal error on %s for client %s", method.value, self.client_id)
            self.disconnect(codes.DISCONNECT_SERVER_ERROR)
            return
        finally:
            self.node.metrics.command_duration.labels(method.value, "").observe(time.perf_counter() - started)
        self.send(self.session.reply(cmd.id, method, result))
        after, self._after_reply = self._after_reply, []
        for callback in after:
            callback()

    async def _handle(self, cmd: Command) -> Result:
        req = cmd.request
        if isinstance(req, ConnectRequest):
            return await self._connect(req)
        if isinstance(req, SubscribeRequest):
            return await self._subscribe(req)
        if isinstance(req, UnsubscribeRequest):
            await self.unsubscribe(req.channel)
            return EmptyResult()
        if isinstance(req, PublishRequest):
            return await self._publish(req)
        if isinstance(req, HistoryRequest):
            return await self._history(req)
        if isinstance(req, ChannelRequest):
            return await self._presence(req, stats=cmd.method is Method.PRESENCE_STATS)
        if isinstance(req, RefreshRequest):
            return await self._refresh(req)
        if isinstance(req, SubRefreshRequest):
            return await self._sub_refresh(req)
        if isinstance(req, RPCRequest):
            return await self._rpc(req)
        if cmd.method is Method.SEND:
            raise DisconnectError(codes.DISCONNECT_NOT_AVAILABLE)
        raise CommandError(codes.ERROR_NOT_AVAILABLE)  # the v1 `ping` command

    # --- helpers ---------------------------------------------------------------------------

    def _who(self) -> policy.Who:
        return policy.Who(self.user, self.client_id, self.settings.client.insecure)

    def _rules(self, channel: str) -> ChannelRules:
        rules = resolve(self.settings, channel)
        if isinstance(rules, codes.Error):
            raise CommandError(rules)
        return rules

    def _options(self, channel: str) -> ChannelOptions:
        """The options of a channel named by publish / history / presence (empty ⇒ 107)."""
        if not channel:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        return self._rules(channel).options

    def subscription(self, channel: str) -> Subscription | None:
        return self.session.subscriptions.get(channel)

    def caller(self) -> Caller:
        """The connection as ``gateway.authorization`` sees it."""
        return Caller(
            self._who(),
            self.transport.name,
            self.session.codec.name,
            getattr(self.transport, "request_headers", {}),
            self.conn_meta,
        )

    def client_info(self, sub: Subscription | None = None) -> ClientInfo:
        return ClientInfo(self.user, self.client_id, self.conn_info, sub.chan_info if sub else None)

    # --- connect / refresh -------------------------------------------------------------------

    async def _connect(self, req: ConnectRequest) -> Result:
        cfg = self.settings.client
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
        server_subs = dict(grant.subs) if grant is not None else {}
        personal = personal_channel(self.settings, self.user)
        if personal:
            server_subs.setdefault(personal, policy.ServerSub())
            if cfg.subscribe_to_user_personal_channel.single_connection:
                await evict_other_connections(self.node, personal, self.user, self.client_id)
        if cfg.channel_limit and len(server_subs) > cfg.channel_limit:
            raise DisconnectError(codes.DISCONNECT_CHANNEL_LIMIT)
        self.node.connecting.discard(self)
        hub.add_client(self)
        self._registered = True
        interval = cfg.ping_interval
        self.session.connected(
            now=self.clock(),
            first_ping_delay=random.uniform(interval / 2, interval) if interval > 0 else None,
        )
        self.node.metrics.connections_accepted.labels(
            self.transport.name, self.session.codec.name, req.name, req.version
        ).inc()
        subs: dict[str, SubscribeResult] = {}
        for channel, server_sub in server_subs.items():
            subs[channel] = await self._subscribe_server(channel, server_sub, req.subs.get(channel))
        self._after_reply.append(self._connect_replied)
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

    def _connect_replied(self) -> None:
        """The connect reply is queued: server-side subscriptions go live (their buffered
        publications follow the reply)."""
        if self.session.state is not State.CONNECTED:
            return
        for sub in list(self.session.subscriptions.values()):
            if sub.server_side and sub.state is SubState.SUBSCRIBING:
                self._go_live(sub)

    async def _refresh(self, req: RefreshRequest) -> RefreshResult:
        grant = await self.authorizer.refresh(self.caller(), req)
        self.session.set_expiry(float(grant.expire_at) if grant.expire_at is not None else None)
        if grant.info is not None:
            self.conn_info = grant.info
        return self.session.refresh_result(self.clock())

    # --- subscribe ---------------------------------------------------------------------------

    def _check_limits(self, channel: str, rules: ChannelRules) -> None:
        error = self.session.check_subscribe(
            channel, rules.namespace, rules.options.subscription_limit_per_connection
        )
        if error is not None:
            raise CommandError(error)

    async def _subscribe(self, req: SubscribeRequest) -> SubscribeResult:
        """A client ``subscribe`` (§3)."""
        channel = req.channel
        if not channel:
            raise DisconnectError(codes.DISCONNECT_BAD_REQUEST)
        rules = self._rules(channel)
        opts = rules.options
        error = policy.subscription_type(req.type)
        if error is not None:
            raise CommandError(error)
        self._check_limits(channel, rules)
        grant = await self.authorizer.subscribe(self.caller(), req, rules)
        self._check_limits(channel, rules)  # the authorisation awaited
        flags = policy.subscription_flags(
            opts, self._who(), policy.Asks(req.recoverable, req.positioned, req.join_leave), grant.override
        )
        sub = _subscription(channel, rules, flags, server_side=False)
        if grant.expire_at is not None and self.authorizer.server_side_sub_refresh(channel):
            self.refresher.subscription(channel, grant.expire_at)
        else:
            sub.expire_at = float(grant.expire_at) if grant.expire_at is not None else None
        sub.chan_info = grant.info
        if req.tf is not None:
            sub.tags_filter = subscription_filter(opts, req.tf)
        sub.delta = negotiate_delta(opts, req.delta, filtered=sub.tags_filter is not None)
        result = await self._establish(
            sub,
            opts,
            SubscribeRecovery(req.recover, req.offset, req.epoch),
            reject_unrecovered=bool(req.flag & SubscribeRequest.FLAG_REJECT_UNRECOVERED),
            data=grant.data,
        )
        self._after_reply.append(lambda: self._go_live(sub))
        return result

    async def _subscribe_server(
        self, channel: str, server_sub: policy.ServerSub, wanted: SubscribeRecovery | None
    ) -> SubscribeResult:
        """A server-side subscription (connect token ``channels``/``subs``, server API). It stays
        SUBSCRIBING (buffering) until the caller queued the reply or push and calls ``_go_live``.
        Unknown channel ⇒ 102, as Centrifugo fails the connect."""
        rules = self._rules(channel)
        self._check_limits(channel, rules)
        flags = policy.subscription_flags(rules.options, self._who(), policy.Asks(), server_sub.override)
        sub = _subscription(channel, rules, flags, server_side=True)
        sub.chan_info = server_sub.info
        if server_sub.expire_at:
            sub.expire_at = float(server_sub.expire_at)
        return await self._establish(
            sub, rules.options, wanted or SubscribeRecovery(), reject_unrecovered=False, data=server_sub.data
        )

    async def _establish(
        self,
        sub: Subscription,
        opts: ChannelOptions,
        wanted: SubscribeRecovery,
        *,
        reject_unrecovered: bool,
        data: bytes | None,
    ) -> SubscribeResult:
        node = self.node
        channel = sub.channel
        self.session.add_subscription(sub)
        positioned = None
        try:
            await node.add_subscriber(channel, self)
            if sub.positioned:
                positioned = await node.position(
                    channel, opts, wanted if sub.recoverable else None, sub.buffer
                )
                if wanted.recover and sub.recoverable and not positioned.recovered and reject_unrecovered:
                    raise CommandError(codes.ERROR_UNRECOVERABLE_POSITION)
                sub.offset, sub.epoch = positioned.start.offset, positioned.start.epoch
        except BaseException:
            if self.session.remove_subscription(channel) is not None:
                await node.remove_subscriber(channel, self)
            raise
        if sub.presence:
            await node.presence.add(channel, self.client_id, self.client_info(sub))
        if opts.join_leave:
            await node.broker.publish_join(channel, self.client_info(sub))
        node.metrics.subscriptions_accepted.labels(self.name, "").inc()
        self.session.schedule_sub_expiry(sub)
        return SubscribeResult(
            expires=sub.expire_at is not None,
            ttl=policy.expiry_ttl(sub.expire_at, self.clock()) if sub.expire_at is not None else 0,
            recoverable=sub.recoverable,
            positioned=sub.positioned,
            recovered=positioned is not None and positioned.recovered,
            epoch=positioned.reply.epoch if positioned else "",
            offset=positioned.reply.offset if positioned else 0,
            publications=recovered_for(sub, positioned.publications, self.codec) if positioned else None,
            was_recovering=wanted.recover,
            data=data,
            delta=sub.delta,
        )

    def _go_live(self, sub: Subscription) -> None:
        """The reply (or subscribe push) is queued: deliver what was buffered, then go live."""
        if self.session.subscriptions.get(sub.channel) is not sub:
            return
        buffered, sub.buffer = sub.buffer, []
        sub.state = SubState.SUBSCRIBED
        self.node.hub.refresh_fanout(sub.channel)
        for pub, epoch, push in buffered:
            verdict = sub.check_position(pub.offset, epoch)
            if verdict is Delivery.DELIVER:
                self._deliver(sub, pub, push)
            elif verdict is Delivery.INSUFFICIENT_STATE:
                self.insufficient_state(sub)
                return

    async def _release(self, sub: Subscription) -> None:
        """Undo a subscription's node-level effects: hub/broker, presence, leave."""
        node = self.node
        await node.remove_subscriber(sub.channel, self)
        opts = self.settings.channel_options(sub.channel)
        if sub.presence:
            await node.presence.remove(sub.channel, self.client_id)
        if opts is not None and opts.join_leave:
            await node.broker.publish_leave(sub.channel, self.client_info(sub))

    async def _sub_refresh(self, req: SubRefreshRequest) -> SubRefreshResult:
        """``sub_refresh`` (§5.4). A token whose exp already passed does not extend the
        subscription: it is answered with the current expiry, and the subscription expires
        (2501) unless a valid token arrives."""
        sub = self.session.subscriptions.get(req.channel)
        if sub is None or sub.server_side:
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        grant = await self.authorizer.sub_refresh(self.caller(), req)
        if grant is not None and not grant.expired:
            sub.expire_at = float(grant.expire_at) if grant.expire_at is not None else None
            if grant.info is not None:
                sub.chan_info = grant.info
            self.session.schedule_sub_expiry(sub)
        return self.session.sub_refresh_result(sub, self.clock())

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None:
        """Drop a subscription (client request, server API, expiry, insufficient state)."""
        self.refresher.subscription(channel, None)
        sub = self.session.remove_subscription(channel)
        if sub is None:
            return
        if push is not None:
            self.node.metrics.server_unsubscribes.labels(str(push.code), "").inc()
            self.send(self.session.unsubscribe_push(channel, push))
        await self._release(sub)

    # --- channel commands without subscription state -------------------------------------------

    async def _publish(self, req: PublishRequest) -> EmptyResult:
        opts = self._options(req.channel)
        sub = self.session.subscriptions.get(req.channel)
        grant = await self.authorizer.publish(self.caller(), req, opts, subscribed=sub is not None)
        data = grant.data if grant.data is not None else req.data
        await self.node.publish(
            req.channel, opts, data, info=self.client_info(sub), skip_history=grant.skip_history
        )
        return EmptyResult()

    async def _history(self, req: HistoryRequest) -> HistoryPage:
        opts = self._options(req.channel)
        limit = policy.history_request(
            opts,
            self._who(),
            subscribed=req.channel in self.session.subscriptions,
            limit=req.limit,
            reverse=req.reverse,
            since_offset=req.since.offset if req.since is not None else None,
            cap=self.settings.client.history_max_publication_limit,
        )
        if isinstance(limit, codes.Error):
            raise CommandError(limit)
        result = await self.node.history(req.channel, opts, since=req.since, limit=limit, reverse=req.reverse)
        if req.since is not None and req.since.epoch and req.since.epoch != result.position.epoch:
            raise CommandError(codes.ERROR_UNRECOVERABLE_POSITION)
        return HistoryPage(result.publications, result.position.epoch, result.position.offset)

    async def _presence(self, req: ChannelRequest, *, stats: bool) -> PresenceResult | PresenceStatsResult:
        opts = self._options(req.channel)
        error = policy.presence_request(
            opts, self._who(), subscribed=req.channel in self.session.subscriptions
        )
        if error is not None:
            raise CommandError(error)
        if stats:
            st = await self.node.presence.stats(req.channel)
            return PresenceStatsResult(st.num_clients, st.num_users)
        return PresenceResult(await self.node.presence.presence(req.channel))

    async def _rpc(self, req: RPCRequest) -> Result:
        return await self.authorizer.rpc(self.caller(), req)

    # --- gateway.hub.Connection: fan-out and server-side actions -------------------------------

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        sub = self.session.subscriptions.get(channel)
        if sub is None or self._closed:
            return
        if sub.state is _SUBSCRIBED and not (sub.positioned or sub.delta or sub.tags_filter):
            self.outbox.put(push.payload, push)  # the common case, kept short: it runs per delivery
            return
        if sub.state is _SUBSCRIBING:
            sub.buffer.append((pub, epoch, push))
            return
        verdict = sub.check_position(pub.offset, epoch)
        if verdict is Delivery.DELIVER:
            self._deliver(sub, pub, push)
        elif verdict is Delivery.INSUFFICIENT_STATE:
            self.insufficient_state(sub)

    def direct_target(self, channel: str) -> DirectTarget | None:
        subs = self.session.subscriptions
        sub = subs.get(channel)
        if sub is None or self._closed or sub.state is not _SUBSCRIBED:
            return None
        return None if sub.positioned or sub.delta or sub.tags_filter else (subs, sub, self.outbox)

    def _deliver(self, sub: Subscription, pub: Publication, push: SharedPush) -> None:
        """Queue a publication that passed the position check: unless the tags filter drops it,
        as the shared push or (delta subscriptions) its delta / escaped form."""
        if sub.tags_filter is not None and not sub.tags_filter.match(pub.tags):
            return
        if sub.delta:
            push = delta_push(sub, pub, push, self.codec)
        self.outbox.put(push.payload, push)

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None:
        sub = self.session.subscriptions.get(channel)
        if sub is not None and sub.push_join_leave and sub.state is SubState.SUBSCRIBED:
            self.outbox.put(push.payload, push)

    def check_position(self, channel: str, top: StreamPosition) -> None:
        sub = self.session.subscriptions.get(channel)
        if sub is None or not sub.positioned or sub.state is not SubState.SUBSCRIBED or self._closed:
            return
        if (sub.epoch and top.epoch != sub.epoch) or top.offset > sub.offset:
            self.insufficient_state(sub)

    def insufficient_state(self, sub: Subscription) -> None:
        """Message loss detected on a subscription (§3.2)."""
        if sub.server_side:
            self.disconnect(codes.DISCONNECT_INSUFFICIENT_STATE)
        else:
            self.spawn(lambda: self.unsubscribe(sub.channel, codes.UNSUBSCRIBE_INSUFFICIENT_STATE))

    def subscribe_server_side(
        self, channel: str, sub: policy.ServerSub, recovery: SubscribeRecovery | None
    ) -> None:
        if not self._closed and channel not in self.session.subscriptions:
            self.spawn(functools.partial(self._server_subscribe, channel, sub, recovery))

    async def _server_subscribe(
        self, channel: str, server_sub: policy.ServerSub, wanted: SubscribeRecovery | None
    ) -> None:
        """Server API ``subscribe``: establish, push ``subscribe``, go live."""
        if self._closed or channel in self.session.subscriptions:
            return
        try:
            result = await self._subscribe_server(channel, server_sub, wanted)
        except (GatewayError, EngineError) as exc:
            log.info("server-side subscribe of %s to %s refused: %s", self.client_id, channel, exc)
            return
        self.send(self.session.subscribe_push(channel, result))
        sub = self.session.subscriptions.get(channel)
        if sub is not None:
            self._go_live(sub)

    def unsubscribe_server_side(self, channel: str) -> None:
        self.spawn(functools.partial(self.unsubscribe, channel, codes.UNSUBSCRIBE_SERVER))

    def refresh_server_side(self, *, expired: bool, expire_at: int | None, info: bytes | None = None) -> None:
        if expired:
            self.disconnect(codes.DISCONNECT_EXPIRED)
            return
        if info is not None:
            self.conn_info = info
        if expire_at:
            self.session.set_expiry(float(expire_at))
            self._rearm()

    def presence_tick(self) -> None:
        """Re-add this connection to presence of its channels (every presence_update_interval)."""
        for sub in self.session.subscriptions.values():
            if sub.presence and sub.state is SubState.SUBSCRIBED:
                self.spawn(
                    functools.partial(
                        self.node.presence.add, sub.channel, self.client_id, self.client_info(sub)
                    )
                )

    # --- timers ------------------------------------------------------------------------------

    def _rearm(self) -> None:
        """Arm the connection's one timer for the session's next deadline."""
        if self._closed:
            return
        at = self.session.next_deadline()
        if at == self._timer_at and (at is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            self._timer = self.loop.call_later(max(0.0, at - self.clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        for action in self.session.on_deadline(self.clock()):
            if isinstance(action, codes.Disconnect):
                self.disconnect(action)
                return
            if isinstance(action, SendPing):
                self.send(action.frame)
            elif isinstance(action, ExpireSubscription):
                self.spawn(functools.partial(self.unsubscribe, action.channel, codes.UNSUBSCRIBE_EXPIRED))
        self._rearm()

    # --- outgoing ----------------------------------------------------------------------------

    def send(self, payload: bytes) -> None:
        """Queue a reply or connection-level push for the end-of-tick write."""
        self.outbox.put(payload)

    # --- closing -----------------------------------------------------------------------------

    def disconnect(self, disconnect: codes.Disconnect) -> None:
        """Close the connection with this code (idempotent). Queued output is flushed first."""
        if self._closed:
            return
        self.outbox.flush()
        self._closed = True
        self.node.metrics.server_disconnects.labels(str(disconnect.code)).inc()
        try:
            self.transport.close(disconnect)
        except Exception:
            log.debug("close failed for client %s", self.client_id, exc_info=True)
        self.connection_lost()

    def connection_lost(self) -> None:
        """The transport is gone: release everything this connection held (idempotent)."""
        self._closed = True
        self.outbox.close()
        self.session.closed()
        self.node.connecting.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.refresher.close()
        self._inbox.clear()
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
        if self._registered:
            self._registered = False
            self.node.hub.remove_client(self)
        subs = self.session.clear_subscriptions()
        if subs:
            self.node.background(self._release_all(subs))

    async def _release_all(self, subs: list[Subscription]) -> None:
        for sub in subs:
            await self._release(sub)


def _subscription(
    channel: str, rules: ChannelRules, flags: policy.Flags, *, server_side: bool
) -> Subscription:
    return Subscription(
        channel=channel,
        namespace=rules.namespace,
        server_side=server_side,
        positioned=flags.positioned,
        recoverable=flags.recoverable,
        push_join_leave=flags.push_join_leave,
        presence=flags.presence,
    )
