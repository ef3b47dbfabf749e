"""Lifecycle events as they go on the wire, the selection of which webhook gets which event, and
the signature of a batch (docs/webhooks.md). Pure: no I/O, no clock reads (times and ids are
passed in), imports no asyncio, httpx or redis.

A batch body is ``{"webhook": <name>, "events": [<event>, ...]}``, each event encoded once when
it happens (``encode``) and shared by every webhook that selects it. The signature is
HMAC-SHA256 over ``<timestamp>.<body>`` with the webhook's secret, sent as
``X-Taskcast-Signature: v1=<hex>`` beside ``X-Taskcast-Timestamp: <unix seconds>``; the receiver
recomputes it and refuses a timestamp outside its replay window (``verify``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import orjson

from gateway.config.sections.webhooks import WebhookSettings

TIMESTAMP_HEADER = "X-Taskcast-Timestamp"
SIGNATURE_HEADER = "X-Taskcast-Signature"
WEBHOOK_HEADER = "X-Taskcast-Webhook"
SIGNATURE_VERSION = "v1"
DEFAULT_REPLAY_WINDOW_SECONDS = 300.0
"""What ``verify`` accepts by default: a timestamp at most this far from the receiver's clock."""


class EventType(StrEnum):
    """Every lifecycle event type (``webhooks[].events``, the payload's ``type``)."""

    CONNECT = "connect"
    DISCONNECT = "disconnect"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    CHANNEL_OCCUPIED = "channel_occupied"
    CHANNEL_VACATED = "channel_vacated"
    PRESENCE_JOIN = "presence_join"
    PRESENCE_LEAVE = "presence_leave"


CONNECTION_EVENTS = frozenset({EventType.CONNECT, EventType.DISCONNECT})
"""Events without a channel: a webhook's ``namespaces`` does not filter them."""


@dataclass(frozen=True, slots=True)
class Event:
    """One lifecycle event. ``time_ms``: Unix milliseconds on the emitting node; ``node``: its
    uid (the server API ``info`` names it); ``id``: unique per event, the same on every delivery
    attempt (receivers deduplicate by it: delivery is at least once)."""

    id: str
    type: EventType
    time_ms: int
    node: str
    channel: str = ""
    client: str = ""
    user: str = ""
    transport: str = ""
    conn_info: bytes | None = None
    """Raw JSON (the connection token's or connect proxy's ``info``)."""
    chan_info: bytes | None = None
    """Raw JSON (the subscription token's or subscribe proxy's ``info``)."""
    code: int = 0
    reason: str = ""


def encode(event: Event) -> bytes:
    """The event's JSON object; fields that do not apply to its type are left out, ``info`` and
    ``chan_info`` are the raw JSON the token or proxy gave (invalid JSON becomes a string)."""
    out: dict[str, object] = {
        "id": event.id,
        "type": event.type.value,
        "time": event.time_ms,
        "node": event.node,
    }
    if event.channel:
        out["channel"] = event.channel
    if event.type not in (EventType.CHANNEL_OCCUPIED, EventType.CHANNEL_VACATED):
        out["client"] = event.client
        out["user"] = event.user
    if event.transport:
        out["transport"] = event.transport
    if event.conn_info:
        out["info"] = _raw(event.conn_info)
    if event.chan_info:
        out["chan_info"] = _raw(event.chan_info)
    if event.type is EventType.DISCONNECT:
        out["code"] = event.code
        out["reason"] = event.reason
    return orjson.dumps(out)


def _raw(value: bytes) -> object:
    try:
        orjson.loads(value)  # embedded as is only when it is JSON
    except orjson.JSONDecodeError:
        return value.decode(errors="replace")
    return orjson.Fragment(value)


def batch_body(name: str, events: Sequence[bytes]) -> bytes:
    """The POST body of one batch of encoded events."""
    return b'{"webhook":' + orjson.dumps(name) + b',"events":[' + b",".join(events) + b"]}"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Taskcast-Signature`` value: ``v1=`` + hex HMAC-SHA256 of ``<timestamp>.<body>``."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify(
    secret: str,
    timestamp: str,
    signature_header: str,
    body: bytes,
    *,
    now: float,
    window_seconds: float = DEFAULT_REPLAY_WINDOW_SECONDS,
) -> bool:
    """Whether a received batch is authentic and fresh: ``signature_header`` holds a ``v1=``
    signature of exactly ``body`` under ``secret`` (compared in constant time; several
    comma-separated values are accepted, for secret rotation) and ``timestamp`` is within
    ``window_seconds`` of ``now``. Never raises on malformed headers (they fail)."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > window_seconds:
        return False
    expected = signature(secret, sent, body)
    return any(hmac.compare_digest(expected, part.strip()) for part in signature_header.split(","))


class Selection:
    """Which webhooks (by index in ``webhooks``) get an event of a type on a channel's namespace.
    Built once from the settings; ``targets`` answers from a table (no per-event scanning)."""

    def __init__(self, webhooks: Sequence[WebhookSettings]) -> None:
        self._by_type: dict[EventType, list[tuple[int, frozenset[str] | None]]] = {t: [] for t in EventType}
        for index, hook in enumerate(webhooks):
            types = [EventType(name) for name in hook.events] if hook.events else list(EventType)
            spaces = frozenset(hook.namespaces) if hook.namespaces else None
            for t in types:
                self._by_type[t].append((index, None if t in CONNECTION_EVENTS else spaces))

    def wants(self, type: EventType) -> bool:
        """Whether any webhook selects events of ``type`` (in some namespace)."""
        return bool(self._by_type[type])

    def targets(self, type: EventType, namespace: str) -> Iterable[int]:
        """The webhooks that get an event of ``type`` in ``namespace`` (ignored for connection
        events)."""
        return [index for index, spaces in self._by_type[type] if spaces is None or namespace in spaces]


__all__ = [
    "CONNECTION_EVENTS",
    "DEFAULT_REPLAY_WINDOW_SECONDS",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WEBHOOK_HEADER",
    "Event",
    "EventType",
    "Selection",
    "batch_body",
    "encode",
    "signature",
    "verify",
]
