"""One connection's shared-poll subscriptions (subscribe ``type: 4``; Centrifugo v6.8): the
subscribe, the ``sub_refresh`` track (type 1) and untrack (type 2) requests, and the delivery of
the tracked keys' changes that gateway/sharedpoll/manager.py fans out.

* **subscribe**: authorised as a stream subscribe is (token, ``allow_subscribe_for_client``,
  subscribe proxy), in a namespace with ``subscription_type: shared_poll`` (else 103); answered
  with ``type: 4`` and the channel's ``epoch``. No history, positioning, recovery or presence.
  A channel is subscribed once per connection, stream or shared poll (105), and the
  subscriptions of both kinds together count against ``client.channel_limit`` (106).
* **track**: every batch's signature must verify for this user, channel and exactly the batch's
  keys (gateway/sharedpoll/signature.py, ``shared_poll.hmac_secret_key``, or the previous key
  for signatures issued before ``hmac_previous_secret_key_valid_until``): else 103; a signature
  expired beyond its 5 s grace: 109. More distinct keys than ``max_keys_per_connection``: 106;
  no batch or no key: 107. Nothing is retained from a refused request. The reply carries the
  smallest remaining signature ttl; the connection receives the keys' changes once it is
  queued: at once for keys new on the node or whose data it lacks (a poll is made now), then at
  every change. Keys whose signature expired more than ``track_expired_extra_delay`` ago are
  dropped silently (the SDK refreshes signatures before that).
* **untrack**: the listed keys stop; keys not tracked are ignored.
* **sub_refresh type 0**: a new subscription token, checked as for a stream subscription; a
  subscription whose token expired ``client.expired_sub_close_delay`` ago is ended with 2501 at
  the channel's next poll interval.

Deliveries are filtered per key: a change is queued only when its version is above the one the
connection holds (the version it tracked with, or the last delivered).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.channels import resolve
from gateway.config.schema import ChannelOptions, Settings
from gateway.connection.authorization import Authorizer, Caller
from gateway.errors import CommandError
from gateway.protocol import codes, policy
from gateway.protocol.codec import Codec
from gateway.protocol.messages import (
    EmptyResult,
    KeyedPublication,
    Result,
    SubRefreshRequest,
    SubRefreshResult,
    SubscribeRequest,
    SubscribeResult,
    UnsubscribeRequest,
)
from gateway.protocol.session import Session
from gateway.sharedpoll import signature
from gateway.sharedpoll.manager import SharedPollManager

__all__ = ["SharedPollSubscriptions"]


class Conn(Protocol):
    """What this module needs of its connection (gateway/connection/client.py)."""

    codec: Codec
    settings: Settings
    authorizer: Authorizer

    def caller(self) -> Caller: ...

    def send(self, payload: bytes) -> None: ...

    def after_reply(self, callback: Callable[[], None]) -> None: ...

    @property
    def session(self) -> Session:
        """The connection's protocol session: its stream subscriptions (duplicates, limit)."""
        ...


@dataclass(slots=True)
class _Key:
    version: int
    expire_at: int
    """Unix seconds the key's signature expires (0: never)."""


@dataclass(slots=True)
class _Sub:
    opts: ChannelOptions
    keys: dict[str, _Key] = field(default_factory=dict)
    expire_at: float | None = None
    """When the subscription token expires (None: never); a ``sub_refresh`` type 0 extends it."""


class SharedPollSubscriptions:
    """The shared-poll subscriptions of one connection; a ``gateway.sharedpoll.manager.Tracker``."""

    def __init__(self, conn: Conn, manager: SharedPollManager | None, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.codec = conn.codec
        self.manager = manager
        self.clock = clock
        self.subs: dict[str, _Sub] = {}
        self.closed = False

    def __len__(self) -> int:
        return len(self.subs)

    def __contains__(self, channel: object) -> bool:
        return channel in self.subs

    # --- commands ----------------------------------------------------------------------------

    def handles(self, req: object) -> bool:
        """Whether a command is this module's: a ``type: 4`` subscribe, a track/untrack, or any
        subscribe, unsubscribe or sub_refresh of a channel subscribed here."""
        if isinstance(req, SubscribeRequest):
            return req.type == SubscribeRequest.SHARED_POLL or req.channel in self.subs
        if isinstance(req, SubRefreshRequest):
            return req.type != 0 or req.channel in self.subs
        return isinstance(req, UnsubscribeRequest) and req.channel in self.subs

    async def handle(self, req: object) -> Result:
        """Run a command ``handles`` accepted.

        Raises:
            CommandError: its refusal (see ``subscribe`` and ``sub_refresh``).
        """
        if isinstance(req, SubscribeRequest):
            return await self.subscribe(req)
        if isinstance(req, SubRefreshRequest):
            return await self.sub_refresh(req)
        assert isinstance(req, UnsubscribeRequest)
        self.unsubscribe(req.channel)
        return EmptyResult()

    async def subscribe(self, req: SubscribeRequest) -> SubscribeResult:
        """A ``type: 4`` subscribe.

        Raises:
            CommandError: refused (103 not a shared-poll namespace or denied, 105, 106, ...).
        """
        conn, channel = self.conn, req.channel
        manager = self.manager
        opts = manager.options(channel) if manager is not None else None
        if manager is None or opts is None:
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        rules = resolve(conn.settings, channel)
        if isinstance(rules, codes.Error):
            raise CommandError(rules)
        self._check(channel)
        grant = await conn.authorizer.subscribe(conn.caller(), req, rules)
        self._check(channel)  # the authorisation awaited
        if self.closed:
            raise CommandError(codes.ERROR_ALREADY_SUBSCRIBED)
        expire_at = float(grant.expire_at) if grant.expire_at is not None else None
        self.subs[channel] = _Sub(opts, expire_at=expire_at)
        epoch = manager.subscribe(channel, opts, self)
        expires = expire_at is not None
        ttl = policy.expiry_ttl(expire_at, self.clock()) if expire_at is not None else 0
        return SubscribeResult(expires=expires, ttl=ttl, data=grant.data, epoch=epoch, type=req.type)

    def _check(self, channel: str) -> None:
        conn = self.conn
        streams = conn.session.subscriptions
        if channel in self.subs or channel in streams:
            raise CommandError(codes.ERROR_ALREADY_SUBSCRIBED)
        limit = conn.settings.client.channel_limit
        if limit and len(streams) + len(self.subs) >= limit:
            raise CommandError(codes.ERROR_LIMIT_EXCEEDED)

    async def sub_refresh(self, req: SubRefreshRequest) -> SubRefreshResult:
        """Track (type 1) or untrack (type 2) keys of a shared-poll subscription.

        Raises:
            CommandError: not subscribed (103), bad request (107), a signature refused (103) or
                expired (109), too many keys (106).
        """
        sub = self.subs.get(req.channel)
        if sub is None or self.manager is None:
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        if req.type == SubRefreshRequest.UNTRACK:
            if not req.untrack:
                raise CommandError(codes.ERROR_BAD_REQUEST)
            self._untrack(req.channel, sub, req.untrack)
            return SubRefreshResult()
        if req.type == 0:  # a new subscription token
            grant = await self.conn.authorizer.sub_refresh(self.conn.caller(), req)
            if grant is not None and not grant.expired:
                sub.expire_at = float(grant.expire_at) if grant.expire_at is not None else None
            if sub.expire_at is None:
                return SubRefreshResult()
            return SubRefreshResult(expires=True, ttl=policy.expiry_ttl(sub.expire_at, self.clock()))
        if req.type != SubRefreshRequest.TRACK:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        return self._track(req, sub, self.manager)

    def _track(self, req: SubRefreshRequest, sub: _Sub, manager: SharedPollManager) -> SubRefreshResult:
        channel = req.channel
        wanted: dict[str, tuple[int, int]] = {}  # key -> (version, batch index); the last batch wins
        for index, batch in enumerate(req.track):
            for key, version in batch.items:
                wanted[key] = (version, index)
        if not wanted or any(not key for key in wanted):
            raise CommandError(codes.ERROR_BAD_REQUEST)
        untrack = set(req.untrack)
        new = sum(1 for key in wanted if key not in sub.keys and key not in untrack)
        gone = sum(1 for key in untrack if key in sub.keys)
        if len(sub.keys) - gone + new > manager.max_keys(sub.opts):
            raise CommandError(codes.ERROR_LIMIT_EXCEEDED)
        expiries = self._verify(channel, req)
        now = self.clock()
        held = {key: state.version for key, state in sub.keys.items()}
        known = manager.peek(channel, wanted)
        cold, warm, quiet = [], [], []
        for key, (version, index) in wanted.items():
            sub.keys[key] = _Key(max(version, held.get(key, 0)), expiries[index])
            is_new, current = known[key]
            if is_new and version == 0:
                cold.append(key)
            elif (not is_new and version == 0) or current > version:
                warm.append(key)
            else:
                quiet.append(key)
        earliest = min((e for e in expiries if e), default=0)
        self.conn.after_reply(lambda: self._joined(channel, sub, cold, warm, quiet, req.untrack))
        if not earliest:
            return SubRefreshResult()
        return SubRefreshResult(expires=True, ttl=max(0, int(earliest - now)))

    def _verify(self, channel: str, req: SubRefreshRequest) -> list[int]:
        """The expiry of each batch's signature.

        Raises:
            CommandError: 103 for a signature that does not verify, 109 for an expired one.
        """
        cfg = self.conn.settings.shared_poll
        user = self.conn.caller().who.user
        now = self.clock()
        expiries = []
        for batch in req.track:
            keys = [key for key, _ in batch.items]
            outcome = signature.authorise(cfg, channel, batch.signature, keys, user, now)
            if isinstance(outcome, codes.Error):
                raise CommandError(outcome)
            expiries.append(outcome)
        return expiries

    def _joined(
        self,
        channel: str,
        sub: _Sub,
        cold: list[str],
        warm: list[str],
        quiet: list[str],
        untrack: tuple[str, ...],
    ) -> None:
        """The track reply is queued: join the keys (changes flow from now on)."""
        manager = self.manager
        if manager is None or self.subs.get(channel) is not sub:
            return
        manager.join(channel, self, cold, warm)
        manager.join_quiet(channel, self, quiet)
        if untrack:
            self._untrack(channel, sub, untrack)

    def _untrack(self, channel: str, sub: _Sub, keys: tuple[str, ...] | list[str]) -> None:
        dropped = [key for key in keys if sub.keys.pop(key, None) is not None]
        if dropped and self.manager is not None:
            self.manager.untrack(channel, self, dropped)

    def unsubscribe(self, channel: str) -> bool:
        """Leave a shared-poll subscription; False when ``channel`` is not one."""
        sub = self.subs.pop(channel, None)
        if sub is None:
            return False
        if self.manager is not None:
            self.manager.unsubscribe(channel, self, list(sub.keys))
        return True

    def close(self) -> None:
        """The connection is gone: leave every shared-poll subscription (idempotent)."""
        self.closed = True
        for channel in list(self.subs):
            self.unsubscribe(channel)

    # --- gateway.sharedpoll.manager.Tracker ------------------------------------------------

    def deliver(self, channel: str, item: KeyedPublication, push: bytes) -> None:
        sub = self.subs.get(channel)
        state = sub.keys.get(item.key) if sub is not None else None
        if sub is None or state is None or self.closed:
            return
        if item.removed:
            del sub.keys[item.key]
        elif item.version <= state.version:
            return
        else:
            state.version = item.version
        self.conn.send(push)

    def drop_channel(self, channel: str, unsubscribe: codes.Unsubscribe) -> None:
        if self.unsubscribe(channel) and not self.closed:
            self.conn.send(self.codec.encode_unsubscribe_push(channel, unsubscribe))

    def expire_keys(self, channel: str, now: float) -> None:
        sub = self.subs.get(channel)
        if sub is None or self.manager is None:
            return
        close_delay = self.conn.settings.client.expired_sub_close_delay
        if sub.expire_at is not None and sub.expire_at + close_delay < now:
            self.drop_channel(channel, codes.UNSUBSCRIBE_EXPIRED)  # its token was not refreshed
            return
        grace = self.manager.grace(sub.opts)
        expired = [
            key for key, state in sub.keys.items() if state.expire_at and state.expire_at + grace < now
        ]
        if expired:
            self._untrack(channel, sub, expired)
