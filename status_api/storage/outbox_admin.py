"""Operators' queries on the outbox (docs/relay.md "Retention and the dead-letter queue"): purge
published rows, list, requeue and delete dead ones, count rows per status, the oldest PENDING row
per priority. Neither the writer nor the relay's claim loop uses them; the relay's CLI, its gauges,
the Status API's ``GET /admin/v1/outbox/stats`` and its ``/metrics`` do.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.outbox import (
    DEAD,
    PENDING,
    PROCESSING,
    PUBLISHED,
    VERSION_PROJECTION,
    DeadRow,
    described,
)
from status_api.storage.tables import task_outbox


async def purge_published(conn: AsyncConnection, older_than: datetime, limit: int = 5000) -> int:
    """Delete up to ``limit`` PUBLISHED rows with ``published_at < older_than`` (call until fewer
    than ``limit``).

    Selects ids first and deletes by primary key: a bounded statement that never scans or locks
    PENDING/PROCESSING rows, so it runs beside claimers. The select reads only the old end of the
    retention window: a published row keeps its lease time ``locked_at``, which is never after its
    ``published_at``, so ``locked_at < older_than`` adds no condition but makes the read a range of
    ``outbox_lock_timeout_idx (status, locked_at)`` instead of a walk over every PUBLISHED row
    (the whole window, on every pass). Rows published before lease times were kept (``locked_at``
    NULL) are in the range too, until they are purged.
    """
    c = task_outbox.c
    leased_before = sa.or_(c.locked_at < older_than, c.locked_at.is_(None))
    ids = [
        int(r[0])
        for r in await conn.execute(
            sa.select(c.id)
            .where(c.status == PUBLISHED, leased_before, c.published_at < older_than)
            .limit(limit)
        )
    ]
    if not ids:
        return 0
    res = await conn.execute(sa.delete(task_outbox).where(c.id.in_(ids), c.status == PUBLISHED))
    return int(res.rowcount or 0)


async def list_dead(conn: AsyncConnection, limit: int = 100) -> list[DeadRow]:
    """DEAD rows, oldest first (no payloads: they may hold user data). A VERSION row shows its
    publications' channels and projections, joined by ``,`` (``outbox.described``)."""
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
            sa.case((c.projection == VERSION_PROJECTION, sa.type_coerce(c.payload, sa.Text))).label(
                "payload"
            ),
        )
        .where(c.status == DEAD)
        .order_by(c.id)
        .limit(limit)
    )
    out = []
    for r in rows:
        channels, projections = described(r.channel, r.projection, r.payload)
        out.append(
            DeadRow(
                id=int(r.id),
                aggregate_id=r.aggregate_id,
                aggregate_version=int(r.aggregate_version),
                channel=channels,
                projection=projections,
                attempts=int(r.attempts),
                last_error=r.last_error,
                created_at=r.created_at,
            )
        )
    return out


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


async def delete_dead(conn: AsyncConnection, ids: Sequence[int]) -> int:
    """Delete the DEAD rows among ``ids`` (a row in any other status is left alone)."""
    if not ids:
        return 0
    c = task_outbox.c
    res = await conn.execute(sa.delete(task_outbox).where(c.status == DEAD, c.id.in_(list(ids))))
    return int(res.rowcount or 0)


#: The statuses :func:`stats` counts exactly: rows waiting for, held by or refused by the relays.
#: Each count reads one range of ``outbox_lock_timeout_idx (status, …)``, so it costs what the
#: rows that need attention cost, never the retention window.
EXACT_STATUSES = (PENDING, PROCESSING, DEAD)


async def stats(conn: AsyncConnection, now: datetime) -> dict[str, Any]:
    """Counts per status and the age in seconds of the oldest PENDING row (seed §14.1).

    ``counts`` has every status. PENDING, PROCESSING and DEAD are exact: ranges of index entries
    over those rows only (a backlog costs what it counts). The oldest PENDING row takes a few
    index dives whatever the backlog (:func:`_oldest_pending`). PUBLISHED is an estimate that
    costs the same at any retention: the storage engine's row estimate for the whole table
    (MariaDB/MySQL ``information_schema.TABLES``) less the exact counts, never below 0 — InnoDB
    keeps it within tens of percent, enough to size the retention window; the publish rate is
    the relay's ``taskcast_relay_published_rows_total``. SQLite (development) has no estimate
    and counts PUBLISHED rows.
    """
    c = task_outbox.c
    counts = {
        r[0]: int(r[1])
        for r in await conn.execute(
            sa.select(c.status, sa.func.count()).where(c.status.in_(EXACT_STATUSES)).group_by(c.status)
        )
    }
    exact = sum(counts.values())
    oldest = await _oldest_pending(conn)
    counts[PUBLISHED] = max(0, await _table_rows_estimate(conn) - exact)
    return {
        "counts": {s: counts.get(s, 0) for s in (PENDING, PROCESSING, PUBLISHED, DEAD)},
        "oldestPendingAgeSeconds": (now - oldest).total_seconds() if oldest else 0.0,
    }


async def _oldest_pending(conn: AsyncConnection) -> datetime | None:
    """``created_at`` of the oldest PENDING row (see :func:`oldest_pending_by_priority`)."""
    return min((await oldest_pending_by_priority(conn)).values(), default=None)


async def oldest_pending_by_priority(conn: AsyncConnection) -> dict[int, datetime]:
    """For each priority that has PENDING rows, the ``created_at`` of its first-written (lowest
    id) PENDING row: the oldest of that priority.

    Each step is one dive into ``outbox_priority_claim_idx (status, priority, id)``: the lowest
    PENDING priority, its lowest id, the next priority above, … (two per priority present, one
    more to find there is none), then the ``created_at`` of those rows by primary key. A minimum
    of ``created_at`` over the PENDING rows would read every one of them (a backlog), or the whole
    table when they are many. Ids follow the order of writes, ``created_at`` the writer's clock
    at its transaction's start: an age can fall short of the true oldest by at most how long a
    writing transaction waited (or how far a writer's clock lags).
    """
    c = task_outbox.c
    pending = c.status == PENDING
    firsts: list[int] = []
    priority = await conn.scalar(sa.select(sa.func.min(c.priority)).where(pending))
    while priority is not None:
        first = await conn.scalar(sa.select(sa.func.min(c.id)).where(pending, c.priority == priority))
        if first is not None:
            firsts.append(int(first))
        priority = await conn.scalar(sa.select(sa.func.min(c.priority)).where(pending, c.priority > priority))
    if not firsts:
        return {}
    rows = await conn.execute(sa.select(c.priority, c.created_at).where(c.id.in_(firsts)))
    return {int(r[0]): r[1] for r in rows}


async def _table_rows_estimate(conn: AsyncConnection) -> int:
    """The outbox's row count as the storage engine estimates it (exact on SQLite)."""
    if conn.dialect.name == "sqlite":
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(task_outbox)) or 0)
    estimate = await conn.scalar(
        sa.text(
            "SELECT table_rows FROM information_schema.tables"
            " WHERE table_schema = DATABASE() AND table_name = :name"
        ),
        {"name": task_outbox.name},
    )
    return int(estimate or 0)
