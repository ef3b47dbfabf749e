"""The per-connection protocol state machine (sans-I/O).

``Session`` owns the protocol state of one connection: command ordering (PROTOCOL.md §1.3),
the ping/pong cycle (§1.4), connection and subscription expiry (§5.4), the stale-connect
deadline, and the subscription table with its limits (``client.channel_limit``, the
per-namespace quota). The table is a ``SubscriptionTable`` (gateway/protocol/subscription.py,
with the table of transitions), which a Session is: other modules ask the session for a
transition (``add_subscription``, ``buffer``, ``position``, ``go_live``,
``extend_subscription``, ``update_channel_info``, ``remove_subscription``), which refuses what
the subscription's state does not allow; this module adds the deadlines of its expiries to the
connection's own.

It does no I/O and reads no clock, in the python-websockets way: frames go in through
``receive_frame``, encoded replies and pushes come out of the ``reply``/``error``/``*_push``
methods (through the connection's ``Codec``: the Session never sees one encoding's bytes), and
time enters only as the ``now`` the driver passes. Timers are deadlines: the driver arms one
timer for ``next_deadline()`` and calls ``on_deadline(now)`` when it fires, which returns what
is due (a ping to write, a disconnect, a subscription to expire). A timer that fires a hair
early finds nothing due and the driver simply re-arms.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from gateway.protocol import codes
from gateway.protocol.codec import JSON, MAX_FRAME_COMMANDS, Codec, ProtocolError
from gateway.protocol.messages import (
    Command,
    ConnectResult,
    Method,
    RefreshResult,
    Result,
    SubRefreshResult,
    SubscribeResult,
)
from gateway.protocol.policy import expiry_ttl
from gateway.protocol.subscription import Subscription, SubscriptionTable

_PONG = Command(0, None, None)
_PONG_FRAMES: dict[str, frozenset[str | bytes]] = {
    "json": frozenset(("{}", b"{}")),
    "protobuf": frozenset((b"\x00",)),  # the empty Command, length-delimited
}
"""Per codec: the frames that hold exactly one pong, as every client answers a ping (recognised
without decoding; any other frame is decoded, pongs in it included)."""


class State(IntEnum):
    CONNECTING = 0
    CONNECTED = 1
    CLOSED = 2


@dataclass(frozen=True, slots=True)
class Execute:
    """Run this command (ordering rules passed)."""

    command: Command


@dataclass(frozen=True, slots=True)
class Pong:
    """A pong arrived (the empty command)."""


@dataclass(frozen=True, slots=True)
class SendPing:
    """A ping is due: write ``frame``."""

    frame: bytes


@dataclass(frozen=True, slots=True)
class ExpireSubscription:
    """A client-side subscription's token expired: unsubscribe it with 2501 (in command order)."""

    channel: str


Action = Execute | Pong | codes.Disconnect
"""What ``receive`` makes of one command."""

TimerAction = SendPing | ExpireSubscription | codes.Disconnect
"""What ``on_deadline`` reports as due."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """The ``client.*`` options a session applies (seconds; 0 disables pings / pong checks)."""

    channel_limit: int = 128
    ping_interval: float = 25.0
    pong_timeout: float = 8.0
    stale_close_delay: float = 10.0
    expired_close_delay: float = 25.0
    expired_sub_close_delay: float = 25.0
    unidirectional: bool = False
    """A unidirectional client cannot send: no pong is expected (§4.5)."""
    max_frame_commands: int = MAX_FRAME_COMMANDS
    """Commands one frame may carry (3013 at the next one, before it is decoded)."""
    max_pending_commands: int = MAX_FRAME_COMMANDS
    """Commands a connection may have queued, not yet run (3013 at the next one)."""
    max_held_frames: int = 16
    """Frames that may arrive while the connect runs; they are decoded after it (3013 past)."""
    max_stray_pongs: int = 16
    """Pongs that answer no ping, tolerated between two pings (3501 past: Centrifugo refuses
    the first; a few are let through for clients of a server with pong checks off)."""


class Session(SubscriptionTable):
    """Protocol state of one connection.

    ``receive`` classifies each decoded command in arrival order:

    * the first command must be ``connect`` (else disconnect 3501); a second ``connect`` is 3501;
    * every command except pong (``{}``) and ``send`` must have ``id > 0`` (else 3501);
    * after a connect error reply the connection stops reading: later commands are ignored;
    * a pong with no outstanding ping is tolerated (ignored), unlike Centrifugo's 3501, but
      only ``max_stray_pongs`` of them between two pings (then 3501).

    ``receive_frame`` bounds the work of every frame while decoding it (the codec decodes one
    command at a time as the session pulls it): it stops at the first undecodable command
    (3501), at the first command past ``max_frame_commands`` in the frame or past
    ``max_pending_commands`` queued (3013), and at the first one the ordering rules refuse.
    Until the connect has an outcome nothing after it is decoded, as Centrifugo, which reads no
    further while it runs a connect: the rest of its frame and later frames are held (at most
    ``max_held_frames``) and decoded by ``resume`` once connected, or dropped when the connect
    is refused.

    Args:
        codec: The connection's wire encoding.
        config: The options to apply.
        now: The current time (unix seconds); starts the stale-connect deadline.
    """

    def __init__(self, codec: Codec = JSON, config: SessionConfig | None = None, *, now: float = 0.0) -> None:
        self.codec = codec
        self._pong_frames = _PONG_FRAMES.get(codec.name, frozenset())
        cfg = config or SessionConfig()
        self.config = cfg
        super().__init__(cfg.channel_limit, cfg.expired_sub_close_delay)
        self.state = State.CONNECTING
        self.ping_outstanding = False
        self.connecting = False
        self.connect_failed = False
        self.protocol_error: ProtocolError | None = None
        """Why the last undecodable frame was refused (for logs)."""
        self.expire_at: float | None = None
        """Connection expiry (unix seconds); None = never."""
        self._stale_at: float | None = now + cfg.stale_close_delay if cfg.stale_close_delay > 0 else None
        self._ping_at: float | None = None
        self._pong_at: float | None = None
        self._held: list[tuple[Iterator[Command], int]] = []  # (an empty deque: 760 bytes)
        """Undecoded commands that arrived after a connect still running (with how many
        commands their frame had before them)."""
        self._stray_pongs = 0
        self.decoded = 0
        """Commands decoded on this connection (metrics, tests)."""

    # --- incoming ----------------------------------------------------------------------------

    def receive_frame(self, frame: str | bytes, pending: int = 0) -> list[Action]:
        """Decode one transport frame and classify its commands in order, ``pending`` being how
        many commands the driver has queued already. Never raises: an undecodable command yields
        a ``Disconnect`` (3501; the cause kept in ``protocol_error``), too many commands 3013;
        decoding and classification stop at the first disconnect, and at the connect (the rest
        waits for ``resume``)."""
        if self.state is State.CLOSED or self.connect_failed:
            return []
        if frame in self._pong_frames and self.state is State.CONNECTED and not self._held:
            # The pong alone in its frame (every ping's answer): no decoding.
            self.decoded += 1
            action = self.receive(_PONG)
            return [action] if action is not None else []
        commands = self.codec.iter_frame(frame)
        if self._held or (self.connecting and self.state is State.CONNECTING):
            if len(self._held) >= self.config.max_held_frames:
                return [codes.DISCONNECT_TOO_MANY_REQUESTS]
            self._held.append((commands, 0))
            return []
        return self._classify(commands, 0, pending)

    def resume(self, pending: int = 0) -> list[Action]:
        """The connect succeeded (``connected`` was called): decode and classify what arrived
        after it, as ``receive_frame`` would have."""
        actions: list[Action] = []
        while self._held and self.state is State.CONNECTED:
            commands, decoded = self._held.pop(0)
            more = self._classify(commands, decoded, pending)
            actions.extend(more)
            if more and isinstance(more[-1], codes.Disconnect):
                self._held.clear()
                break
            pending += len(more)
        return actions

    def _classify(self, commands: Iterator[Command], decoded: int, pending: int) -> list[Action]:
        actions: list[Action] = []
        cfg = self.config
        try:
            for cmd in commands:
                decoded += 1
                self.decoded += 1
                if decoded > cfg.max_frame_commands:
                    actions.append(codes.DISCONNECT_TOO_MANY_REQUESTS)
                    break
                action = self.receive(cmd)
                if action is None:
                    if self.connect_failed or self.state is State.CLOSED:
                        break  # the rest would be ignored: it is not even decoded
                    continue
                if isinstance(action, Execute):
                    if pending >= cfg.max_pending_commands:
                        # A client that sends faster than its commands can run: bound the
                        # memory it can pin, and let it reconnect.
                        actions.append(codes.DISCONNECT_TOO_MANY_REQUESTS)
                        break
                    pending += 1
                actions.append(action)
                if isinstance(action, codes.Disconnect):
                    break
                if isinstance(action, Execute) and action.command.method is Method.CONNECT:
                    self._held.append((commands, decoded))
                    break
        except ProtocolError as exc:
            self.protocol_error = exc
            actions.append(exc.disconnect)
        return actions

    def receive(self, cmd: Command) -> Action | None:
        """Classify one command. Returns None when it must be ignored."""
        if self.state is State.CLOSED or self.connect_failed:
            return None
        if cmd.method is None:
            if self.state is State.CONNECTING and not self.connecting:
                return codes.DISCONNECT_BAD_REQUEST
            if not self.ping_outstanding:
                self._stray_pongs += 1
                if self._stray_pongs > self.config.max_stray_pongs:
                    return codes.DISCONNECT_BAD_REQUEST
            self.ping_outstanding = False
            self._pong_at = None
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

    # --- connect / refresh -------------------------------------------------------------------

    def connected(self, *, now: float = 0.0, first_ping_delay: float | None = None) -> None:
        """The connect succeeded: pings start ``first_ping_delay`` from ``now`` (the driver
        draws it in [interval/2, interval] so reconnect storms do not ping in lockstep)."""
        self.state = State.CONNECTED
        self.connecting = False
        self._stale_at = None
        interval = self.config.ping_interval
        if interval > 0:
            self._ping_at = now + (interval if first_ping_delay is None else first_ping_delay)

    def connect_result(
        self,
        *,
        client: str,
        version: str,
        now: float,
        subs: dict[str, SubscribeResult] | None = None,
        session: str = "",
        node: str = "",
        server_time: bool = False,
    ) -> ConnectResult:
        """The connect result: identity from the driver, liveness and expiry from the session."""
        ping = int(self.config.ping_interval)
        expires = self.expire_at is not None
        return ConnectResult(
            client=client,
            version=version,
            expires=expires,
            ttl=expiry_ttl(self.expire_at, now) if self.expire_at is not None else 0,
            subs=subs or None,
            ping=max(ping, 0),
            pong=(self.config.pong_timeout > 0) if ping > 0 and not self.config.unidirectional else None,
            session=session,
            node=node,
            time=int(now * 1000) if server_time else 0,
        )

    def connect_rejected(self) -> None:
        """The connect got an error reply: stop reading commands (§1.3). No pings or expiry
        follow; a connection still CONNECTING keeps its stale deadline (3502)."""
        self.connect_failed = True
        self.connecting = False
        self._ping_at = self._pong_at = None
        self.expire_at = None
        self._held.clear()

    def set_expiry(self, expire_at: float | None) -> None:
        """(Re-)set the connection expiry (connect, refresh, server API refresh)."""
        self.expire_at = expire_at

    def refresh_result(self, now: float) -> RefreshResult:
        if self.expire_at is None:
            return RefreshResult()
        return RefreshResult(True, expiry_ttl(self.expire_at, now))

    def closed(self) -> None:
        self.state = State.CLOSED
        self._stale_at = self._ping_at = self._pong_at = None
        self.disarm_sub_expiries()
        self._held.clear()

    def ping_sent(self) -> None:
        self.ping_outstanding = True

    # --- outgoing ----------------------------------------------------------------------------

    def reply(self, cmd_id: int, method: Method, result: Result) -> bytes:
        return self.codec.encode_reply(cmd_id, method, result)

    def error(self, cmd_id: int, error: codes.Error) -> bytes:
        return self.codec.encode_error(cmd_id, error)

    def subscribe_push(self, channel: str, result: SubscribeResult) -> bytes:
        return self.codec.encode_subscribe_push(channel, result)

    def unsubscribe_push(self, channel: str, unsubscribe: codes.Unsubscribe) -> bytes:
        return self.codec.encode_unsubscribe_push(channel, unsubscribe)

    # --- deadlines ---------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest instant (unix seconds) at which ``on_deadline`` has something to do."""
        candidates = [t for t in (self._stale_at, self._ping_at, self._pong_at) if t is not None]
        if self.expire_at is not None and self.state is State.CONNECTED:
            candidates.append(self.expire_at + self.config.expired_close_delay)
        sub_deadline = self.next_sub_deadline()
        if sub_deadline is not None:
            candidates.append(sub_deadline)
        return min(candidates) if candidates else None

    def on_deadline(self, now: float) -> list[TimerAction]:
        """Everything due at ``now``, in order; a disconnect ends the list."""
        if self.state is State.CLOSED:
            return []
        if self._stale_at is not None and self._stale_at <= now:
            self._stale_at = None
            if self.state is State.CONNECTING and self.connecting:
                # The connect arrived and is being executed (token check, connect proxy, engine):
                # a server that is slow to answer it must not call its client stale. Its outcome
                # decides; a rejected connect is closed at this re-armed deadline.
                self._stale_at = now + self.config.stale_close_delay
            elif self.state is State.CONNECTING:
                return [codes.DISCONNECT_STALE]
        if self._pong_at is not None and self._pong_at <= now:
            self._pong_at = None
            if self.ping_outstanding:
                return [codes.DISCONNECT_NO_PONG]
        expire_at = self.expire_at
        if (
            expire_at is not None
            and self.state is State.CONNECTED
            and expire_at + self.config.expired_close_delay <= now
        ):
            return [codes.DISCONNECT_EXPIRED]
        due: list[TimerAction] = []
        for sub in self.expired_subscriptions(now):
            if sub.server_side:
                return [codes.DISCONNECT_SUB_EXPIRED]
            due.append(ExpireSubscription(sub.channel))
        if self._ping_at is not None and self._ping_at <= now:
            cfg = self.config
            due.append(SendPing(self.codec.encode_ping()))
            self._stray_pongs = 0
            if not cfg.unidirectional and cfg.pong_timeout > 0:
                self.ping_outstanding = True
                self._pong_at = now + cfg.pong_timeout
            self._ping_at = now + cfg.ping_interval
        return due

    def sub_refresh_result(self, sub: Subscription, now: float) -> SubRefreshResult:
        if sub.expire_at is None:
            return SubRefreshResult()
        return SubRefreshResult(True, expiry_ttl(sub.expire_at, now))
