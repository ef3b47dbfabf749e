"""What the operator UI reads (status_api/operator_ui.py, docs/admin.md): tasks by state and
search, one task's timeline with its outbox rows, the outbox backlog by priority and age, relay
instances (the leases they hold) and the publish lag, and the operators' audit trail
(``operator_action``: who did what to which rows, when).

Reads only, plus ``record`` (the audit row, written in the same transaction as the action it
records). No payloads leave here: rows are described by ids, channels, statuses and times. Imports
the tables and the outbox contract, nothing of the domain or the service.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.outbox import PENDING, PROCESSING, PUBLISHED, VERSION_PROJECTION, described
from status_api.storage.tables import operator_action, task, task_event_log, task_outbox

_NAMES = ("channel", "projection")

MAX_ROWS = 200
"""The most rows one list answers (tasks, audit entries)."""
TIMELINE_ROWS = 500
"""The most events and the most outbox rows one timeline answers (the newest are kept)."""
AGE_BUCKETS_SECONDS = (60, 600, 3600)
"""Backlog age buckets: under a minute, under ten, under an hour, older."""
LAG_SAMPLE_ROWS = 200
"""Published rows the publish lag is measured over (the most recent)."""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="milliseconds") + "Z" if value is not None else None


def _age(now: datetime, then: datetime | None) -> float | None:
    return round((now - then).total_seconds(), 3) if then is not None else None


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def state_counts(conn: AsyncConnection) -> dict[str, int]:
    """Tasks per lifecycle status."""
    c = task.c
    rows = await conn.execute(sa.select(c.lifecycle_status, sa.func.count()).group_by(c.lifecycle_status))
    return {str(r[0]): int(r[1]) for r in rows}


async def tasks(
    conn: AsyncConnection, *, state: str = "", query: str = "", limit: int = 50
) -> list[dict[str, Any]]:
    """Tasks, most recently updated first: ``state`` filters by lifecycle status; ``query``
    matches an id prefix or a part of the title."""
    c = task.c
    stmt = sa.select(
        c.id,
        c.tenant_id,
        c.owner_id,
        c.task_type,
        c.title,
        c.lifecycle_status,
        c.business_status,
        c.health,
        c.version,
        c.updated_at,
    )
    if state:
        stmt = stmt.where(c.lifecycle_status == state)
    if query:
        pattern = _like(query)
        stmt = stmt.where(
            sa.or_(c.id.like(pattern + "%", escape="\\"), c.title.like(f"%{pattern}%", escape="\\"))
        )
    rows = await conn.execute(stmt.order_by(c.updated_at.desc(), c.id).limit(min(max(limit, 1), MAX_ROWS)))
    return [
        {
            "taskId": r.id,
            "tenantId": r.tenant_id,
            "ownerId": r.owner_id,
            "taskType": r.task_type,
            "title": r.title,
            "status": r.lifecycle_status,
            "businessStatus": r.business_status,
            "health": r.health,
            "version": int(r.version),
            "updatedAt": _iso(r.updated_at),
        }
        for r in rows
    ]


async def timeline(conn: AsyncConnection, task_id: str) -> dict[str, Any] | None:
    """One task, its events (by version) and its outbox rows (by id); None when unknown."""
    found = await tasks_by_id(conn, task_id)
    if found is None:
        return None
    e = task_event_log.c
    events = await conn.execute(
        sa.select(
            e.event_id,
            e.task_version,
            e.event_type,
            e.step_id,
            e.producer_id,
            e.lifecycle_status,
            e.business_status,
            e.error_code,
            e.occurred_at,
            e.committed_at,
        )
        .where(e.task_id == task_id)
        .order_by(e.task_version.desc())
        .limit(TIMELINE_ROWS)
    )
    o = task_outbox.c
    outbox = await conn.execute(
        sa.select(
            o.id,
            o.aggregate_version,
            o.channel,
            o.projection,
            o.status,
            o.priority,
            o.attempts,
            o.last_error,
            o.created_at,
            o.published_at,
            sa.case((o.projection == VERSION_PROJECTION, sa.type_coerce(o.payload, sa.Text))).label(
                "payload"
            ),
        )
        .where(o.aggregate_id == task_id)
        .order_by(o.id.desc())
        .limit(TIMELINE_ROWS)
    )
    return {
        "task": found,
        "events": [
            {
                "eventId": r.event_id,
                "version": int(r.task_version),
                "eventType": r.event_type,
                "stepId": r.step_id,
                "producerId": r.producer_id,
                "status": r.lifecycle_status,
                "businessStatus": r.business_status,
                "errorCode": r.error_code,
                "occurredAt": _iso(r.occurred_at),
                "committedAt": _iso(r.committed_at),
            }
            for r in reversed(list(events))
        ],
        "outbox": [
            {
                "id": int(r.id),
                "version": int(r.aggregate_version),
                # a VERSION row: its publications' channels and projections, joined by ","
                **dict(zip(_NAMES, described(r.channel, r.projection, r.payload), strict=True)),
                "status": r.status,
                "priority": int(r.priority),
                "attempts": int(r.attempts),
                "lastError": r.last_error,
                "createdAt": _iso(r.created_at),
                "publishedAt": _iso(r.published_at),
            }
            for r in reversed(list(outbox))
        ],
    }


async def tasks_by_id(conn: AsyncConnection, task_id: str) -> dict[str, Any] | None:
    c = task.c
    row = (
        await conn.execute(
            sa.select(
                c.id,
                c.tenant_id,
                c.owner_id,
                c.task_type,
                c.title,
                c.lifecycle_status,
                c.business_status,
                c.health,
                c.version,
                c.created_at,
                c.updated_at,
                c.failure_code,
            ).where(c.id == task_id)
        )
    ).first()
    if row is None:
        return None
    return {
        "taskId": row.id,
        "tenantId": row.tenant_id,
        "ownerId": row.owner_id,
        "taskType": row.task_type,
        "title": row.title,
        "status": row.lifecycle_status,
        "businessStatus": row.business_status,
        "health": row.health,
        "version": int(row.version),
        "failureCode": row.failure_code,
        "createdAt": _iso(row.created_at),
        "updatedAt": _iso(row.updated_at),
    }


async def backlog(conn: AsyncConnection, now: datetime) -> list[dict[str, Any]]:
    """Unpublished rows (PENDING, PROCESSING) per status and priority: how many, the oldest's
    age in seconds, and how many fall in each age bucket (``AGE_BUCKETS_SECONDS``)."""
    c = task_outbox.c
    edges = [now - timedelta(seconds=s) for s in AGE_BUCKETS_SECONDS]
    buckets = [sa.func.sum(sa.case((c.created_at > edges[0], 1), else_=0))]
    buckets += [
        sa.func.sum(sa.case((sa.and_(c.created_at <= newer, c.created_at > older), 1), else_=0))
        for newer, older in itertools.pairwise(edges)
    ]
    buckets.append(sa.func.sum(sa.case((c.created_at <= edges[-1], 1), else_=0)))
    rows = await conn.execute(
        sa.select(c.status, c.priority, sa.func.count(), sa.func.min(c.created_at), *buckets)
        .where(c.status.in_((PENDING, PROCESSING)))
        .group_by(c.status, c.priority)
        .order_by(c.status, c.priority.desc())
    )
    return [
        {
            "status": r[0],
            "priority": int(r[1]),
            "rows": int(r[2]),
            "oldestAgeSeconds": _age(now, r[3]),
            "byAge": [int(v or 0) for v in r[4:]],
        }
        for r in rows
    ]


async def relays(conn: AsyncConnection, now: datetime) -> dict[str, Any]:
    """Relay instances seen by the leases they hold now (``locked_by`` of PROCESSING rows: a relay
    between batches holds none and is not listed), and the pipeline's lag: the age of the oldest
    PENDING row that is due, and commit-to-publish seconds over the last ``LAG_SAMPLE_ROWS``
    published rows."""
    c = task_outbox.c
    leases = await conn.execute(
        sa.select(c.locked_by, sa.func.count(), sa.func.min(c.locked_at), sa.func.max(c.locked_at))
        .where(c.status == PROCESSING)
        .group_by(c.locked_by)
        .order_by(c.locked_by)
    )
    oldest_due = await conn.scalar(
        sa.select(sa.func.min(c.created_at)).where(c.status == PENDING, c.available_at <= now)
    )
    recent = (
        await conn.execute(
            sa.select(c.created_at, c.published_at)
            .where(c.status == PUBLISHED, c.published_at.is_not(None))
            .order_by(c.id.desc())
            .limit(LAG_SAMPLE_ROWS)
        )
    ).all()
    lags = sorted((r.published_at - r.created_at).total_seconds() for r in recent)
    return {
        "instances": [
            {
                "relayId": r[0],
                "leasedRows": int(r[1]),
                "oldestLeaseAgeSeconds": _age(now, r[2]),
                "newestLeaseAgeSeconds": _age(now, r[3]),
            }
            for r in leases
        ],
        "oldestDuePendingAgeSeconds": _age(now, oldest_due) or 0.0,
        "publishLagSeconds": {
            "samples": len(lags),
            "median": round(lags[len(lags) // 2], 3) if lags else None,
            "max": round(lags[-1], 3) if lags else None,
        },
    }


async def record(
    conn: AsyncConnection,
    *,
    operator_id: str,
    action: str,
    target: Sequence[int] | str,
    affected: int,
    now: datetime,
) -> None:
    """One audit row: ``operator_id`` did ``action`` to ``target`` (row ids or a description),
    ``affected`` rows changed. Write it in the action's transaction."""
    text = ",".join(str(i) for i in target) if not isinstance(target, str) else target
    if len(text) > 1024:
        text = text[:1000] + f"…(+{len(target) if not isinstance(target, str) else 0})"
    await conn.execute(
        sa.insert(operator_action).values(
            operator_id=operator_id[:128], action=action, target=text, affected=affected, acted_at=now
        )
    )


async def audit(conn: AsyncConnection, limit: int = 50) -> list[dict[str, Any]]:
    """The newest audit rows first."""
    c = operator_action.c
    rows = await conn.execute(
        sa.select(c.id, c.operator_id, c.action, c.target, c.affected, c.acted_at)
        .order_by(c.id.desc())
        .limit(min(max(limit, 1), MAX_ROWS))
    )
    return [
        {
            "id": int(r.id),
            "operatorId": r.operator_id,
            "action": r.action,
            "target": r.target,
            "affected": int(r.affected),
            "at": _iso(r.acted_at),
        }
        for r in rows
    ]
