"""The transactional outbox's contract (seed §5.1, §5.2): what a row is and what its fields mean.

Three modules own the outbox table, one reason each to change: the Status API's one writer appends
rows inside the state transaction (``storage/write.py``: :func:`~status_api.storage.write.append_outbox`);
the relay leases and settles them (``storage/outbox_claims.py``); operators purge, list, requeue and
count them (``storage/outbox_admin.py``). This module is what all three agree on, and it loads
nothing of ``status_api.domain`` or the service: the relay imports it.

* :class:`OutboxMessage` is what a writer hands over: one row. A task version is ONE row
  (:func:`version_message`, projection :data:`VERSION_PROJECTION`) whose payload carries every
  publication of that version (each projection's complete state for its channel); a version with
  a single publication (a broadcast) is a plain row of that projection. Unique on (aggregate_id,
  aggregate_version, channel, projection): one row per version. Rows carry complete state and
  ``aggregate_version``: duplicates and reordering are harmless.
* :func:`publications` is the one reader of a row's publications (:class:`Publication`): a
  VERSION row's array, or any other row's one (channel, projection, payload) — broadcasts, and
  rows of one projection each written before VERSION rows existed, which stay publishable.
* :class:`Priority` orders rows for the relay and says which rows may be superseded
  (:func:`supersedable`). A task's first version is stored raised to
  :attr:`Priority.NEW_AGGREGATE` (:func:`effective_priority`, the one place of that rule) so new
  tasks never queue behind progress.
* :class:`OutboxRow` is a leased row as the relay sees it, :class:`Retry` what the relay hands
  back for a row to try again, :class:`DeadRow` what operators see of a dead-lettered row; the
  statuses (:data:`PENDING`, :data:`PROCESSING`, :data:`PUBLISHED`, :data:`DEAD`) are a row's life.
* :func:`publication_tags` is what the relay tags a row's gateway publication with (the
  gateway's conflation key and never-conflate marker, seed §13.3).
* :data:`WAKE_CHANNEL`: where a commit that wrote rows tells the relays so (a hint, never the truth),
  and :func:`relay_wake_channel` the channel of one relay (a hint for that relay alone);
  :data:`WAKE_UDP_HINT` the same hint as a datagram, without Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any

import orjson

PENDING = "PENDING"
PROCESSING = "PROCESSING"
PUBLISHED = "PUBLISHED"
DEAD = "DEAD"
#: The Redis PUB/SUB channel of the post-commit wake-up hint (docs/relay.md "Wake-up"): the Status
#: API publishes to it after a commit that wrote outbox rows, relays subscribe. A hint only: the
#: rows are the truth, and a lost hint costs one safety-net poll interval.
WAKE_CHANNEL = "taskcast:outbox:wake"
#: What joins the wake channel and a relay's id in :func:`relay_wake_channel`.
RELAY_WAKE_INFIX = ":relay:"


def relay_wake_channel(channel: str, relay_id: str) -> str:
    """The PUB/SUB channel of relay ``relay_id``'s own hints (docs/relay.md "One relay per hint"):
    each relay subscribes to it beside ``channel``; the Status API finds the relays by the
    ``{channel}:relay:*`` pattern and sends each hint to one of them."""
    return f"{channel}{RELAY_WAKE_INFIX}{relay_id}"


#: The datagram of a UDP wake-up hint (``wake.udp_targets`` → the relays' ``wake_udp_listen``).
WAKE_UDP_HINT = b"taskcast-wake"


class Priority(IntEnum):
    """Relay order of a row (higher first, seed §13.3) and whether a newer row may replace it.

    ``PROGRESS`` rows (and anything below) carry plain progress: a newer version of the same
    aggregate on the same channel supersedes them (complete state, never diffs). Rows above it —
    notices, terminal states, a new task's first version — are always published.
    """

    PROGRESS = 0
    NEW_AGGREGATE = 5
    NOTICE = 10

    @classmethod
    def of(cls, *, urgent: bool) -> Priority:
        """A projection's priority: ``urgent`` = it carries a notice or a terminal state."""
        return cls.NOTICE if urgent else cls.PROGRESS


#: Kept for readers of the number (the relay's tests): version 1's priority floor.
PRIORITY_NEW_AGGREGATE = Priority.NEW_AGGREGATE


def supersedable(priority: int) -> bool:
    """True when a row of this priority may be dropped for a newer version (same aggregate, channel)."""
    return priority <= Priority.PROGRESS


CONFLATION_TAG = "task"
"""The publication tag naming a row's task: the gateway namespaces' ``conflation_tag``."""
NEVER_CONFLATE = ("conflate", "never")
"""The tag a gateway never conflates away (gateway/conflation.py: the same two strings)."""


def publication_tags(row: OutboxRow) -> dict[str, str]:
    """The gateway publication tags of a row (seed §13.3): ``task=<aggregate id>``, so a
    backed-up connection may keep only a task's newest state, and ``conflate=never`` on every
    row that must not be superseded (:func:`supersedable`: notices, terminal states, new
    attempts, a new task's first version)."""
    tags = {CONFLATION_TAG: row.aggregate_id}
    if not supersedable(row.priority):
        tags[NEVER_CONFLATE[0]] = NEVER_CONFLATE[1]
    return tags


def effective_priority(priority: int, aggregate_version: int) -> int:
    """The stored priority: an aggregate's first version is raised to ``NEW_AGGREGATE``."""
    return max(priority, Priority.NEW_AGGREGATE) if aggregate_version == 1 else priority


#: The projection of a row carrying every publication of one task version: its ``payload`` is a
#: JSON array ``[{"channel": str, "projection": str, "data": {...}}, …]`` in the order the domain
#: lists the projections (``USER_SUMMARY`` first), its ``channel`` column the first publication's
#: channel (the owner's user channel: owner and project are fixed when a task is created, so it is
#: the same for every version of a task and every per-(aggregate, channel, projection) rule —
#: coalescing, supersession — keeps working per task).
VERSION_PROJECTION = "VERSION"


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One outbox row of one aggregate version: one projection for one channel (complete state,
    with a version), or (projection :data:`VERSION_PROJECTION`, :func:`version_message`) every
    publication of the version."""

    channel: str
    projection: str
    payload: dict[str, Any] | list[dict[str, Any]]
    priority: int


@dataclass(frozen=True, slots=True)
class Publication:
    """One gateway publication of a row: ``data`` goes to ``channel`` (complete state of
    ``projection``). ``data`` is a decoded JSON value or an ``orjson.Fragment``."""

    channel: str
    projection: str
    data: Any


def version_message(publications: Sequence[Publication], priority: int) -> OutboxMessage:
    """The ONE row of a version with these publications (all of one ``priority``): a
    :data:`VERSION_PROJECTION` row of all of them, or the plain row of a single one."""
    if len(publications) == 1:
        p = publications[0]
        return OutboxMessage(p.channel, p.projection, p.data, priority)
    payload = [{"channel": p.channel, "projection": p.projection, "data": p.data} for p in publications]
    return OutboxMessage(publications[0].channel, VERSION_PROJECTION, payload, priority)


class MalformedRow(ValueError):
    """A VERSION row whose payload is not an array of publications (the relay dead-letters it)."""


def publications(row: OutboxRow) -> tuple[Publication, ...]:
    """The publications of ``row``: a :data:`VERSION_PROJECTION` row's array entries (its payload
    decoded: the stored text, bytes, or an already decoded list), any other row's one
    ``(channel, projection, payload)``.

    Raises:
        MalformedRow: a VERSION payload that is not JSON, not a non-empty array, or holds an entry
            that is not an object with string ``channel`` and ``projection`` and a ``data``.
    """
    if row.projection != VERSION_PROJECTION:
        return (Publication(row.channel, row.projection, row.payload),)
    return decode_publications(row.payload)


def decode_publications(payload: Any) -> tuple[Publication, ...]:
    """The entries of a VERSION payload (stored text, bytes or a decoded list); see
    :func:`publications` for what is refused (:class:`MalformedRow`)."""
    value = payload
    if isinstance(value, str | bytes | bytearray | memoryview):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise MalformedRow(f"VERSION payload is not JSON: {exc}") from None
    if not isinstance(value, list) or not value:
        raise MalformedRow("VERSION payload is not a non-empty array of publications")
    out = []
    for i, item in enumerate(value):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("channel"), str)
            and isinstance(item.get("projection"), str)
            and "data" in item
        ):
            raise MalformedRow(f"VERSION payload entry {i} is not {{channel, projection, data}}")
        out.append(Publication(item["channel"], item["projection"], item["data"]))
    return tuple(out)


def described(channel: str, projection: str, payload: Any) -> tuple[str, str]:
    """``(channels, projections)`` for operators (cold paths): a VERSION row's publications'
    channels and projections joined by ``,`` (read from ``payload``, its stored text or decoded
    value); any other row's own. A malformed VERSION payload shows as the row's columns."""
    if projection != VERSION_PROJECTION or payload is None:
        return channel, projection
    try:
        pubs = decode_publications(payload)
    except MalformedRow:
        return channel, projection
    return ",".join(p.channel for p in pubs), ",".join(p.projection for p in pubs)


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One row as a claim hands it to the relay (the columns operators alone read left out)."""

    id: int
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    #: What orjson encodes as the publication data: a decoded JSON value, or (every row a claim
    #: returns, ``outbox_claims.claim``) an ``orjson.Fragment`` holding the stored JSON text as it
    #: is; a :data:`VERSION_PROJECTION` row's stored text (``str``) or decoded array instead, read
    #: through :func:`publications`.
    payload: Any
    priority: int
    attempts: int
    created_at: datetime
    #: True when this claim took the row over from an expired lease of another (or a crashed) relay.
    taken_over: bool = False
    #: The W3C trace context of the transaction that wrote the row (None unless it was traced).
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class Retry:
    """A row to return to PENDING: due again at ``available_at``, with a sanitized error."""

    row_id: int
    error: str
    available_at: datetime


@dataclass(frozen=True, slots=True)
class DeadRow:
    """A dead-lettered row without its payload (it may hold user data); a VERSION row's
    ``channel`` and ``projection`` are its publications', joined by ``,`` (:func:`described`)."""

    id: int
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    attempts: int
    last_error: str | None
    created_at: datetime
