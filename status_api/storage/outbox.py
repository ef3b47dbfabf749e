"""The transactional outbox (seed §5.1, §5.2): append inside the state transaction; claim/mark for the relay.

The relay imports exactly this module (and the shared database plumbing), so it must not import
``status_api.domain`` or the service. Contract:

* :class:`OutboxMessage` is what a writer hands over; :class:`Priority` orders rows for the relay
  and says which rows may be superseded (:func:`supersedable`). :func:`append_many` writes the
  messages of any number of aggregate versions with one statement inside the Status API's state
  transaction (``storage.write``); :func:`append` is a batch of one. A task's first version is
  raised to :attr:`Priority.NEW_AGGREGATE` (:func:`effective_priority`, the one place of that
  rule) so new tasks never queue behind progress. One row per projection channel per task version
  (unique on aggregate_id, aggregate_version, channel, projection).
* :func:`claim` must run inside its own short transaction (``async with engine.begin()``). It first
  takes over PROCESSING rows whose lease expired, then due PENDING rows by priority tier (urgent
  rows first, then ``priority = 0``, then negative priorities; by due time within a tier). On
  MySQL/MariaDB every SELECT uses ``FOR UPDATE SKIP LOCKED`` so replicas claim disjoint rows; on SQLite the
  ``BEGIN IMMEDIATE`` write lock makes the claimer single. Claimed rows get PROCESSING,
  ``locked_by``, ``locked_at`` (the lease) and ``attempts + 1``. There is no "last id seen"
  cursor: a row committed late with a low id is claimed by the next poll. A claimed row's
  ``payload`` is an ``orjson.Fragment`` of the stored JSON text: the relay never decodes it, it
  splices it into the gateway request as it is (decoding and re-encoding every payload cost the
  relay ~15 µs a row). Stored payloads are valid JSON (written by the Status API's encoder; a JSON
  column on MariaDB); a row the gateway still refuses ends DEAD alone (the publisher's per-row retry).
* The relay publishes outside the transaction, then calls :func:`mark_published`,
  :func:`mark_retries` (back to PENDING at ``available_at``), :func:`mark_dead` or :func:`release`;
  each only touches rows still leased by that relay (``status = PROCESSING AND locked_by = me``),
  so a row taken over by another replica is never clobbered; an expired lease is taken over by
  the next :func:`claim`.
* :func:`publication_tags` is what the relay tags a row's gateway publication with (the
  gateway's conflation key and never-conflate marker, seed §13.3).
* Operator helpers: :func:`purge_published`, :func:`list_dead`, :func:`requeue_dead`, :func:`stats`.
* Rows carry complete state and ``aggregate_version``: duplicates and reordering are harmless.
* :data:`WAKE_CHANNEL`: where a commit that wrote rows tells the relays so (a hint, never the truth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.tables import task_event_log, task_outbox

PENDING = "PENDING"
PROCESSING = "PROCESSING"
PUBLISHED = "PUBLISHED"
DEAD = "DEAD"
LAST_ERROR_LIMIT = 1024
#: The Redis PUB/SUB channel of the post-commit wake-up hint (docs/relay.md "Wake-up"): the Status
#: API publishes to it after a commit that wrote outbox rows, relays subscribe. A hint only: the
#: rows are the truth, and a lost hint costs one safety-net poll interval.
WAKE_CHANNEL = "taskcast:outbox:wake"


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
    id: int
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    #: What orjson encodes as the publication data: a decoded JSON value, or (every row from
    #: :func:`claim`) an ``orjson.Fragment`` holding the stored JSON text as it is.
    payload: Any
    priority: int
    attempts: int
    created_at: datetime
    #: True when this claim took the row over from an expired lease of another (or a crashed) relay.
    taken_over: bool = False


@dataclass(frozen=True, slots=True)
class Retry:
    """A row to return to PENDING: due again at ``available_at``, with a sanitized error."""

    row_id: int
    error: str
    available_at: datetime


@dataclass(frozen=True, slots=True)
class DeadRow:
    id: int
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    attempts: int
    last_error: str | None
    created_at: datetime


#: ``(aggregate_id, aggregate_version, messages, now)``: the messages of one aggregate version.
Entry = tuple[str, int, Sequence[OutboxMessage], datetime]


async def append_many(
    conn: AsyncConnection, entries: Sequence[Entry], *, aggregate_type: str = "task"
) -> None:
    """Insert one PENDING row per message of every entry with ONE multi-row statement (inside the
    Status API's state transaction); ``created_at`` / ``available_at`` are the commit-time clock.
    ``aggregate_type``: ``task``, or ``broadcast`` for a tenant/system notice (seed §6.6)."""
    rows = [
        {
            "aggregate_type": aggregate_type,
            "aggregate_id": aggregate_id,
            "aggregate_version": version,
            "channel": m.channel,
            "projection": m.projection,
            "payload": m.payload,
            "status": PENDING,
            "priority": effective_priority(m.priority, version),
            "available_at": now,
            "attempts": 0,
            "created_at": now,
        }
        for aggregate_id, version, messages, now in entries
        for m in messages
    ]
    if rows:
        await conn.execute(sa.insert(task_outbox), rows)


async def supersede_pending(conn: AsyncConnection, items: Sequence[tuple[str, str, int]]) -> int:
    """Inside the state transaction: delete the PENDING supersedable rows of ``(aggregate_id,
    channel)`` older than ``version`` that a STEP_PROGRESS produced (its ``task_event_log`` entry
    says so): a newer complete state on that channel replaces them before any relay publishes
    them (seed §3.5 progress coalescing). Rows a relay holds, and every other version's rows, are
    left alone. Returns the number of rows deleted."""
    if not items:
        return 0
    res = await conn.execute(
        _SUPERSEDE,
        [{"b_aggregate_id": a, "b_channel": c, "b_version": v} for a, c, v in sorted(set(items))],
    )
    return max(res.rowcount, 0)


_SUPERSEDE = sa.delete(task_outbox).where(
    task_outbox.c.aggregate_id == sa.bindparam("b_aggregate_id"),
    task_outbox.c.channel == sa.bindparam("b_channel"),
    task_outbox.c.aggregate_version < sa.bindparam("b_version"),
    task_outbox.c.status == PENDING,
    task_outbox.c.priority <= int(Priority.PROGRESS),
    task_outbox.c.aggregate_version.in_(
        sa.select(task_event_log.c.task_version).where(
            task_event_log.c.task_id == sa.bindparam("b_aggregate_id"),
            task_event_log.c.event_type == "STEP_PROGRESS",
        )
    ),
)


async def append(
    conn: AsyncConnection,
    aggregate_id: str,
    aggregate_version: int,
    messages: Sequence[OutboxMessage],
    now: datetime,
    *,
    aggregate_type: str = "task",
) -> None:
    """:func:`append_many` for one aggregate version (a batch of one)."""
    await append_many(conn, [(aggregate_id, aggregate_version, messages, now)], aggregate_type=aggregate_type)


def _row(r: Any, taken_over: frozenset[int], attempts_delta: int) -> OutboxRow:
    """An :class:`OutboxRow` from a row starting with :data:`_CLAIM_COLUMNS` (positional: the
    claim's hot loop)."""
    rid, agg_type, agg_id, version, channel, projection, payload, priority, attempts, created_at = r[:10]
    return OutboxRow(
        int(rid),
        agg_type,
        agg_id,
        int(version),
        channel,
        projection,
        orjson.Fragment(payload),
        int(priority),
        int(attempts) + attempts_delta,
        created_at,
        int(rid) in taken_over,
    )


_c = task_outbox.c
#: What a claim reads: the row minus the columns only operators read, with the payload as the
#: stored text (``type_coerce``: no JSON decoding) for :class:`OutboxRow`'s Fragment.
_CLAIM_COLUMNS = (
    _c.id,
    _c.aggregate_type,
    _c.aggregate_id,
    _c.aggregate_version,
    _c.channel,
    _c.projection,
    sa.type_coerce(_c.payload, sa.Text).label("payload"),
    _c.priority,
    _c.attempts,
    _c.created_at,
)


def _locking(query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` with ``LIMIT :limit`` and ``FOR UPDATE SKIP LOCKED`` (dropped by SQLite)."""
    return query.limit(sa.bindparam("limit")).with_for_update(skip_locked=True)


# The claim's statements, built once (issue 16): a statement object memoizes its compiled-cache
# key, where one built per claim paid SQLAlchemy's cache-key walk (``_generate_cache_key``) on
# every poll. Times, the limit, the ids and the relay id are bound parameters.
_TAKEOVER = _locking(
    sa.select(*_CLAIM_COLUMNS)
    .where(_c.status == PROCESSING, _c.locked_at < sa.bindparam("cutoff"))
    .order_by(_c.locked_at, _c.id)
)
_DUE = sa.and_(_c.status == PENDING, _c.available_at <= sa.bindparam("now"))
#: The priority tiers, most urgent first (see :func:`claim`).
_TIERS = tuple(
    _locking(sa.select(*_CLAIM_COLUMNS).where(_DUE, cond).order_by(*order))
    for cond, order in (
        (_c.priority > 0, (_c.priority.desc(), _c.available_at, _c.id)),
        (_c.priority == 0, (_c.available_at, _c.id)),
        (_c.priority < 0, (_c.priority.desc(), _c.available_at, _c.id)),
    )
)
#: The most rows a claim's first query reads (see :func:`claim`): when it finds fewer, they are all
#: the due rows; when it finds this many, it was a wasted read of at most this many rows before the
#: tier queries (a backlog claim reads ``batch_size`` rows; 64 of ~600-byte payloads is ~40 KB).
FAST_CLAIM_ROWS = 64
#: Every due row in due order (one index range scan): a claim's first query. When it finds fewer
#: than the limit it found every due row not locked by another claim, so the tiers could add
#: nothing; only a fuller backlog pays for the tier queries (see :func:`claim`).
_ALL_DUE = _locking(sa.select(*_CLAIM_COLUMNS, _c.available_at).where(_DUE).order_by(_c.available_at, _c.id))
_LEASE = (
    sa.update(task_outbox)
    .where(_c.id.in_(sa.bindparam("ids", expanding=True)))
    .values(
        status=PROCESSING,
        locked_by=sa.bindparam("b_me"),
        locked_at=sa.bindparam("b_at"),
        attempts=_c.attempts + 1,
    )
)


async def claim(
    conn: AsyncConnection,
    relay_id: str,
    limit: int,
    now: datetime,
    *,
    lease_seconds: float | None = None,
    probe: bool = True,
) -> list[OutboxRow]:
    """Lease up to ``limit`` rows: expired leases first (when ``lease_seconds`` is given), then due
    PENDING rows, most urgent priority first, and within a priority by ``available_at`` then id.

    Ordering by due time (not id) is what keeps a retried row from starving the rows behind it: a
    retry moves its ``available_at`` into the future and so to the back of the queue, while a fresh
    row's ``available_at`` is its commit time. The first query takes every due row in due order
    (``outbox_claim_idx (status, available_at, id)``, one range scan); when it finds fewer rows than
    it may take, those are all the due rows other claims have not locked, and they are sorted into
    tier order here: one SELECT for the common case of a hint or an idle poll (issue 16; the three
    tier SELECTs were half the round trips of a claim). It reads at most :data:`FAST_CLAIM_ROWS`
    rows: a full result means a backlog (more urgent rows may lie beyond it), and then each
    tier is a separate ``LIMIT`` query, so the common tier (``priority = 0``) walks the index in
    order instead of sorting the whole backlog. Without ``lease_seconds`` no expired lease is taken
    over (the relay's wake-up claims: its polls take them over). ``probe=False`` goes straight to
    the tiers (the relay knows it is draining a backlog: the probe would be a wasted read).
    """
    found: list[Any] = []
    taken: frozenset[int] = frozenset()
    if lease_seconds is not None:
        cutoff = now - timedelta(seconds=lease_seconds)
        found = list(await conn.execute(_TAKEOVER, {"cutoff": cutoff, "limit": limit}))
        taken = frozenset(int(r[0]) for r in found)
    if len(found) < limit:
        room = min(limit - len(found), FAST_CLAIM_ROWS) if probe else 0
        due = list(await conn.execute(_ALL_DUE, {"now": now, "limit": room})) if room else []
        if len(due) < room:
            # Every due row unlocked by others is here: order it as the tiers would.
            due.sort(key=_tier_order)
            found += due
        else:
            # A backlog: more urgent rows may lie beyond the limit. The tiers re-read (our own row
            # locks do not skip us); rows of ``due`` they leave out stay PENDING, unleased.
            for tier in _TIERS:
                if len(found) >= limit:
                    break
                found += await conn.execute(tier, {"now": now, "limit": limit - len(found)})
    if not found:
        return []
    await conn.execute(_LEASE, {"ids": [int(r[0]) for r in found], "b_me": relay_id, "b_at": now})
    # The rows were read under their row locks just before the update: only attempts changed.
    return [_row(r, taken, attempts_delta=1) for r in found]


def _tier_order(r: Any) -> tuple[int, datetime, int]:
    """The tiers' order as one key of an :data:`_ALL_DUE` row: priority (highest first), then due
    time, then id."""
    return (-int(r[7]), r[10], int(r[0]))


def _leased(ids: Sequence[int], relay_id: str) -> Any:
    return sa.and_(
        task_outbox.c.id.in_(list(ids)),
        task_outbox.c.status == PROCESSING,
        task_outbox.c.locked_by == relay_id,
    )


#: ``WHERE`` of the settling statements: rows of ``:ids`` still leased by ``:b_me``.
_MINE = sa.and_(
    _c.id.in_(sa.bindparam("ids", expanding=True)),
    _c.status == PROCESSING,
    _c.locked_by == sa.bindparam("b_me"),
)
_MARK_PUBLISHED = (
    sa.update(task_outbox)
    .where(_MINE)
    .values(
        status=PUBLISHED, published_at=sa.bindparam("b_at"), locked_by=None, locked_at=None, last_error=None
    )
)
_RELEASE = {
    refund: sa.update(task_outbox)
    .where(_MINE)
    .values(
        status=PENDING,
        available_at=sa.bindparam("b_at"),
        locked_by=None,
        locked_at=None,
        **({"attempts": sa.case((_c.attempts > 0, _c.attempts - 1), else_=0)} if refund else {}),
    )
    for refund in (False, True)
}


async def mark_published(conn: AsyncConnection, ids: Sequence[int], relay_id: str, now: datetime) -> int:
    """PROCESSING → PUBLISHED for the rows of ``ids`` still leased by ``relay_id``; returns the count."""
    if not ids:
        return 0
    res = await conn.execute(_MARK_PUBLISHED, {"ids": list(ids), "b_me": relay_id, "b_at": now})
    return int(res.rowcount or 0)


async def mark_retries(conn: AsyncConnection, retries: Sequence[Retry], relay_id: str) -> int:
    """PROCESSING → PENDING, each due at its ``available_at``, for the rows still leased by
    ``relay_id`` (one executemany); returns the number of rows changed."""
    if not retries:
        return 0
    c = task_outbox.c
    stmt = (
        sa.update(task_outbox)
        .where(
            c.id == sa.bindparam("rid"),
            c.status == PROCESSING,
            c.locked_by == sa.bindparam("me"),
        )
        .values(
            status=PENDING,
            available_at=sa.bindparam("due"),
            locked_by=None,
            locked_at=None,
            last_error=sa.bindparam("err"),
        )
    )
    params = [
        {"rid": r.row_id, "me": relay_id, "due": r.available_at, "err": r.error[:LAST_ERROR_LIMIT]}
        for r in retries
    ]
    res = await conn.execute(stmt, params)
    return int(res.rowcount or 0)


async def mark_dead(conn: AsyncConnection, row_id: int, relay_id: str, error: str) -> int:
    """PROCESSING → DEAD with a sanitized ``error``, if still leased by ``relay_id``."""
    res = await conn.execute(
        sa.update(task_outbox)
        .where(_leased([row_id], relay_id))
        .values(status=DEAD, locked_by=None, locked_at=None, last_error=error[:LAST_ERROR_LIMIT])
    )
    return int(res.rowcount or 0)


async def release(
    conn: AsyncConnection,
    ids: Sequence[int],
    relay_id: str,
    now: datetime,
    *,
    refund_attempt: bool = False,
) -> int:
    """Give leases back: PROCESSING → PENDING, due ``now``. ``refund_attempt`` undoes the claim's
    ``attempts + 1`` (the gateway as a whole failed: nothing was wrong with the row, so the attempt
    must not count toward the relay's ``max_attempts``); without it attempts are unchanged."""
    if not ids:
        return 0
    res = await conn.execute(_RELEASE[refund_attempt], {"ids": list(ids), "b_me": relay_id, "b_at": now})
    return int(res.rowcount or 0)


async def purge_published(conn: AsyncConnection, older_than: datetime, limit: int = 5000) -> int:
    """Delete up to ``limit`` PUBLISHED rows with ``published_at < older_than`` (call until 0).

    Selects ids first and deletes by primary key: a bounded statement that never scans or locks
    PENDING/PROCESSING rows, so it runs beside claimers.
    """
    c = task_outbox.c
    ids = [
        int(r[0])
        for r in await conn.execute(
            sa.select(c.id).where(c.status == PUBLISHED, c.published_at < older_than).limit(limit)
        )
    ]
    if not ids:
        return 0
    res = await conn.execute(sa.delete(task_outbox).where(c.id.in_(ids), c.status == PUBLISHED))
    return int(res.rowcount or 0)


async def list_dead(conn: AsyncConnection, limit: int = 100) -> list[DeadRow]:
    """DEAD rows, oldest first (no payloads: they may hold user data)."""
    c = task_outbox.c
    rows = await conn.execute(
        sa.select(
            c.id,
            c.aggregate_id,
            c.aggregate_version,
            c.channel,
            c.projection,
            c.attempts,
            c.last_error,
            c.created_at,
        )
        .where(c.status == DEAD)
        .order_by(c.id)
        .limit(limit)
    )
    return [
        DeadRow(
            id=int(r.id),
            aggregate_id=r.aggregate_id,
            aggregate_version=int(r.aggregate_version),
            channel=r.channel,
            projection=r.projection,
            attempts=int(r.attempts),
            last_error=r.last_error,
            created_at=r.created_at,
        )
        for r in rows
    ]


async def requeue_dead(conn: AsyncConnection, ids: Sequence[int] | None, now: datetime) -> int:
    """DEAD → PENDING (all DEAD rows when ``ids`` is None), due ``now``, attempts reset to 0.

    ``last_error`` is kept until the row is published, for the audit trail.
    """
    c = task_outbox.c
    cond = c.status == DEAD
    if ids is not None:
        if not ids:
            return 0
        cond = sa.and_(cond, c.id.in_(list(ids)))
    res = await conn.execute(
        sa.update(task_outbox).where(cond).values(status=PENDING, available_at=now, attempts=0)
    )
    return int(res.rowcount or 0)


async def stats(conn: AsyncConnection, now: datetime) -> dict[str, Any]:
    """Counts per status and the age in seconds of the oldest PENDING row (seed §14.1)."""
    counts = {
        r[0]: int(r[1])
        for r in await conn.execute(
            sa.select(task_outbox.c.status, sa.func.count()).group_by(task_outbox.c.status)
        )
    }
    oldest = await conn.scalar(
        sa.select(sa.func.min(task_outbox.c.created_at)).where(task_outbox.c.status == PENDING)
    )
    return {
        "counts": {s: counts.get(s, 0) for s in (PENDING, PROCESSING, PUBLISHED, DEAD)},
        "oldestPendingAgeSeconds": (now - oldest).total_seconds() if oldest else 0.0,
    }
