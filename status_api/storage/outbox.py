"""The transactional outbox's contract (seed §5.1, §5.2): what a row is and what its fields mean.

Three modules own the outbox table, one reason each to change: the Status API's one writer appends
rows inside the state transaction (``storage/write.py``: :func:`~status_api.storage.write.append_outbox`);
the relay leases and settles them (``storage/outbox_claims.py``); operators purge, list, requeue and
count them (``storage/outbox_admin.py``). This module is what all three agree on, and it loads
nothing of ``status_api.domain`` or the service: the relay imports it.

* :class:`OutboxMessage` is what a writer hands over: one projection of one aggregate version for
  one channel (complete state, with a version). One row per projection channel per task version
  (unique on aggregate_id, aggregate_version, channel, projection). Rows carry complete state and
  ``aggregate_version``: duplicates and reordering are harmless.
* :class:`Priority` orders rows for the relay and says which rows may be superseded
  (:func:`supersedable`). A task's first version is stored raised to
  :attr:`Priority.NEW_AGGREGATE` (:func:`effective_priority`, the one place of that rule) so new
  tasks never queue behind progress.
* :class:`OutboxRow` is a leased row as the relay sees it, :class:`Retry` what the relay hands
  back for a row to try again, :class:`DeadRow` what operators see of a dead-lettered row; the
  statuses (:data:`PENDING`, :data:`PROCESSING`, :data:`PUBLISHED`, :data:`DEAD`) are a row's life.
* :func:`publication_tags` is what the relay tags a row's gateway publication with (the
  gateway's conflation key and never-conflate marker, seed §13.3).
* :data:`WAKE_CHANNEL`: where a commit that wrote rows tells the relays so (a hint, never the truth);
  :data:`WAKE_UDP_HINT` the same hint as a datagram, without Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any

PENDING = "PENDING"
PROCESSING = "PROCESSING"
PUBLISHED = "PUBLISHED"
DEAD = "DEAD"
#: The Redis PUB/SUB channel of the post-commit wake-up hint (docs/relay.md "Wake-up"): the Status
#: API publishes to it after a commit that wrote outbox rows, relays subscribe. A hint only: the
#: rows are the truth, and a lost hint costs one safety-net poll interval.
WAKE_CHANNEL = "taskcast:outbox:wake"
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


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One projection of one aggregate version for one channel (complete state, with a version)."""

    channel: str
    projection: str
    payload: dict[str, Any]
    priority: int


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
    #: returns, ``outbox_claims.claim``) an ``orjson.Fragment`` holding the stored JSON text as it is.
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
    """A dead-lettered row without its payload (it may hold user data)."""

    id: int
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    attempts: int
    last_error: str | None
    created_at: datetime
