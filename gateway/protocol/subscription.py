"""One channel subscription of one connection: its terms and its state (sans-I/O).

A ``Subscription`` is created with its terms (channel, namespace, the policy's flags, the
granted expiry and channel info, the tags filter, delta) and enters its connection's
``Session`` (gateway/protocol/session.py) SUBSCRIBING. From then on its state changes only
through the Session's transitions, which check that the change is allowed:

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

from gateway.protocol.messages import Publication

__all__ = ["Buffered", "Delivery", "SubState", "Subscription", "TransitionError"]


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
