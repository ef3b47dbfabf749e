"""Centrifugo's error, disconnect and unsubscribe codes, unchanged (PROTOCOL.md §2).

Reconnect rule used by every SDK: disconnect codes 3000–3499, 4000–4499 and >= 5000 advise a
reconnect; 3500–3999 and 4500–4999 are terminal. Error replies with ``temporary`` set (or code
< 100, or 109) are retried by the SDKs; everything else is final.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Error:
    """A client-visible error reply: ``{"code", "message", "temporary"}``."""

    code: int
    message: str
    temporary: bool = False


@dataclass(frozen=True, slots=True)
class Disconnect:
    """A disconnect: WebSocket close code + reason (< 123 bytes), or a disconnect push."""

    code: int
    reason: str

    @property
    def reconnect(self) -> bool:
        return is_reconnect_code(self.code)


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """The payload of an unsubscribe push (§2.2)."""

    code: int
    reason: str


MAX_CLOSE_REASON_BYTES = 123
"""A WebSocket close frame's payload is at most 125 bytes, two of them the code (RFC 6455 §5.5)."""
MAX_ERROR_CODE = 2**32 - 1
"""Error codes are ``uint32`` in the protocol (client.proto ``Error.code``)."""


def is_close_code(code: int) -> bool:
    """True for a disconnect code a close frame may carry for an application: 3000–4999
    (RFC 6455 §7.4.2: 3000–3999 registered, 4000–4999 private use; 0–2999 are the protocol's)."""
    return 3000 <= code <= 4999


def close_reason(reason: str) -> str:
    """``reason`` cut to fit a close frame (``MAX_CLOSE_REASON_BYTES`` of UTF-8), never inside a
    character."""
    raw = reason.encode("utf-8", "replace")
    if len(raw) <= MAX_CLOSE_REASON_BYTES:
        return reason
    return raw[:MAX_CLOSE_REASON_BYTES].decode("utf-8", "ignore")


def is_reconnect_code(code: int) -> bool:
    """True when an SDK reconnects after a disconnect with this code (§2.3)."""
    return not (3500 <= code <= 3999 or 4500 <= code <= 4999)


ERROR_INTERNAL = Error(100, "internal server error", temporary=True)
ERROR_UNAUTHORIZED = Error(101, "unauthorized")
ERROR_UNKNOWN_CHANNEL = Error(102, "unknown channel")
ERROR_PERMISSION_DENIED = Error(103, "permission denied")
ERROR_METHOD_NOT_FOUND = Error(104, "method not found")
ERROR_NOT_FOUND = Error(104, "not found")
"""The server API's answer to an unknown method (Centrifugo's wording there)."""
ERROR_ALREADY_SUBSCRIBED = Error(105, "already subscribed")
ERROR_LIMIT_EXCEEDED = Error(106, "limit exceeded")
ERROR_BAD_REQUEST = Error(107, "bad request")
ERROR_NOT_AVAILABLE = Error(108, "not available")
ERROR_TOKEN_EXPIRED = Error(109, "token expired")
ERROR_EXPIRED = Error(110, "expired")
ERROR_TOO_MANY_REQUESTS = Error(111, "too many requests", temporary=True)
ERROR_UNRECOVERABLE_POSITION = Error(112, "unrecoverable position")
# Taskcast extension (seed §6.5): a per-namespace detail-subscription quota; same code as channel_limit.
ERROR_DETAIL_SUBSCRIPTION_LIMIT = Error(106, "DETAIL_SUBSCRIPTION_LIMIT")

DISCONNECT_CONNECTION_CLOSED = Disconnect(3000, "connection closed")
DISCONNECT_SHUTDOWN = Disconnect(3001, "shutdown")
DISCONNECT_SERVER_ERROR = Disconnect(3004, "internal server error")
DISCONNECT_EXPIRED = Disconnect(3005, "connection expired")
DISCONNECT_SUB_EXPIRED = Disconnect(3006, "subscription expired")
DISCONNECT_SLOW = Disconnect(3008, "slow")
DISCONNECT_WRITE_ERROR = Disconnect(3009, "write error")
DISCONNECT_INSUFFICIENT_STATE = Disconnect(3010, "insufficient state")
DISCONNECT_FORCE_RECONNECT = Disconnect(3011, "force reconnect")
DISCONNECT_NO_PONG = Disconnect(3012, "no pong")
DISCONNECT_TOO_MANY_REQUESTS = Disconnect(3013, "too many requests")
DISCONNECT_INVALID_TOKEN = Disconnect(3500, "invalid token")
DISCONNECT_BAD_REQUEST = Disconnect(3501, "bad request")
DISCONNECT_STALE = Disconnect(3502, "stale")
DISCONNECT_FORCE_NO_RECONNECT = Disconnect(3503, "force disconnect")
DISCONNECT_CONNECTION_LIMIT = Disconnect(3504, "connection limit")
DISCONNECT_CHANNEL_LIMIT = Disconnect(3505, "channel limit")
DISCONNECT_INAPPROPRIATE_PROTOCOL = Disconnect(3506, "inappropriate protocol")
DISCONNECT_PERMISSION_DENIED = Disconnect(3507, "permission denied")
DISCONNECT_NOT_AVAILABLE = Disconnect(3508, "not available")
DISCONNECT_TOO_MANY_ERRORS = Disconnect(3509, "too many errors")

UNSUBSCRIBE_SERVER = Unsubscribe(2000, "server unsubscribe")
UNSUBSCRIBE_INSUFFICIENT_STATE = Unsubscribe(2500, "insufficient state")
UNSUBSCRIBE_EXPIRED = Unsubscribe(2501, "subscription expired")


def uni_connect_disconnect(error: Error) -> Disconnect:
    """Unidirectional clients cannot read error replies: a connect error becomes a disconnect
    (PROTOCOL.md §4.5)."""
    if error.code in (109, 110):
        return DISCONNECT_EXPIRED
    if error.code == 111:
        return DISCONNECT_TOO_MANY_REQUESTS
    if error.code == 103:
        return DISCONNECT_PERMISSION_DENIED
    return DISCONNECT_SERVER_ERROR
