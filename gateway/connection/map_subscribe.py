"""The map subscriptions of one connection: the phased subscribe flow (gateway/maps/phases.py)
from its first command to a live subscription.

The seam: gateway/connection/subscriptions.py owns live subscriptions (sub_refresh, release,
delivery through its ``fanout``); this module owns a map flow until it goes live, then enters
its ``Subscription`` into the Session's table like any other (positioned and recoverable when
the map keeps a stream), so unsubscribe, expiry, delivery and position checks are the ordinary
ones. A flow in progress (``MapPending``) counts against ``client.channel_limit``, is not
authorized again after its first command, and ends when it goes live, fails, restarts (a
first state page again), or outlives ``map.subscribe_catch_up_timeout`` (disconnect 3008).

Going live (centrifuge's order): the subscription enters the table and the hub first, so live
changes are buffered on it; then the stream is read from the client's position (at most
``live_transition_max_publication_limit`` changes, else 112: re-read the state); the reply
carries them with the stream top, and once it is queued the buffered changes past that top are
delivered (``Session.go_live``; each position-checked). Errors: another epoch or a position the
stream lost ⇒ 112 (the SDK re-reads from scratch), a namespace that is not a map ⇒ 107, no map
engine ⇒ 108, a continuation without a flow ⇒ 103.

Fossil delta (centrifuge's rule): a command asking ``delta: "fossil"`` in a namespace whose
``allowed_delta_types`` lists it (and without a tags filter, which could hide a key's previous
value from the client) gets the values of every phase in the delta form of gateway/maps/delta.py
(over JSON, JSON strings), the LIVE reply ``delta: true`` with its changes by the per-key rule,
then live changes as deltas against each key's previous value (gateway/connection/delivery.py).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config.schema import ChannelOptions
from gateway.connection.authorization import Authorizer
from gateway.connection.delivery import subscription_filter
from gateway.connection.subscriptions import Driver, Subscriptions, channel_rules
from gateway.engine.map_base import MapBroker, PositionLost
from gateway.errors import CommandError, DisconnectError
from gateway.maps import delta as map_delta
from gateway.maps import phases
from gateway.maps.options import MapOptions, resolve
from gateway.maps.phases import MapPending
from gateway.node import Node
from gateway.protocol import codes, policy
from gateway.protocol.messages import Publication, StreamPosition, SubscribeRequest, SubscribeResult
from gateway.protocol.session import Session
from gateway.protocol.subscription import Subscription
from gateway.proxy.replies import SubscribeGrant

__all__ = ["MapSubscriptions"]


class MapSubscriptions:
    """The map subscribe flows of one connection.

    Args:
        driver: The connection's driver.
        node: The node (its ``maps`` engine; None refuses map subscriptions with 108).
        session: The connection's Session (the subscription table).
        subscriptions: The connection's live subscriptions (their fan-out delivers changes).
        authorizer: Decides the first command of a flow.
        clock: Unix seconds.
    """

    __slots__ = ("_authorizer", "_clock", "_driver", "_node", "_pending", "_session", "_subscriptions")

    def __init__(
        self,
        driver: Driver,
        node: Node,
        session: Session,
        subscriptions: Subscriptions,
        authorizer: Authorizer,
        clock: Callable[[], float],
    ) -> None:
        self._driver = driver
        self._node = node
        self._session = session
        self._subscriptions = subscriptions
        self._authorizer = authorizer
        self._clock = clock
        self._pending: dict[str, MapPending] = {}

    async def subscribe(self, req: SubscribeRequest) -> SubscribeResult:
        """One command of a map subscribe flow (``type`` 1, or 2 / 3 for a ``map_clients`` /
        ``map_users`` presence map).

        Raises:
            CommandError: refused (the flow ends, nothing is left subscribed).
            DisconnectError: an empty channel (3501), a flow past its catch-up timeout (3008).
        """
        channel = req.channel
        if not channel:
            raise DisconnectError(codes.DISCONNECT_BAD_REQUEST)
        rules = channel_rules(self._node.settings, channel)
        opts = rules.options
        maps = self._node.maps
        if phases.MAP_TYPES.get(req.type) != opts.subscription_type:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        if maps is None:
            raise CommandError(codes.ERROR_NOT_AVAILABLE)
        if channel in self._session.subscriptions:
            raise CommandError(codes.ERROR_ALREADY_SUBSCRIBED)
        mopts = resolve(opts.map)
        pending = self._pending.get(channel)
        if pending is not None and pending.expired(self._clock(), mopts.catch_up_timeout):
            del self._pending[channel]
            raise DisconnectError(codes.DISCONNECT_SLOW)
        if req.cursor and pending is None:
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        if pending is None or (req.phase == phases.PHASE_STATE and not req.cursor):
            if req.phase == phases.PHASE_STREAM and not req.recover:
                raise CommandError(codes.ERROR_PERMISSION_DENIED)
            self._pending.pop(channel, None)
            pending = await self._start(req, opts, rules.namespace)
        try:
            if req.phase == phases.PHASE_STATE:
                return await self._state(req, maps, mopts, pending, opts, rules.namespace)
            if req.phase == phases.PHASE_STREAM:
                return await self._stream(req, maps, mopts, pending, opts, rules.namespace)
            if req.phase == phases.PHASE_LIVE and mopts.has_stream:
                since = StreamPosition(req.offset, req.epoch)
                return await self._go_live(req, maps, mopts, pending, opts, rules.namespace, since, None)
            raise CommandError(codes.ERROR_BAD_REQUEST)
        except PositionLost:
            self._pending.pop(channel, None)
            raise CommandError(codes.ERROR_UNRECOVERABLE_POSITION) from None
        except BaseException:
            self._pending.pop(channel, None)
            raise

    async def _start(self, req: SubscribeRequest, opts: ChannelOptions, namespace: str) -> MapPending:
        """A new flow: limits, authorization, the tags filter (first command only). Flows
        abandoned past their catch-up timeout are dropped first (they count against the limit)."""
        now, session = self._clock(), self._session
        for channel, other in list(self._pending.items()):
            opts_of = self._node.settings.channel_options(channel)
            if opts_of is None or other.expired(now, resolve(opts_of.map).catch_up_timeout):
                del self._pending[channel]
        limit = session.channel_limit
        if limit and len(session.subscriptions) + len(self._pending) >= limit:
            raise CommandError(codes.ERROR_LIMIT_EXCEEDED)
        error = session.check_subscribe(req.channel, namespace, opts.subscription_limit_per_connection)
        if error is not None:
            raise CommandError(error)
        grant = await self._authorizer.subscribe(
            self._driver.caller(), req, channel_rules(self._node.settings, req.channel)
        )
        tags_filter = subscription_filter(opts, req.tf) if req.tf is not None else None
        pending = MapPending(self._clock(), grant, tags_filter)
        self._pending[req.channel] = pending
        return pending

    def _delta(self, req: SubscribeRequest, opts: ChannelOptions, pending: MapPending) -> bool:
        """Whether this command gets fossil delta: asked for, allowed by the namespace, and no
        tags filter (an unknown type is not negotiated, as in centrifuge's map subscribe)."""
        return bool(req.delta) and req.delta in opts.allowed_delta_types and pending.tags_filter is None

    def _whole(self, pubs: list[Publication], delta: bool) -> list[Publication]:
        """State entries / stream page changes as sent: for a delta flow over JSON, their data
        as JSON strings (the exact bytes centrifuge-js keeps as each key's delta base)."""
        binary = self._driver.codec.binary
        return [map_delta.whole(p, binary) for p in pubs] if delta and not binary else pubs

    async def _state(
        self,
        req: SubscribeRequest,
        maps: MapBroker,
        mopts: MapOptions,
        pending: MapPending,
        opts: ChannelOptions,
        namespace: str,
    ) -> SubscribeResult:
        limit = mopts.page_size(req.limit)
        revision = StreamPosition(req.offset, req.epoch) if (req.offset or req.epoch) else None
        if req.cursor and pending.position is not None:
            revision = pending.position
        page = await maps.read_state(req.channel, mopts, cursor=req.cursor, limit=limit, revision=revision)
        if not req.cursor or pending.position is None:
            pending.position = page.position
        frozen = pending.position
        pubs = phases.state_page(page.publications, revision, pending.tags_filter)
        if not page.cursor and phases.live_after_state(
            has_stream=mopts.has_stream, frozen=frozen.offset, limit=limit, top=page.position.offset
        ):
            return await self._go_live(req, maps, mopts, pending, opts, namespace, frozen, pubs)
        return SubscribeResult(
            type=phases.TYPE_MAP,
            phase=phases.PHASE_STATE,
            cursor=page.cursor,
            epoch=page.position.epoch,
            offset=frozen.offset,
            state=self._whole(pubs, self._delta(req, opts, pending)),
        )

    async def _stream(
        self,
        req: SubscribeRequest,
        maps: MapBroker,
        mopts: MapOptions,
        pending: MapPending,
        opts: ChannelOptions,
        namespace: str,
    ) -> SubscribeResult:
        if not mopts.has_stream:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        since = StreamPosition(req.offset, req.epoch)
        if pending.position is not None and req.epoch and req.epoch != pending.position.epoch:
            raise PositionLost(req.epoch)
        limit = mopts.page_size(req.limit)
        if pending.stream_start is None:
            pending.stream_start = (await maps.read_stream(req.channel, mopts, limit=0)).position.offset
        if phases.live_in_stream(offset=req.offset, limit=limit, stream_start=pending.stream_start):
            return await self._go_live(req, maps, mopts, pending, opts, namespace, since, None)
        read = await maps.read_stream(req.channel, mopts, since=since, limit=limit)
        pubs = read.publications
        offset = phases.stream_page_offset(pubs, req.offset)
        if pending.tags_filter is not None:
            pubs = [p for p in pubs if pending.tags_filter.match(p.tags)]
        return SubscribeResult(
            type=phases.TYPE_MAP,
            phase=phases.PHASE_STREAM,
            epoch=read.position.epoch,
            offset=offset,
            publications=self._whole(pubs, self._delta(req, opts, pending)),
        )

    async def _go_live(
        self,
        req: SubscribeRequest,
        maps: MapBroker,
        mopts: MapOptions,
        pending: MapPending,
        opts: ChannelOptions,
        namespace: str,
        since: StreamPosition,
        state: list[Publication] | None,
    ) -> SubscribeResult:
        """Enter the subscription (hub first: changes buffer), replay the stream since
        ``since``, answer LIVE; the buffered changes follow the reply."""
        channel, node, session, driver = req.channel, self._node, self._session, self._driver
        self._pending.pop(channel, None)
        grant: SubscribeGrant = pending.grant
        expire_at = float(grant.expire_at) if grant.expire_at is not None else None
        delta = self._delta(req, opts, pending)
        sub = Subscription(
            channel,
            namespace,
            positioned=mopts.has_stream,
            recoverable=mopts.has_stream,
            presence=opts.presence,
            expire_at=expire_at,
            chan_info=grant.info,
            tags_filter=pending.tags_filter,
            delta=delta,
        )
        error = session.check_subscribe(channel, namespace, opts.subscription_limit_per_connection)
        if error is not None:
            raise CommandError(error)
        self._subscriptions.enter(sub)
        position = since
        replay: list[Publication] = []
        joining = False
        try:
            await node.add_subscriber(channel, driver)
            if mopts.has_stream:
                cap = mopts.live_transition_limit
                read = await maps.read_stream(channel, mopts, since=since, limit=cap + 1 if cap > 0 else -1)
                if (since.epoch and since.epoch != read.position.epoch) or (0 < cap < len(read.publications)):
                    raise PositionLost(since.epoch)
                position = read.position
                replay = read.publications
                if pending.tags_filter is not None:
                    replay = [p for p in replay if pending.tags_filter.match(p.tags)]
                session.position(sub, position.offset, position.epoch)
            self._subscriptions.alive()
            joining = True
            await self._subscriptions.presence.join(sub)  # engine and map presence (connection/presence.py)
        except BaseException:
            if session.remove_subscription(channel) is not None:
                await self._subscriptions.undo(sub, presence=joining)
            raise
        session.schedule_sub_expiry(sub)
        recovering = state is None and req.recover
        metrics = node.metrics
        metrics.subscriptions_accepted.labels(driver.name, "").inc()
        node.lifecycle.subscribed(channel, driver.client_info(sub), sub.presence)  # webhooks
        if state is not None:  # centrifuge's action names of the three ways to go live
            metrics.action("map_subscribe_state_to_live", channel)
        else:
            phase = "stream_to_live" if req.phase == phases.PHASE_STREAM else "recovery_join"
            metrics.action(f"map_subscribe_{phase}", channel)
        if recovering:
            metrics.recover.labels("yes", "", "yes" if replay else "no").inc()
        driver.after_reply(lambda: self._live(sub))
        if delta:
            state = self._whole(state, delta) if state is not None else None
            replay = map_delta.recovered(replay, driver.codec.binary)
        return SubscribeResult(
            type=phases.TYPE_MAP,
            phase=phases.PHASE_LIVE,
            expires=expire_at is not None,
            ttl=policy.expiry_ttl(expire_at, self._clock()) if expire_at is not None else 0,
            recoverable=mopts.has_stream,
            recovered=recovering,
            was_recovering=recovering,
            epoch=position.epoch,
            offset=position.offset,
            state=state,
            publications=replay,
            data=grant.data,
            delta=delta,
        )

    def _live(self, sub: Subscription) -> None:
        """The LIVE reply is queued: the changes buffered meanwhile follow it."""
        buffered = self._session.go_live(sub)
        if buffered is None:
            return
        self._node.hub.refresh_fanout(sub.channel)
        self._subscriptions.fanout.deliver_buffered(sub, buffered)
