"""One channel subscription of one connection, its terms and its state, and the connection's
table of them (sans-I/O).

A ``Subscription`` is created with its terms (channel, namespace, the policy's flags, the
granted expiry and channel info, the tags filter, delta) and enters its connection's
``SubscriptionTable`` SUBSCRIBING: the table of the connection's ``Session``
(gateway/protocol/session.py), which is one. From then on its state changes only through the
table's transitions, which check that the change is allowed:

=============  ==========================  ===========================================
transition     allowed from                effect
=============  ==========================  ===========================================
add            new (never in a table)      SUBSCRIBING, in the table
buffer         SUBSCRIBING                 a live publication kept until go_live
position       SUBSCRIBING, positioned     the stream position it starts from
go_live        SUBSCRIBING                 SUBSCRIBED; the buffered publications handed out
extend         SUBSCRIBING, SUBSCRIBED     new expiry (and channel info); expiry re-armed
update info    SUBSCRIBING, SUBSCRIBED     new channel info
remove         SUBSCRIBING, SUBSCRIBED     UNSUBSCRIBED, out of the table (final)
=============  ==========================  ===========================================

A transition of a subscription that has already left its table (UNSUBSCRIBED: unsubscribed or
closed while the caller awaited) changes nothing and reports it; any other transition its state
does not allow raises ``TransitionError`` (a bug in the caller, never something a client can
cause). Two changes are the subscription's own, made per delivery on the fan-out path:
``check_position`` (the position advances with each live publication) and ``delta_sent`` (the
base of the next fossil delta).

Modules outside gateway/protocol/session.py and this one read these fields, never assign them
(tests/test_subscription_owner.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gateway.protocol import codes
from gateway.protocol.messages import Publication

__all__ = ["Buffered", "Delivery", "SubState", "Subscription", "SubscriptionTable", "TransitionError"]


class SubState(IntEnum):
    SUBSCRIBING = 0
    """In the table and the hub; live publications are buffered until ``go_live``."""
    SUBSCRIBED = 1
    """Live: publications are delivered as they come."""
    UNSUBSCRIBED = 2
    """Left the table (unsubscribed, expired, the connection closed): final."""


class Delivery(IntEnum):
    """What to do with a live publication for one subscription."""

    DELIVER = 0
    SKIP = 1
    """A stale duplicate (offset already seen): drop silently."""
    INSUFFICIENT_STATE = 2
    """A gap or another epoch: the subscriber lost messages (unsubscribe 2500 / disconnect 3010)."""


class TransitionError(RuntimeError):
    """A subscription transition its state does not allow (the table above): the caller's bug."""


Buffered = tuple[Publication, str, Any]
"""A live publication held while subscribing: the publication, its epoch and the driver's opaque
encoded push."""


@dataclass(slots=True)
class Subscription:
    """One channel subscription of one connection (terms at construction, state by transition)."""

    channel: str
    namespace: str
    server_side: bool = False
    positioned: bool = False
    recoverable: bool = False
    push_join_leave: bool = False
    presence: bool = False
    expire_at: float | None = None
    """Unix seconds when the subscription expires (sub token exp); None = never."""
    chan_info: bytes | None = None
    tags_filter: Any = None
    """A ``tags_filter.TagsFilter``: only matching publications are delivered (None: all)."""
    delta: bool = False
    """Fossil delta compression negotiated (gateway/connection/delivery.py)."""
    state: SubState = field(default=SubState.SUBSCRIBING, init=False)
    offset: int = field(default=0, init=False)
    epoch: str = field(default="", init=False)
    delta_base: tuple[int, str] | None = field(default=None, init=False)
    """Position of the last publication delivered to a delta subscription: a delta against the
    channel's previous publication is sent only when that is this one (None: send full)."""
    buffer: list[Buffered] = field(default_factory=list, init=False)
    """Live publications that arrived while the subscribe was reading history (read-only
    outside the owners: ``Session.buffer`` appends, ``Session.go_live`` hands them out)."""

    def check_position(self, offset: int, epoch: str) -> Delivery:
        """Track the stream position of a positioned subscription (§3.2) and classify a live
        publication: the next offset is delivered and becomes the position (the first epoch
        seen is kept when none was known); an offset already seen is skipped; a gap or another
        epoch is insufficient state. Non-positioned subscriptions, and publications without
        offset, always deliver."""
        if not self.positioned or offset == 0:
            return Delivery.DELIVER
        if self.epoch and epoch and epoch != self.epoch:
            return Delivery.INSUFFICIENT_STATE
        expected = self.offset + 1
        if offset > expected:
            return Delivery.INSUFFICIENT_STATE
        if offset < expected:
            return Delivery.SKIP
        self.offset = offset
        if not self.epoch:
            self.epoch = epoch
        return Delivery.DELIVER

    def delta_sent(self, offset: int, epoch: str) -> None:
        """The publication at (``offset``, ``epoch``) went to this delta subscription: the
        channel's next publication may go as a delta against it (offset 0: no base, the next
        goes in full)."""
        self.delta_base = (offset, epoch) if offset else None


class SubscriptionTable:
    """One connection's subscriptions by channel, with the limits that admit them and the expiry
    deadline of each, changed only through the transitions of the table above.

    ``gateway.protocol.session.Session`` is one: the session owns its connection's
    subscription table, and other modules ask it for these transitions.

    Args:
        channel_limit: ``client.channel_limit`` (0: no limit).
        sub_close_delay: ``client.expired_sub_close_delay``: seconds between a subscription's
            expiry and its deadline.
    """

    def __init__(self, channel_limit: int = 128, sub_close_delay: float = 25.0) -> None:
        self.channel_limit = channel_limit
        self._sub_close_delay = sub_close_delay
        self.subscriptions: dict[str, Subscription] = {}
        self.namespace_counts: dict[str, int] = {}
        self._sub_deadlines: dict[str, float] = {}

    def check_subscribe(self, channel: str, namespace: str, namespace_limit: int) -> codes.Error | None:
        """Limits for a new subscription (checked before any I/O): already subscribed (105),
        ``client.channel_limit`` (106), the namespace's ``subscription_limit_per_connection``
        (106 ``DETAIL_SUBSCRIPTION_LIMIT``, seed §6.5). Server-side subscriptions count too."""
        if channel in self.subscriptions:
            return codes.ERROR_ALREADY_SUBSCRIBED
        if self.channel_limit and len(self.subscriptions) >= self.channel_limit:
            return codes.ERROR_LIMIT_EXCEEDED
        if namespace_limit and self.namespace_counts.get(namespace, 0) >= namespace_limit:
            return codes.ERROR_DETAIL_SUBSCRIPTION_LIMIT
        return None

    def _current(self, sub: Subscription, transition: str, *allowed: SubState) -> bool:
        """Whether ``sub`` is still its channel's subscription in the table (False: it left,
        nothing is to change).

        Raises:
            TransitionError: it is current but its state is not one of ``allowed``.
        """
        if self.subscriptions.get(sub.channel) is not sub:
            if sub.state is not SubState.UNSUBSCRIBED:
                raise TransitionError(f"{transition}: {sub.channel!r} is not in this session")
            return False
        if sub.state not in allowed:
            raise TransitionError(f"{transition}: {sub.channel!r} is {sub.state.name}")
        return True

    def add_subscription(self, sub: Subscription) -> None:
        """Enter a new subscription into the table, SUBSCRIBING: live publications are
        ``buffer``ed until ``go_live``. The limits are the caller's (``check_subscribe``).

        Raises:
            TransitionError: the channel has a subscription already, or ``sub`` is not new.
        """
        if sub.channel in self.subscriptions or sub.state is not SubState.SUBSCRIBING:
            raise TransitionError(f"add: {sub.channel!r} is subscribed or {sub.state.name}")
        self.subscriptions[sub.channel] = sub
        self.namespace_counts[sub.namespace] = self.namespace_counts.get(sub.namespace, 0) + 1

    def buffer(self, sub: Subscription, pub: Publication, epoch: str, push: object) -> None:
        """Keep a live publication (with its epoch and the driver's encoded push) that arrived
        while ``sub`` is SUBSCRIBING; ``go_live`` hands it out.

        Raises:
            TransitionError: ``sub`` is live or gone (its publications are delivered or dropped).
        """
        if sub.state is not SubState.SUBSCRIBING or self.subscriptions.get(sub.channel) is not sub:
            raise TransitionError(f"buffer: {sub.channel!r} is {sub.state.name}")
        sub.buffer.append((pub, epoch, push))

    def position(self, sub: Subscription, offset: int, epoch: str) -> bool:
        """Set where a positioned subscription starts (the stream top or the recovered
        position) before it goes live. False: it left the table meanwhile.

        Raises:
            TransitionError: ``sub`` is live already, or not positioned.
        """
        if not self._current(sub, "position", SubState.SUBSCRIBING):
            return False
        if not sub.positioned:
            raise TransitionError(f"position: {sub.channel!r} is not positioned")
        sub.offset, sub.epoch = offset, epoch
        return True

    def go_live(self, sub: Subscription) -> list[Buffered] | None:
        """The subscribe reply (or ``subscribe`` push) is queued: ``sub`` becomes SUBSCRIBED.
        Returns the publications buffered meanwhile, in arrival order, for the caller to deliver
        (each through ``check_position``); None: it left the table meanwhile.

        Raises:
            TransitionError: ``sub`` is live already.
        """
        if not self._current(sub, "go_live", SubState.SUBSCRIBING):
            return None
        buffered, sub.buffer = sub.buffer, []
        sub.state = SubState.SUBSCRIBED
        return buffered

    def extend_subscription(self, sub: Subscription, expire_at: float | None, info: bytes | None) -> bool:
        """A refreshed subscription (``sub_refresh``): its new expiry (None: never) and, when
        given, channel info; its expiry deadline is re-armed. False: it left the table."""
        if not self._current(sub, "extend", SubState.SUBSCRIBING, SubState.SUBSCRIBED):
            return False
        sub.expire_at = expire_at
        if info is not None:
            sub.chan_info = info
        self.schedule_sub_expiry(sub)
        return True

    def update_channel_info(self, sub: Subscription, info: bytes) -> bool:
        """New channel info for ``sub`` (a server-side sub_refresh). False: it left the table."""
        if not self._current(sub, "update info", SubState.SUBSCRIBING, SubState.SUBSCRIBED):
            return False
        sub.chan_info = info
        return True

    def remove_subscription(self, channel: str) -> Subscription | None:
        """Take ``channel``'s subscription out of the table: UNSUBSCRIBED, its expiry disarmed.
        Returns it (for release), or None when the channel has none."""
        sub = self.subscriptions.pop(channel, None)
        self._sub_deadlines.pop(channel, None)
        if sub is not None:
            sub.state = SubState.UNSUBSCRIBED
            left = self.namespace_counts.get(sub.namespace, 1) - 1
            if left:
                self.namespace_counts[sub.namespace] = left
            else:
                self.namespace_counts.pop(sub.namespace, None)
        return sub

    def clear_subscriptions(self) -> list[Subscription]:
        """Forget every subscription (the connection closed): all UNSUBSCRIBED; returns them
        for release."""
        subs = list(self.subscriptions.values())
        for sub in subs:
            sub.state = SubState.UNSUBSCRIBED
        self.subscriptions.clear()
        self.namespace_counts.clear()
        self._sub_deadlines.clear()
        return subs

    def schedule_sub_expiry(self, sub: Subscription) -> None:
        """(Re-)arm the expiry of a subscription in the table from ``sub.expire_at`` (None:
        disarmed); a subscription not in the table is left alone."""
        if self.subscriptions.get(sub.channel) is not sub:
            return
        if sub.expire_at is None:
            self._sub_deadlines.pop(sub.channel, None)
        else:
            self._sub_deadlines[sub.channel] = sub.expire_at + self._sub_close_delay

    def next_sub_deadline(self) -> float | None:
        """The earliest subscription expiry deadline (None: none armed)."""
        return min(self._sub_deadlines.values()) if self._sub_deadlines else None

    def expired_subscriptions(self, now: float) -> list[Subscription]:
        """The subscriptions of the table whose expiry deadline is at or before ``now``, in
        arming order; their deadlines are disarmed (they stay in the table)."""
        due: list[Subscription] = []
        for channel, at in list(self._sub_deadlines.items()):
            if at > now:
                continue
            del self._sub_deadlines[channel]
            sub = self.subscriptions.get(channel)
            if sub is not None:
                due.append(sub)
        return due

    def disarm_sub_expiries(self) -> None:
        """Disarm every subscription's expiry deadline (the connection closed)."""
        self._sub_deadlines.clear()
