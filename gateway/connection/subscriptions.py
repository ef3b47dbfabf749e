"""The channel subscriptions of one connection, from establishing to release (PROTOCOL.md §3,
§5.4).

The seam: gateway/connection/client.py drives ONE connection (I/O, its timer, command order, connect,
refresh, disconnect); this module owns the life of each channel subscription on it: establish
(client ``subscribe``; streamed by the backend; the server-side routes — connect token
``channels``/``subs``, the personal channel, server API ``subscribe`` — are
gateway/connection/server_subscriptions.py's, over this life), go live once the reply or push
is queued, ``sub_refresh``, and release (unsubscribe by client, server API, expiry or
insufficient state; connection close). Delivery in between (the fan-out hot path,
joins/leaves, stream-top checks, insufficient state) is its ``fanout``'s
(gateway/connection/delivery.py).

The subscription table and every subscription's state (limits, per-namespace counts, expiry
deadlines, SUBSCRIBING → SUBSCRIBED → UNSUBSCRIBED, positions, buffers) are the ``Session``'s pure
state: this module asks it for each transition (``add_subscription``, ``buffer``, ``position``,
``go_live``, ``extend_subscription``, ``remove_subscription``) and assigns none of it. The
permissions and flags are the pure ``policy``'s; this module carries their outcomes out against
the ``Node`` and the connection's ``SendQueue``, and reaches the driver only through ``Driver``
and the backend streams only through ``StreamHook``. It logs to the connection's logger.

Subscribing (§3.3 step 6): the connection is registered in the hub BEFORE history is read, so
publications arriving meanwhile are buffered on the subscription; they are merged with the
recovered history by offset (``Positions.start``), the reply is written, and only then do the
remaining buffered publications go out (``Session.go_live`` hands them over, ``Fanout``
delivers them). Nothing is lost, nothing is sent twice, and the reply always precedes the
channel's publications.

Imports no transport and not gateway/connection/client.py (tests/test_layering.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.channels import ChannelRules, resolve
from gateway.config.schema import ChannelOptions, Settings
from gateway.connection.authorization import Authorizer, Caller
from gateway.connection.delivery import Fanout, negotiate_delta, recovered_for, subscription_filter
from gateway.connection.presence import ChannelPresence
from gateway.connection.refresh import ServerRefresher
from gateway.connection.sendqueue import SendQueue
from gateway.errors import CommandError, ConnectionClosed, DisconnectError
from gateway.hub import Connection
from gateway.node import Node
from gateway.protocol import codes, policy
from gateway.protocol.messages import (
    ClientInfo,
    SubRefreshRequest,
    SubRefreshResult,
    SubscribeRecovery,
    SubscribeRequest,
    SubscribeResult,
)
from gateway.protocol.session import Session
from gateway.protocol.subscription import Subscription, SubState
from gateway.proxy.replies import SubscribeGrant

log = logging.getLogger("taskcast.gateway.client")

_SUBSCRIBED, _SUBSCRIBING = SubState.SUBSCRIBED, SubState.SUBSCRIBING
"""Enum members as module constants for the per-delivery path (a member lookup on an enum class
costs ~10 plain name lookups on Python 3.11)."""

__all__ = ["Driver", "Subscriptions", "channel_rules", "new_subscription"]


class Driver(Connection, Protocol):
    """What the subscriptions need of their connection's driver (gateway/connection/client.py): the hub
    ``Connection`` it registers as subscriber; its identity (``name``: the connect's client name,
    a metrics label; ``who``, ``caller``, ``client_info``: as the policy, the authorizer and
    publications see it); and three actions: ``send`` an encoded push for this tick's write,
    ``spawn`` a job in command order (dropped once closed), ``after_reply``: call back right after
    the current command's success reply is queued (never, if it fails)."""

    name: str

    def who(self) -> policy.Who: ...

    def caller(self) -> Caller: ...

    def client_info(self, sub: Subscription | None = None) -> ClientInfo: ...

    def send(self, payload: bytes) -> None: ...

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None: ...

    def after_reply(self, callback: Callable[[], None]) -> None: ...


class OpenStream(Protocol):
    """A backend stream opened for a subscribe, its first message read (the ``grant``), and
    not yet bound to a subscription: ``attach`` it to the subscription entered for it, or
    ``cancel`` it."""

    grant: SubscribeGrant

    def attach(self, sub: Subscription) -> None: ...

    def cancel(self) -> None: ...


class StreamHook(Protocol):
    """Subscriptions the application backend streams (``channel.proxy.subscribe_stream``,
    gateway/connection/proxy_streams.py): not in the hub, broker or history. This module keeps
    their subscription state (the Session's table, presence, metrics); the hook keeps the
    streams: ``open_stream``, ``start`` reading it once its subscription is live, ``release`` it
    (False: ``sub`` has no stream)."""

    async def open_stream(self, req: SubscribeRequest, rules: ChannelRules) -> OpenStream: ...

    def start(self, sub: Subscription) -> None: ...

    def release(self, sub: Subscription) -> bool: ...


def channel_rules(settings: Settings, channel: str) -> ChannelRules:
    """The namespace rules of ``channel``.

    Raises:
        CommandError: its channel error (unknown namespace 102, bad name).
    """
    rules = resolve(settings, channel)
    if isinstance(rules, codes.Error):
        raise CommandError(rules)
    return rules


class Subscriptions:
    """The subscriptions of one connection.

    Args:
        driver: The connection's driver.
        node: The node (hub, broker, presence, metrics, settings).
        session: The connection's Session: it holds the table, limits and expiry deadlines.
        send_queue: Where deliveries are queued (by ``fanout``, the hub's callbacks).
        authorizer: Decides subscribe and sub_refresh.
        refresher: The connection's server-side refresh timers (a subscription's is armed at
            subscribe and cancelled at unsubscribe).
        clock: Unix seconds (ttl in replies).
        streams: Where a namespace with ``subscribe_stream_proxy_enabled`` subscribes (after the
            permission and limit checks) and releases.
    """

    __slots__ = (
        "_authorizer",
        "_clock",
        "_closed",
        "_codec",
        "_driver",
        "_node",
        "_refresher",
        "_session",
        "_settings",
        "_streams",
        "fanout",
        "presence",
    )

    def __init__(
        self,
        driver: Driver,
        node: Node,
        session: Session,
        send_queue: SendQueue,
        authorizer: Authorizer,
        refresher: ServerRefresher,
        clock: Callable[[], float],
        streams: StreamHook | None = None,
    ) -> None:
        self._driver = driver
        self._streams = streams
        self._node = node
        self._settings = node.settings
        self._session = session
        self._codec = driver.codec
        self._authorizer = authorizer
        self._refresher = refresher
        self._clock = clock
        self._closed = False
        self.fanout = Fanout(driver, session, send_queue, self.unsubscribe)
        """The hub's delivery callbacks for these subscriptions (gateway.hub.Connection)."""
        self.presence = ChannelPresence(driver, node)
        """The connection's presence entries of its subscriptions (engine and map presence)."""

    def get(self, channel: str) -> Subscription | None:
        return self._session.subscriptions.get(channel)

    def __contains__(self, channel: str) -> bool:
        return channel in self._session.subscriptions

    # --- establish -----------------------------------------------------------------------------

    def _check_limits(self, channel: str, rules: ChannelRules) -> None:
        error = self._session.check_subscribe(
            channel, rules.namespace, rules.options.subscription_limit_per_connection
        )
        if error is not None:
            raise CommandError(error)

    async def subscribe(self, req: SubscribeRequest) -> SubscribeResult:
        """A client ``subscribe`` (§3); the subscription goes live after its reply is queued.

        Raises:
            CommandError: refused (the reply's error); nothing is left subscribed.
            DisconnectError: an empty channel (3501) or the authorizer's disconnect.
        """
        channel = req.channel
        if not channel:
            raise DisconnectError(codes.DISCONNECT_BAD_REQUEST)
        rules = channel_rules(self._settings, channel)
        opts = rules.options
        error = policy.subscription_type(req.type, opts.subscription_type)
        if error is not None:
            raise CommandError(error)
        self._check_limits(channel, rules)
        if opts.subscribe_stream_proxy_enabled and self._streams is not None:  # the backend streams it
            return await self._subscribe_stream(self._streams, req, rules)
        grant = await self._authorizer.subscribe(self._driver.caller(), req, rules)
        self._check_limits(channel, rules)  # the authorisation awaited
        flags = policy.subscription_flags(
            opts,
            self._driver.who(),
            policy.Asks(req.recoverable, req.positioned, req.join_leave),
            grant.override,
        )
        expire_at: float | None = None
        if grant.expire_at is not None and self._authorizer.server_side_sub_refresh(channel):
            self._refresher.subscription(channel, grant.expire_at)
        elif grant.expire_at is not None:
            expire_at = float(grant.expire_at)
        tags_filter = subscription_filter(opts, req.tf) if req.tf is not None else None
        sub = new_subscription(
            channel,
            rules,
            flags,
            server_side=False,
            expire_at=expire_at,
            chan_info=grant.info,
            tags_filter=tags_filter,
            delta=negotiate_delta(opts, req.delta, filtered=tags_filter is not None),
        )
        result = await self._establish(
            sub,
            opts,
            SubscribeRecovery(req.recover, req.offset, req.epoch),
            reject_unrecovered=bool(req.flag & SubscribeRequest.FLAG_REJECT_UNRECOVERED),
            data=grant.data,
        )
        self._driver.after_reply(lambda: self._go_live(sub))
        return result

    async def _subscribe_stream(
        self, streams: StreamHook, req: SubscribeRequest, rules: ChannelRules
    ) -> SubscribeResult:
        """A subscription the backend streams: open the stream (its first message answers the
        subscribe), enter the subscription, add presence; it goes live (the stream is read)
        once the reply is queued. Nothing is left open on a failure.

        Raises:
            CommandError: the backend's error; 100 when the stream fails or is silent; 105 when
                the connection subscribed or closed meanwhile.
            DisconnectError: the backend's disconnect.
        """
        opened = await streams.open_stream(req, rules)
        grant, channel, driver = opened.grant, req.channel, self._driver
        try:
            if self._closed or channel in self._session.subscriptions:  # the connection moved on
                raise CommandError(codes.ERROR_ALREADY_SUBSCRIBED)
            flags = policy.subscription_flags(rules.options, driver.who(), policy.Asks(), grant.override)
            sub = Subscription(
                channel,
                rules.namespace,
                presence=flags.presence,
                expire_at=float(grant.expire_at) if grant.expire_at is not None else None,
                chan_info=grant.info,
            )
            await self.presence.join(sub)
            if self._closed:  # closed while joining: its release has run, this one must not stay
                await self.presence.leave(sub)
            self.enter(sub)
        except BaseException:  # an engine failure too: answered by the driver, no stream left open
            opened.cancel()
            raise
        opened.attach(sub)
        self._node.metrics.subscriptions_accepted.labels(driver.name, "").inc()
        self._node.lifecycle.subscribed(channel, driver.client_info(sub), sub.presence)
        self._session.schedule_sub_expiry(sub)
        driver.after_reply(lambda: self._stream_live(streams, sub))
        return SubscribeResult(
            expires=sub.expire_at is not None,
            ttl=policy.expiry_ttl(sub.expire_at, self._clock()) if sub.expire_at is not None else 0,
            data=grant.data,
        )

    def _stream_live(self, streams: StreamHook, sub: Subscription) -> None:
        """The reply to a streamed subscribe is queued: live, the stream is read."""
        if self._session.go_live(sub) is not None:
            streams.start(sub)

    async def _establish(
        self,
        sub: Subscription,
        opts: ChannelOptions,
        wanted: SubscribeRecovery,
        *,
        reject_unrecovered: bool,
        data: bytes | None,
    ) -> SubscribeResult:
        """Add ``sub`` to the table and the hub, position it, add presence and publish the join
        (a server-side subscription's join when it goes live). A failure of any of these steps
        leaves nothing subscribed: the table entry, the hub entry and broker subscription, and
        presence are undone (each undo step runs whatever the others did)."""
        node = self._node
        driver = self._driver
        channel = sub.channel
        self.enter(sub)
        positioned = None
        joining = False
        try:
            await node.add_subscriber(channel, driver)
            if sub.positioned:
                positioned = await node.positions.start(
                    channel, opts, wanted if sub.recoverable else None, sub.buffer
                )
                if wanted.recover and sub.recoverable and not positioned.recovered and reject_unrecovered:
                    raise CommandError(codes.ERROR_UNRECOVERABLE_POSITION)
                self._session.position(sub, positioned.start.offset, positioned.start.epoch)
            self.alive()
            joining = True
            await self.presence.join(sub)
            if opts.join_leave and not sub.server_side:
                await node.broker.publish_join(channel, driver.client_info(sub))
        except BaseException:
            if self._session.remove_subscription(channel) is not None:
                await self.undo(sub, presence=joining)
            raise
        node.metrics.subscriptions_accepted.labels(driver.name, "").inc()
        node.lifecycle.subscribed(channel, driver.client_info(sub), sub.presence)
        self._session.schedule_sub_expiry(sub)
        return SubscribeResult(
            expires=sub.expire_at is not None,
            ttl=policy.expiry_ttl(sub.expire_at, self._clock()) if sub.expire_at is not None else 0,
            recoverable=sub.recoverable,
            positioned=sub.positioned,
            recovered=positioned is not None and positioned.recovered,
            epoch=positioned.reply.epoch if positioned else "",
            offset=positioned.reply.offset if positioned else 0,
            publications=recovered_for(sub, positioned.publications, self._codec) if positioned else None,
            was_recovering=wanted.recover,
            data=data,
            delta=sub.delta,
        )

    def _go_live(self, sub: Subscription) -> None:
        """The reply (or subscribe push) is queued: deliver what was buffered, then go live."""
        buffered = self._session.go_live(sub)
        if buffered is None:
            return
        self._node.hub.refresh_fanout(sub.channel)
        if sub.server_side and channel_rules(self._settings, sub.channel).options.join_leave:
            # A server-side subscription's join follows the reply (or push) that makes it live,
            # as Centrifugo orders it: with force_push_join_leave the subscriber gets its own.
            info = self._driver.client_info(sub)
            self._driver.spawn(functools.partial(self._node.broker.publish_join, sub.channel, info))
        self.fanout.deliver_buffered(sub, buffered)

    async def sub_refresh(self, req: SubRefreshRequest) -> SubRefreshResult:
        """``sub_refresh`` (§5.4). A token whose exp already passed does not extend the
        subscription: it is answered with the current expiry, and the subscription expires
        (2501) unless a valid token arrives.

        Raises:
            CommandError: not subscribed, or server-side (103); the authorizer's error.
        """
        sub = self._session.subscriptions.get(req.channel)
        if sub is None or sub.server_side:
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        grant = await self._authorizer.sub_refresh(self._driver.caller(), req)
        if grant is not None and not grant.expired:
            expire_at = float(grant.expire_at) if grant.expire_at is not None else None
            self._session.extend_subscription(sub, expire_at, grant.info)
        return self._session.sub_refresh_result(sub, self._clock())

    def enter(self, sub: Subscription) -> None:
        """Enter ``sub`` into the connection's table (every subscribe path enters through here).

        Raises:
            ConnectionClosed: the connection closed: its command goes no further, so nothing
                is registered that no release would undo.
        """
        self.alive()
        self._session.add_subscription(sub)

    def alive(self) -> None:
        """Go on only while the connection is open.

        Raises:
            ConnectionClosed: it closed.
        """
        if self._closed:
            raise ConnectionClosed

    # --- release -------------------------------------------------------------------------------

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None:
        """Drop a subscription (client request, server API, expiry, insufficient state); with
        ``push``, tell the client why. Not subscribed: nothing happens."""
        self._refresher.subscription(channel, None)
        sub = self._session.remove_subscription(channel)
        if sub is None:
            return
        if push is not None:
            self._node.metrics.server_unsubscribes.labels(str(push.code), "").inc()
            self._driver.send(self._session.unsubscribe_push(channel, push))
        await self._release(sub)

    async def _release(self, sub: Subscription) -> None:
        """Undo a subscription's node-level effects: hub/broker, presence, leave. Every step
        runs whatever the others did (``node.cleanup``): a failure is logged, never raised."""
        node = self._node
        driver = self._driver
        cleanup = node.cleanup
        channel = sub.channel
        info = driver.client_info(sub)
        cleanup.call("unsubscribed hook", lambda: node.lifecycle.unsubscribed(channel, info, sub.presence))
        streams = self._streams
        if streams is not None and self._stream_released(streams, sub):  # not in the hub
            await self.presence.leave(sub)
            return
        await cleanup.step("hub removal and broker unsubscribe", node.remove_subscriber(channel, driver))
        await self.presence.leave(sub)
        opts = self._settings.channel_options(channel)
        if opts is not None and opts.join_leave:
            await cleanup.step("leave message", node.broker.publish_leave(channel, info))

    async def undo(self, sub: Subscription, *, presence: bool) -> None:
        """Undo a subscription that failed to establish (already out of the table): its hub entry
        and broker subscription and, with ``presence``, its presence entries. Every step runs
        whatever the others did; failures are logged, never raised."""
        await self._node.cleanup.step(
            "hub removal and broker unsubscribe", self._node.remove_subscriber(sub.channel, self._driver)
        )
        if presence:
            await self.presence.leave(sub)

    async def abandon(self, sub: Subscription) -> None:
        """Undo an established subscription that never went live (already out of the table):
        the lifecycle hooks are told, then ``undo`` with presence. No leave message: a
        subscription that never went live published no join."""
        node, info = self._node, self._driver.client_info(sub)
        node.cleanup.call(
            "unsubscribed hook", lambda: node.lifecycle.unsubscribed(sub.channel, info, sub.presence)
        )
        await self.undo(sub, presence=True)

    def _stream_released(self, streams: StreamHook, sub: Subscription) -> bool:
        """Whether ``sub`` was a backend stream's (now released). A failing release is logged
        and ``sub`` is released as a hub subscription too (its hub removal finds nothing)."""
        try:
            return streams.release(sub)
        except Exception as exc:
            self._node.cleanup.failed("stream release", exc)
            return False

    def close(self, then: Callable[[], None] | None = None) -> bool:
        """The connection is gone: deliver nothing more, forget every subscription and release
        them in the background (idempotent). Whether a release runs: ``then`` (if given) is
        called once it ended (however); nothing to release, it is not called."""
        self._closed = True
        self.fanout.close()
        subs = self._session.clear_subscriptions()
        if subs:
            self._node.background(self._release_all(subs, then))
            return True
        return False

    async def _release_all(self, subs: list[Subscription], then: Callable[[], None] | None) -> None:
        """Release each subscription; one failing to release never keeps the others."""
        try:
            for sub in subs:
                await self._release(sub)
        finally:
            if then is not None:
                then()

    def presence_tick(self) -> None:
        """Re-add the connection to the presence of its live channels (every
        ``presence_update_interval``)."""
        for sub in self._session.subscriptions.values():
            if sub.state is SubState.SUBSCRIBED and self.presence.kept(sub):  # connection/presence.py
                self._driver.spawn(functools.partial(self.presence.refresh, sub))


def new_subscription(
    channel: str,
    rules: ChannelRules,
    flags: policy.Flags,
    *,
    server_side: bool,
    expire_at: float | None,
    chan_info: bytes | None,
    tags_filter: object = None,
    delta: bool = False,
) -> Subscription:
    """A new subscription of ``channel`` on the terms the policy's ``flags`` grant."""
    return Subscription(
        channel=channel,
        namespace=rules.namespace,
        server_side=server_side,
        positioned=flags.positioned,
        recoverable=flags.recoverable,
        push_join_leave=flags.push_join_leave,
        presence=flags.presence,
        expire_at=expire_at,
        chan_info=chan_info,
        tags_filter=tags_filter,
        delta=delta,
    )
