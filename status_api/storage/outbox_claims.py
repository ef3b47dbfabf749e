"""The relay's side of the outbox contract (seed §5.2): lease rows, then settle them.

The relay imports this module, the contract (``storage/outbox.py``) and the shared database
plumbing, nothing else of the Status API.

* :func:`claim` must run inside its own short transaction (``async with engine.begin()``). It first
  takes over PROCESSING rows whose lease expired, then due PENDING rows by priority tier (urgent
  rows first, then ``priority = 0``, then negative priorities; by due time within a tier). On
  MySQL/MariaDB every SELECT uses ``FOR UPDATE SKIP LOCKED`` so replicas claim disjoint rows; on SQLite the
  ``BEGIN IMMEDIATE`` write lock makes the claimer single. Claimed rows get PROCESSING,
  ``locked_by``, ``locked_at`` (the lease) and ``attempts + 1``. There is no "last id seen"
  cursor: a row committed late with a low id is claimed by the next poll. A claimed row's
  ``payload`` is an ``orjson.Fragment`` of the stored JSON text: the relay never decodes it, it
  splices it into the gateway request as it is (decoding and re-encoding every payload cost the
  relay ~15 µs a row); a VERSION row's payload (``outbox.VERSION_PROJECTION``) stays the stored
  text, for ``outbox.publications`` to split into its publications. Stored payloads are valid
  JSON (written by the Status API's encoder; a JSON column on MariaDB); a row the gateway still
  refuses ends DEAD alone (the publisher's per-row retry).
* :func:`next_due` (in the same transaction, after a claim that had room): when the earliest
  PENDING row that is not yet due becomes due — a progress held back by its window, a retry — so
  an idle relay sleeps until then instead of until its next poll.
* The relay publishes outside the transaction, then calls :func:`mark_published`,
  :func:`mark_retries` (back to PENDING at ``available_at``), :func:`mark_dead` or :func:`release`;
  each only touches rows still leased by that relay (``status = PROCESSING AND locked_by = me``),
  so a row taken over by another replica is never clobbered; an expired lease is taken over by
  the next :func:`claim`.
* **Driver path (MySQL/MariaDB)**: :func:`claim_driver` and :func:`mark_published_driver` run the
  same statements (compiled once from the SQLAlchemy ones above with the MySQL dialect,
  ``driver_statements.DriverSQL``) straight on the DBAPI connection (asyncmy's), with the same semantics:
  SQLAlchemy's execute path (compiled-cache lookup, parameter processing, the greenlet bridge,
  result rows) was about half of a relay's Python per claim → publish → mark cycle. A claim
  without a backlog is two requests (multi-statement texts): its locking reads, then the lease
  ``UPDATE`` + the next-due read + ``COMMIT``; it commits itself, the caller rolls back after an
  error and maps driver errors (``relay.claim``). :func:`look_driver` is a poll's look before its
  claim: one statement, no lock, no transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.driver_statements import DriverCursor, DriverSQL, Part, committed, round_trip
from status_api.storage.outbox import (
    DEAD,
    PENDING,
    PROCESSING,
    PUBLISHED,
    VERSION_PROJECTION,
    OutboxRow,
    Retry,
)
from status_api.storage.tables import task_outbox

#: The longest ``last_error`` stored (a sanitized message, never a payload).
LAST_ERROR_LIMIT = 1024


def _row(r: Any, taken_over: frozenset[int], attempts_delta: int) -> OutboxRow:
    """An :class:`OutboxRow` from a row starting with :data:`_CLAIM_COLUMNS` (positional: the
    claim's hot loop)."""
    rid, agg_type, agg_id, version, channel, projection, payload, priority, attempts, created_at, tp = r[:11]
    return OutboxRow(
        int(rid),
        agg_type,
        agg_id,
        int(version),
        channel,
        projection,
        payload if projection == VERSION_PROJECTION else orjson.Fragment(payload),
        int(priority),
        int(attempts) + attempts_delta,
        created_at,
        int(rid) in taken_over,
        tp,
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
    _c.traceparent,
)


def _locking(query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` with ``LIMIT :limit`` and ``FOR UPDATE SKIP LOCKED`` (dropped by SQLite)."""
    return query.limit(sa.bindparam("limit")).with_for_update(skip_locked=True)


# The claim's statements, built once: a statement object memoizes its compiled-cache
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
    tier order here: one SELECT for the common case of a hint or an idle poll (the three
    tier SELECTs were half the round trips of a claim). It reads at most :data:`FAST_CLAIM_ROWS`
    rows: a full result means a backlog (more urgent rows may lie beyond it), and then each
    tier is a separate ``LIMIT`` query, so the common tier (``priority = 0``) walks the index in
    order instead of sorting the whole backlog. Without ``lease_seconds`` no expired lease is taken
    over (the relay's wake-up claims: its polls take them over). ``probe=False`` goes straight to
    the tiers (the relay knows it is draining a backlog: the probe would be a wasted read).
    """

    async def fetch(stmt: Any, params: dict[str, Any]) -> list[Any]:
        return list(await conn.execute(stmt, params))

    async def update(stmt: Any, params: dict[str, Any]) -> None:
        await conn.execute(stmt, params)

    return await _claim(fetch, update, _SA_STATEMENTS, relay_id, limit, now, lease_seconds, probe)


#: The claim's statements for :func:`_claim`: takeover, the probe, the three tiers, the lease.
_Statements = tuple[Any, Any, tuple[Any, ...], Any]
_SA_STATEMENTS: _Statements = (_TAKEOVER, _ALL_DUE, _TIERS, _LEASE)
_Fetch = Callable[[Any, dict[str, Any]], Awaitable[list[Any]]]
_Update = Callable[[Any, dict[str, Any]], Awaitable[None]]


async def _claim(
    fetch: _Fetch,
    update: _Update,
    stmts: _Statements,
    relay_id: str,
    limit: int,
    now: datetime,
    lease_seconds: float | None,
    probe: bool,
) -> list[OutboxRow]:
    """:func:`claim`'s algorithm over either path's statements and executors."""
    takeover_stmt, all_due_stmt, tiers, lease_stmt = stmts
    found: list[Any] = []
    taken: frozenset[int] = frozenset()
    if lease_seconds is not None:
        cutoff = now - timedelta(seconds=lease_seconds)
        found = await fetch(takeover_stmt, {"cutoff": cutoff, "limit": limit})
        taken = frozenset(int(r[0]) for r in found)
    if len(found) < limit:
        room = min(limit - len(found), FAST_CLAIM_ROWS) if probe else 0
        due = await fetch(all_due_stmt, {"now": now, "limit": room}) if room else []
        if len(due) < room:
            # Every due row unlocked by others is here: order it as the tiers would.
            due.sort(key=_tier_order)
            found += due
        else:
            # A backlog: more urgent rows may lie beyond the limit. The tiers re-read (our own row
            # locks do not skip us); rows of ``due`` they leave out stay PENDING, unleased.
            for tier in tiers:
                if len(found) >= limit:
                    break
                found += await fetch(tier, {"now": now, "limit": limit - len(found)})
    if not found:
        return []
    await update(lease_stmt, {"ids": [int(r[0]) for r in found], "b_me": relay_id, "b_at": now})
    # The rows were read under their row locks just before the update: only attempts changed.
    return [_row(r, taken, attempts_delta=1) for r in found]


_NEXT_DUE = sa.select(sa.func.min(_c.available_at)).where(
    _c.status == PENDING, _c.available_at > sa.bindparam("now")
)


async def next_due(conn: AsyncConnection, now: datetime) -> datetime | None:
    """The earliest ``available_at`` after ``now`` of a PENDING row (None: none waits): one
    index seek of ``outbox_claim_idx (status, available_at, id)``, no row locks."""
    due = (await conn.execute(_NEXT_DUE, {"now": now})).scalar()
    return due if isinstance(due, datetime) else None


def _tier_order(r: Any) -> tuple[int, datetime, int]:
    """The tiers' order as one key of an :data:`_ALL_DUE` row: priority (highest first), then due
    time, then id."""
    return (-int(r[7]), r[11], int(r[0]))


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
#: PUBLISHED keeps the lease columns: ``locked_by`` names the relay that published the row and
#: ``locked_at`` (never after ``published_at``) bounds the retention's range scan of
#: ``outbox_lock_timeout_idx (status, locked_at)`` (``outbox_admin.purge_published``).
_MARK_PUBLISHED = (
    sa.update(task_outbox)
    .where(_MINE)
    .values(status=PUBLISHED, published_at=sa.bindparam("b_at"), last_error=None)
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
    """PROCESSING → PUBLISHED (``published_at = now``) for the rows of ``ids`` still leased by
    ``relay_id``; ``locked_by``/``locked_at`` stay as the lease left them (the audit of who
    published the row, and the retention's index range). Returns the count."""
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


_DRIVER_STATEMENTS: _Statements = (
    DriverSQL(_TAKEOVER),
    DriverSQL(_ALL_DUE),
    tuple(DriverSQL(t) for t in _TIERS),
    DriverSQL(_LEASE),
)
_D_NEXT_DUE = DriverSQL(_NEXT_DUE)
_D_MARK_PUBLISHED = DriverSQL(_MARK_PUBLISHED)
#: A poll's look: the earliest PENDING row's due time and the oldest lease, in one statement (two
#: index seeks of ``outbox_claim_idx``; the second reads the PROCESSING rows' ``locked_at``).
_D_LOOK = DriverSQL(
    sa.select(
        sa.select(sa.func.min(_c.available_at)).where(_c.status == PENDING).scalar_subquery(),
        sa.select(sa.func.min(_c.locked_at)).where(_c.status == PROCESSING).scalar_subquery(),
    )
)


class Look(NamedTuple):
    """What :func:`look_driver` saw."""

    #: A row is due now, or (with a lease bound) a lease expired: a claim would lease something.
    claimable: bool
    #: When the earliest PENDING row not yet due becomes due (None: none waits, or ``claimable``).
    next_due: datetime | None


async def look_driver(cur: DriverCursor, now: datetime, lease_seconds: float | None) -> Look:
    """Whether a :func:`claim_driver` at ``now`` (with ``lease_seconds``: scanning for leases
    older than that) would find anything, without a lock or a transaction (an autocommit
    connection; committed rows only, as the claim's reads see them). A row committed after this
    read is the next claim's, as it would be after an empty claim."""
    (rows,) = await round_trip(cur, [_D_LOOK.render({})])
    pending, locked = rows[0] if rows else (None, None)
    pending = pending if isinstance(pending, datetime) else None
    if pending is not None and pending <= now:
        return Look(True, None)
    cutoff = None if lease_seconds is None else now - timedelta(seconds=lease_seconds)
    if cutoff is not None and isinstance(locked, datetime) and locked < cutoff:
        return Look(True, None)
    return Look(False, pending)


class DriverClaim(NamedTuple):
    """What :func:`claim_driver` returns."""

    rows: list[OutboxRow]
    #: When the earliest PENDING row not yet due becomes due (a claim with room), else None.
    next_due: datetime | None
    #: Rows of the claim's ``mark`` that were marked PUBLISHED (still leased by the relay).
    marked: int


_D_TAKEOVER, _D_ALL_DUE, _D_TIERS, _D_LEASE = _DRIVER_STATEMENTS
_COMMIT: Part = ("COMMIT", ())


async def claim_driver(
    cur: DriverCursor,
    relay_id: str,
    limit: int,
    now: datetime,
    *,
    lease_seconds: float | None = None,
    probe: bool = True,
    mark: tuple[Sequence[int], datetime] | None = None,
) -> DriverClaim:
    """:func:`claim` and, for a claim with room, :func:`next_due`, on a DBAPI cursor of
    MySQL/MariaDB, **committed**: the same statements, the same order, leases and SKIP LOCKED as
    :func:`claim` in its transaction, in two requests when there is no backlog:

    1. the reads: the expired-lease scan (with ``lease_seconds``) and the probe of up to
       :data:`FAST_CLAIM_ROWS` due rows, both ``FOR UPDATE SKIP LOCKED``, in one request (the probe
       reads as if the scan had found nothing: a scan that fills the batch leaves the probe's rows
       locked but unleased until the commit, as a backlog claim leaves its probe's rows);
    2. the lease ``UPDATE`` of the rows found, the next-due read (a claim with room: the rows it
       sees are PENDING and not yet due, which the lease does not touch) and ``COMMIT``, in one
       request.

    A backlog (a full probe, or ``probe=False``) reads the tiers one request each in between.

    ``mark`` = ``(ids, published_at)``: rows this relay published earlier, marked PUBLISHED by the
    statement of :func:`mark_published_driver` (guarded by the lease the same way) at the head of
    the second request, so in the claim's transaction: committed with it, rolled back with it.
    Their locks are taken after the claim's reads, so the mark adds no lock time to them.

    Returns the leased rows, the next due time (None after a full claim, or when none waits) and
    how many rows of ``mark`` were marked (0 without ``mark``). The caller rolls back on an
    error (the server ran nothing after the failing statement; a ``mark`` is then not applied).
    """
    reads: list[Part] = []
    if lease_seconds is not None:
        reads.append(_D_TAKEOVER.render({"cutoff": now - timedelta(seconds=lease_seconds), "limit": limit}))
    room = min(limit, FAST_CLAIM_ROWS) if probe else 0
    if room:
        reads.append(_D_ALL_DUE.render({"now": now, "limit": room}))
    sets = await round_trip(cur, reads) if reads else []
    found: list[Any] = sets.pop(0) if lease_seconds is not None else []
    taken = frozenset(int(r[0]) for r in found)
    due = sets[0] if room else []
    if room and len(due) < room:
        # Every due row unlocked by others is here: order it as the tiers would.
        due.sort(key=_tier_order)
        found = (found + due)[:limit]
    elif len(found) < limit:
        # A backlog: more urgent rows may lie beyond the probe. The tiers re-read (our own row
        # locks do not skip us); rows of the probe they leave out stay PENDING, unleased.
        for tier in _D_TIERS:
            if len(found) >= limit:
                break
            (more,) = await round_trip(cur, [tier.render({"now": now, "limit": limit - len(found)})])
            found += more
    settle: list[Part] = []
    if mark is not None and mark[0]:
        settle.append(_D_MARK_PUBLISHED.render({"ids": list(mark[0]), "b_me": relay_id, "b_at": mark[1]}))
    if found:
        settle.append(_D_LEASE.render({"ids": [int(r[0]) for r in found], "b_me": relay_id, "b_at": now}))
    has_room = len(found) < limit
    if has_room:
        settle.append(_D_NEXT_DUE.render({"now": now}))
    settle.append(_COMMIT)
    counts: list[int] = []
    results = await round_trip(cur, settle, counts)
    committed(cur)
    marked = counts[0] if mark is not None and mark[0] else 0
    next_at = None
    if has_room:
        rows = results[-2]
        value = rows[0][0] if rows else None
        next_at = value if isinstance(value, datetime) else None
    # The rows were read under their row locks just before the update: only attempts changed.
    return DriverClaim([_row(r, taken, attempts_delta=1) for r in found], next_at, marked)


async def mark_published_driver(cur: DriverCursor, ids: Sequence[int], relay_id: str, now: datetime) -> int:
    """:func:`mark_published` on a DBAPI cursor of MySQL/MariaDB (one UPDATE); returns the count."""
    if not ids:
        return 0
    sql, args = _D_MARK_PUBLISHED.render({"ids": list(ids), "b_me": relay_id, "b_at": now})
    return int(await cur.execute(sql, args))
