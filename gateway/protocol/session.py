"""The per-connection protocol state machine (sans-I/O).

``Session`` enforces command ordering (PROTOCOL.md §1.3), ping/pong bookkeeping (§1.4) and the
subscription table with its limits (``client.channel_limit``, the per-namespace quota), and
decides what each live publication means for a positioned subscription (§3.2). It never does
I/O: the connection driver (gateway/client.py) feeds it commands and carries out the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gateway.protocol import codes
from gateway.protocol.messages import Command, Method, Publication


class State(IntEnum):
    CONNECTING = 0
    CONNECTED = 1
    CLOSED = 2


class SubState(IntEnum):
    SUBSCRIBING = 0
    SUBSCRIBED = 1


class Delivery(IntEnum):
    """What to do with a live publication for one subscription."""

    DELIVER = 0
    SKIP = 1
    """A stale duplicate (offset already seen): drop silently."""
    INSUFFICIENT_STATE = 2
    """A gap or another epoch: the subscriber lost messages (unsubscribe 2500 / disconnect 3010)."""


@dataclass(slots=True)
class Subscription:
    """One channel subscription of one connection."""

    channel: str
    namespace: str
    server_side: bool = False
    state: SubState = SubState.SUBSCRIBING
    positioned: bool = False
    recoverable: bool = False
    offset: int = 0
    epoch: str = ""
    expire_at: float | None = None
    """Unix seconds when the subscription expires (sub token exp); None = never."""
    push_join_leave: bool = False
    presence: bool = False
    chan_info: bytes | None = None
    buffer: list[tuple[Publication, str, Any]] = field(default_factory=list)
    """Live publications (with their epoch and the driver's opaque encoded push) that arrived
    while the subscribe was reading history."""

    def check_position(self, offset: int, epoch: str) -> Delivery:
        """Track the stream position of a positioned subscription (§3.2) and classify a live
        publication. Non-positioned subscriptions, and publications without offset, always
        deliver."""
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


@dataclass(frozen=True, slots=True)
class Execute:
    """Run this command (ordering rules passed)."""

    command: Command


@dataclass(frozen=True, slots=True)
class Pong:
    """A pong arrived (the empty command)."""


Action = Execute | Pong | codes.Disconnect


class Session:
    """Protocol state of one connection.

    ``receive`` classifies each decoded command in arrival order:

    * the first command must be ``connect`` (else disconnect 3501); a second ``connect`` is 3501;
    * every command except pong (``{}``) and ``send`` must have ``id > 0`` (else 3501);
    * after a connect error reply the connection stops reading: later commands are ignored;
    * a pong with no outstanding ping is tolerated (ignored), unlike Centrifugo's 3501.
    """

    def __init__(self, *, channel_limit: int = 128) -> None:
        self.state = State.CONNECTING
        self.channel_limit = channel_limit
        self.subscriptions: dict[str, Subscription] = {}
        self.namespace_counts: dict[str, int] = {}
        self.ping_outstanding = False
        self.connecting = False
        self.connect_failed = False

    def receive(self, cmd: Command) -> Action | None:
        """Classify one command. Returns None when it must be ignored."""
        if self.state is State.CLOSED or self.connect_failed:
            return None
        if cmd.method is None:
            if self.state is State.CONNECTING and not self.connecting:
                return codes.DISCONNECT_BAD_REQUEST
            self.ping_outstanding = False
            return Pong()
        if cmd.id == 0 and cmd.method is not Method.SEND:
            return codes.DISCONNECT_BAD_REQUEST
        if cmd.method is Method.CONNECT:
            if self.state is not State.CONNECTING or self.connecting:
                return codes.DISCONNECT_BAD_REQUEST
            self.connecting = True
            return Execute(cmd)
        if self.state is State.CONNECTING and not self.connecting:
            return codes.DISCONNECT_BAD_REQUEST
        return Execute(cmd)

    def connected(self) -> None:
        self.state = State.CONNECTED
        self.connecting = False

    def connect_rejected(self) -> None:
        """The connect got an error reply: stop reading commands (§1.3)."""
        self.connect_failed = True
        self.connecting = False

    def closed(self) -> None:
        self.state = State.CLOSED

    def ping_sent(self) -> None:
        self.ping_outstanding = True

    # --- subscriptions ----------------------------------------------------------------------

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

    def add_subscription(self, sub: Subscription) -> None:
        self.subscriptions[sub.channel] = sub
        self.namespace_counts[sub.namespace] = self.namespace_counts.get(sub.namespace, 0) + 1

    def remove_subscription(self, channel: str) -> Subscription | None:
        sub = self.subscriptions.pop(channel, None)
        if sub is not None:
            left = self.namespace_counts.get(sub.namespace, 1) - 1
            if left:
                self.namespace_counts[sub.namespace] = left
            else:
                self.namespace_counts.pop(sub.namespace, None)
        return sub
