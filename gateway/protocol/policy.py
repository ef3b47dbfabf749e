"""Protocol policy, written once (pure): permissions, token-claim checks and the positioning /
recovery flags of a subscription (PROTOCOL.md §3, §5, §7).

Every decision is a function of (namespace options, who is asking, what is asked, token claims)
and returns a value or a protocol outcome (``codes.Error`` for an error reply,
``codes.Disconnect`` to close). Client-side subscribe, server-side subscriptions (connection
token ``channels``/``subs``, server API ``subscribe``) and every transport go through these same
functions. No I/O and no clock: the caller passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from gateway.protocol import codes

Outcome = codes.Error | codes.Disconnect


class NamespaceOptions(Protocol):
    """The channel options a decision reads (``gateway.config.schema.ChannelOptions`` provides them)."""

    @property
    def presence(self) -> bool: ...
    @property
    def join_leave(self) -> bool: ...
    @property
    def force_push_join_leave(self) -> bool: ...
    @property
    def history_size(self) -> int: ...
    @property
    def history_ttl(self) -> float: ...
    @property
    def force_positioning(self) -> bool: ...
    @property
    def allow_positioning(self) -> bool: ...
    @property
    def force_recovery(self) -> bool: ...
    @property
    def allow_recovery(self) -> bool: ...
    @property
    def allow_subscribe_for_client(self) -> bool: ...
    @property
    def allow_subscribe_for_anonymous(self) -> bool: ...
    @property
    def allow_user_limited_channels(self) -> bool: ...
    @property
    def allow_publish_for_client(self) -> bool: ...
    @property
    def allow_publish_for_subscriber(self) -> bool: ...
    @property
    def allow_publish_for_anonymous(self) -> bool: ...
    @property
    def allow_history_for_client(self) -> bool: ...
    @property
    def allow_history_for_subscriber(self) -> bool: ...
    @property
    def allow_history_for_anonymous(self) -> bool: ...
    @property
    def allow_presence_for_client(self) -> bool: ...
    @property
    def allow_presence_for_subscriber(self) -> bool: ...
    @property
    def allow_presence_for_anonymous(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Override:
    """Per-subscription overrides from a token's ``override`` object or the server API;
    None = not overridden (the namespace option applies)."""

    presence: bool | None = None
    join_leave: bool | None = None
    force_push_join_leave: bool | None = None
    force_recovery: bool | None = None
    force_positioning: bool | None = None


@dataclass(frozen=True, slots=True)
class ServerSub:
    """A server-side subscription: connection token ``channels``/``subs`` or server API
    ``subscribe``. ``info``/``data`` are raw JSON bytes."""

    info: bytes | None = None
    data: bytes | None = None
    override: Override | None = None
    expire_at: int | None = None
    """Subscription expiry, unix seconds (server API ``subscribe`` ``expire_at``); None: never."""


@dataclass(frozen=True, slots=True)
class Who:
    """The connection a decision is about."""

    user: str
    client: str
    insecure: bool = False
    """``client.insecure``: every permission is granted."""


# --- permissions --------------------------------------------------------------------------


def history_enabled(opts: NamespaceOptions) -> bool:
    return opts.history_size > 0 and opts.history_ttl > 0


def _allowed(who: Who, for_client: bool, for_subscriber: bool, for_anonymous: bool, subscribed: bool) -> bool:
    if who.insecure:
        return True
    if not who.user and not for_anonymous:
        return False
    return for_client or (for_subscriber and subscribed)


def can_publish(opts: NamespaceOptions, who: Who, *, subscribed: bool) -> bool:
    """Client ``publish`` (§7): allow_publish_for_client / _for_subscriber, anonymous gate."""
    return _allowed(
        who,
        opts.allow_publish_for_client,
        opts.allow_publish_for_subscriber,
        opts.allow_publish_for_anonymous,
        subscribed,
    )


def can_read_history(opts: NamespaceOptions, who: Who, *, subscribed: bool) -> bool:
    return _allowed(
        who,
        opts.allow_history_for_client,
        opts.allow_history_for_subscriber,
        opts.allow_history_for_anonymous,
        subscribed,
    )


def can_read_presence(opts: NamespaceOptions, who: Who, *, subscribed: bool) -> bool:
    return _allowed(
        who,
        opts.allow_presence_for_client,
        opts.allow_presence_for_subscriber,
        opts.allow_presence_for_anonymous,
        subscribed,
    )


def history_request(
    opts: NamespaceOptions,
    who: Who,
    *,
    subscribed: bool,
    limit: int,
    reverse: bool,
    since_offset: int | None,
    cap: int,
) -> int | codes.Error:
    """Client ``history``: the limit to read with (-1 = all, capped by
    ``client.history_max_publication_limit``), or the error to answer."""
    if not history_enabled(opts):
        return codes.ERROR_NOT_AVAILABLE
    if not can_read_history(opts, who, subscribed=subscribed):
        return codes.ERROR_PERMISSION_DENIED
    if reverse and since_offset == 0:
        return codes.ERROR_BAD_REQUEST
    if limit < 0 or (cap and limit > cap):
        return cap if cap else -1
    return limit


def presence_request(opts: NamespaceOptions, who: Who, *, subscribed: bool) -> codes.Error | None:
    """Client ``presence`` / ``presence_stats``: None when allowed."""
    if not opts.presence:
        return codes.ERROR_NOT_AVAILABLE
    if not can_read_presence(opts, who, subscribed=subscribed):
        return codes.ERROR_PERMISSION_DENIED
    return None


def subscription_type(sub_type: int, namespace_type: str = "stream") -> codes.Error | None:
    """A stream subscribe (type 0): refused with 107 in a namespace of another
    ``subscription_type`` (a map takes type 1); other types are not stream subscribes (maps are
    gateway/connection/map_subscribe.py's), refused with 103."""
    if sub_type != 0:
        return codes.ERROR_PERMISSION_DENIED
    return None if namespace_type == "stream" else codes.ERROR_BAD_REQUEST


def subscribe_permission(
    opts: NamespaceOptions, who: Who, *, private: bool, user_listed: bool
) -> codes.Error | None:
    """Client ``subscribe`` without a token (a token's claims are checked by
    ``subscribe_claims`` instead): the channel must be public and allowed for this user
    (user-limited ``…#user`` channels listing it, allow_subscribe_for_client, insecure)."""
    allowed = (
        (opts.allow_user_limited_channels and user_listed)
        or (opts.allow_subscribe_for_client and (bool(who.user) or opts.allow_subscribe_for_anonymous))
        or who.insecure
    )
    if private or not allowed:
        return codes.ERROR_PERMISSION_DENIED
    return None


# --- tokens -------------------------------------------------------------------------------


class TokenUse(Enum):
    CONNECT = "connect"
    REFRESH = "refresh"
    SUBSCRIBE = "subscribe"
    SUB_REFRESH = "sub_refresh"


class TokenProblem(Enum):
    EXPIRED = "expired"
    KEYS_UNAVAILABLE = "keys_unavailable"
    """JWKS unreachable: temporary (100), the SDK retries."""
    INVALID = "invalid"


TOKEN_FAILURES: dict[tuple[TokenUse, TokenProblem], Outcome | None] = {
    (TokenUse.CONNECT, TokenProblem.EXPIRED): codes.ERROR_TOKEN_EXPIRED,
    (TokenUse.CONNECT, TokenProblem.KEYS_UNAVAILABLE): codes.ERROR_INTERNAL,
    (TokenUse.CONNECT, TokenProblem.INVALID): codes.DISCONNECT_INVALID_TOKEN,
    (TokenUse.REFRESH, TokenProblem.EXPIRED): codes.DISCONNECT_EXPIRED,
    (TokenUse.REFRESH, TokenProblem.KEYS_UNAVAILABLE): codes.ERROR_INTERNAL,
    (TokenUse.REFRESH, TokenProblem.INVALID): codes.DISCONNECT_INVALID_TOKEN,
    (TokenUse.SUBSCRIBE, TokenProblem.EXPIRED): codes.ERROR_TOKEN_EXPIRED,
    (TokenUse.SUBSCRIBE, TokenProblem.KEYS_UNAVAILABLE): codes.ERROR_INTERNAL,
    (TokenUse.SUBSCRIBE, TokenProblem.INVALID): codes.ERROR_PERMISSION_DENIED,
    # An expired sub_refresh token does not extend the subscription: the reply carries the
    # current expiry and the subscription expires (2501) unless a valid token arrives (§5.4).
    (TokenUse.SUB_REFRESH, TokenProblem.EXPIRED): None,
    (TokenUse.SUB_REFRESH, TokenProblem.KEYS_UNAVAILABLE): codes.ERROR_INTERNAL,
    (TokenUse.SUB_REFRESH, TokenProblem.INVALID): codes.DISCONNECT_INVALID_TOKEN,
}
"""What a token that failed verification means, per use (§5). None = not a failure."""


def token_failure(use: TokenUse, problem: TokenProblem) -> Outcome | None:
    return TOKEN_FAILURES[(use, problem)]


class ConnectClaims(Protocol):
    @property
    def user(self) -> str: ...
    @property
    def expire_at(self) -> int | None: ...


class SubscribeClaims(Protocol):
    @property
    def user(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def client(self) -> str: ...
    @property
    def expire_at(self) -> int | None: ...


def missing_connect_token(*, insecure: bool, allow_anonymous: bool) -> Outcome | None:
    """A connect without a token: anonymous when allowed, else 3501 (as Centrifugo)."""
    return None if insecure or allow_anonymous else codes.DISCONNECT_BAD_REQUEST


def connect_claims(claims: ConnectClaims, *, now: float, disallow_anonymous: bool) -> Outcome | None:
    """A verified connection token at connect."""
    if not claims.user and disallow_anonymous:
        return codes.DISCONNECT_PERMISSION_DENIED
    if claims.expire_at is not None and claims.expire_at <= now:
        return codes.ERROR_EXPIRED
    return None


def refresh_claims(claims: ConnectClaims, *, user: str, now: float) -> Outcome | None:
    """A verified connection token in ``refresh``: same user, not expired."""
    if claims.user != user:
        return codes.DISCONNECT_INVALID_TOKEN
    if claims.expire_at is not None and claims.expire_at <= now:
        return codes.ERROR_EXPIRED
    return None


def subscribe_claims(claims: SubscribeClaims, who: Who, *, channel: str, now: float) -> Outcome | None:
    """A verified subscription token (``subscribe`` and ``sub_refresh``): it must name this
    user, this channel and, when it names one, this client (else 3500); not expired (110)."""
    if claims.user != who.user or claims.channel != channel:
        return codes.DISCONNECT_INVALID_TOKEN
    if claims.client and claims.client != who.client:
        return codes.DISCONNECT_INVALID_TOKEN
    if claims.expire_at is not None and claims.expire_at <= now:
        return codes.ERROR_EXPIRED
    return None


# --- subscription flags -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asks:
    """What a client subscribe asks for; a server-side subscription asks for nothing (its
    flags come from the namespace options and the override only)."""

    recoverable: bool = False
    positioned: bool = False
    join_leave: bool = False


@dataclass(frozen=True, slots=True)
class Flags:
    """The decided properties of one subscription."""

    positioned: bool
    recoverable: bool
    push_join_leave: bool
    presence: bool


def _pick(value: bool | None, default: bool) -> bool:
    return default if value is None else value


def subscription_flags(opts: NamespaceOptions, who: Who, asks: Asks, override: Override | None) -> Flags:
    """Positioning, recovery, join/leave pushes and presence of a subscription (§3).

    Recovery needs history; it is on when forced (option or override) or asked for and allowed
    (allow_recovery, or a history permission). A recoverable subscription is positioned;
    positioning is likewise forced or asked-and-allowed. Join/leave pushes need ``join_leave``
    and are forced or asked with a presence permission.
    """
    ov = override or Override()
    history_ok = history_enabled(opts)
    history_perm = can_read_history(opts, who, subscribed=True)
    recoverable = history_ok and (
        _pick(ov.force_recovery, opts.force_recovery)
        or (asks.recoverable and (opts.allow_recovery or history_perm))
    )
    positioned = recoverable or (
        history_ok
        and (
            _pick(ov.force_positioning, opts.force_positioning)
            or (asks.positioned and (opts.allow_positioning or history_perm))
        )
    )
    join_leave = _pick(ov.join_leave, opts.join_leave)
    forced_push = _pick(ov.force_push_join_leave, opts.force_push_join_leave)
    push_join_leave = join_leave and (
        forced_push or (asks.join_leave and can_read_presence(opts, who, subscribed=True))
    )
    return Flags(positioned, recoverable, push_join_leave, _pick(ov.presence, opts.presence))


MAX_EXPIRE_AT = 253_402_300_799
"""The latest expiry time accepted from a token claim, a proxy result or the server API:
9999-12-31T23:59:59Z in unix seconds. It lets "never" tricks such as ``exp: 9999999999``
through but refuses what cannot be seconds: ``exp`` in milliseconds (``now * 1000``, a common
issuer bug), 2^40, 2^63, 1e20."""
MAX_TTL = 2**32 - 1
"""``ttl`` is ``uint32`` in the protocol (client.proto ``ConnectResult.ttl``)."""


def expire_at_in_range(expire_at: float) -> bool:
    """True for an expiry time (unix seconds; 0 = none) the gateway can hold and answer with."""
    return 0 <= expire_at <= MAX_EXPIRE_AT


def expiry_ttl(expire_at: float, now: float) -> int:
    """The ``ttl`` written next to ``expires: true``: whole seconds left, at least 1 and at most
    ``MAX_TTL`` (the field's range: a far expiry must not make the reply unencodable)."""
    return min(MAX_TTL, max(1, int(expire_at - now)))
