"""The transactional outbox (seed §5.1, §5.2): append inside the state transaction; claim/mark for the relay.

The relay imports exactly this module. Contract:

* :func:`append` runs inside the Status API's state transaction: one row per projection channel per
  task version (unique on aggregate_id, aggregate_version, channel, projection).
* :func:`claim` must run inside its own short transaction (``async with engine.begin()``); on
  MySQL/MariaDB it uses ``FOR UPDATE SKIP LOCKED`` so replicas claim disjoint rows; on SQLite the
  ``BEGIN IMMEDIATE`` write lock makes the claimer single. It sets PROCESSING, ``locked_by``,
  ``locked_at`` and ``attempts + 1``.
* The relay publishes outside the transaction, then calls :func:`mark_published`,
  :func:`mark_retry` (back to PENDING at ``available_at``) or :func:`mark_dead`; each only touches
  rows still leased by that relay. :func:`release_expired` returns timed-out leases to PENDING.
* Rows carry complete state and ``aggregate_version``: duplicates and reordering are harmless.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain.projections import OutboxMessage
from status_api.storage.tables import task_outbox

PENDING = "PENDING"
PROCESSING = "PROCESSING"
PUBLISHED = "PUBLISHED"
DEAD = "DEAD"
LAST_ERROR_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    aggregate_type: str
    aggregate_id: str
    aggregate_version: int
    channel: str
    projection: str
    payload: dict[str, Any]
    priority: int
    attempts: int
    created_at: datetime


async def append(
    conn: AsyncConnection,
    aggregate_id: str,
    aggregate_version: int,
    messages: Sequence[OutboxMessage],
    now: datetime,
) -> None:
    """Insert one PENDING row per message (one statement); ``created_at`` is the commit-time clock."""
    if not messages:
        return
    await conn.execute(
        sa.insert(task_outbox),
        [
            {
                "aggregate_type": "task",
                "aggregate_id": aggregate_id,
                "aggregate_version": aggregate_version,
                "channel": m.channel,
                "projection": m.projection,
                "payload": m.payload,
                "status": PENDING,
                "priority": m.priority,
                "available_at": now,
                "attempts": 0,
                "created_at": now,
            }
            for m in messages
        ],
    )


def _row(r: Any) -> OutboxRow:
    return OutboxRow(
        id=int(r["id"]),
        aggregate_type=r["aggregate_type"],
        aggregate_id=r["aggregate_id"],
        aggregate_version=int(r["aggregate_version"]),
        channel=r["channel"],
        projection=r["projection"],
        payload=r["payload"],
        priority=int(r["priority"]),
        attempts=int(r["attempts"]),
        created_at=r["created_at"],
    )


async def claim(conn: AsyncConnection, relay_id: str, limit: int, now: datetime) -> list[OutboxRow]:
    """Lease up to ``limit`` due PENDING rows, most urgent (priority) first, then oldest id."""
    ids_q = (
        sa.select(task_outbox.c.id)
        .where(task_outbox.c.status == PENDING, task_outbox.c.available_at <= now)
        .order_by(task_outbox.c.priority.desc(), task_outbox.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    ids = [int(r[0]) for r in await conn.execute(ids_q)]
    if not ids:
        return []
    await conn.execute(
        sa.update(task_outbox)
        .where(task_outbox.c.id.in_(ids))
        .values(status=PROCESSING, locked_by=relay_id, locked_at=now, attempts=task_outbox.c.attempts + 1)
    )
    rows = (
        await conn.execute(sa.select(task_outbox).where(task_outbox.c.id.in_(ids)).order_by(task_outbox.c.id))
    ).mappings()
    return [_row(r) for r in rows]


def _leased(ids: Sequence[int], relay_id: str) -> Any:
    return sa.and_(
        task_outbox.c.id.in_(list(ids)),
        task_outbox.c.status == PROCESSING,
        task_outbox.c.locked_by == relay_id,
    )


async def mark_published(conn: AsyncConnection, ids: Sequence[int], relay_id: str, now: datetime) -> int:
    if not ids:
        return 0
    res = await conn.execute(
        sa.update(task_outbox)
        .where(_leased(ids, relay_id))
        .values(status=PUBLISHED, published_at=now, locked_by=None, locked_at=None, last_error=None)
    )
    return int(res.rowcount or 0)


async def mark_retry(
    conn: AsyncConnection, row_id: int, relay_id: str, error: str, available_at: datetime
) -> int:
    res = await conn.execute(
        sa.update(task_outbox)
        .where(_leased([row_id], relay_id))
        .values(
            status=PENDING,
            available_at=available_at,
            locked_by=None,
            locked_at=None,
            last_error=error[:LAST_ERROR_LIMIT],
        )
    )
    return int(res.rowcount or 0)


async def mark_dead(conn: AsyncConnection, row_id: int, relay_id: str, error: str) -> int:
    res = await conn.execute(
        sa.update(task_outbox)
        .where(_leased([row_id], relay_id))
        .values(status=DEAD, locked_by=None, locked_at=None, last_error=error[:LAST_ERROR_LIMIT])
    )
    return int(res.rowcount or 0)


async def release_expired(conn: AsyncConnection, lease_seconds: float, now: datetime) -> int:
    """Return PROCESSING rows whose lease started before ``now - lease_seconds`` to PENDING."""
    cutoff = now - timedelta(seconds=lease_seconds)
    res = await conn.execute(
        sa.update(task_outbox)
        .where(task_outbox.c.status == PROCESSING, task_outbox.c.locked_at < cutoff)
        .values(status=PENDING, locked_by=None, locked_at=None, available_at=now)
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
