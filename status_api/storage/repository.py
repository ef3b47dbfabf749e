"""Rows <-> domain values, and the reads the service and the queries run.

Every function takes an open ``AsyncConnection``; none opens or commits a transaction. Each read
takes a set of ids (one task is a set of one), so a batch costs one statement per table. Writers
lock their ``task`` rows first (:func:`lock_tasks`), which serializes everything that touches one
task — steps, event log, dedup and outbox — without a global lock (seed §11.2); the one writer is
``storage.write``. Retention deletes from the event log here (:func:`purge_timeline`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain.model import (
    TERMINAL,
    DataBody,
    DurationSource,
    ErrorInfo,
    Health,
    Lifecycle,
    Progress,
    StepState,
    TaskState,
)
from status_api.storage.driver_sql import Request, select_in
from status_api.storage.tables import (
    task,
    task_event_dedup,
    task_event_log,
    task_step,
)


def _ds(v: str | None) -> DurationSource | None:
    return DurationSource(v) if v else None


def task_from_row(r: Mapping[Any, Any]) -> TaskState:
    return TaskState(
        id=r["id"],
        tenant_id=r["tenant_id"],
        owner_id=r["owner_id"],
        project_id=r["project_id"],
        product=r["product"],
        task_type=r["task_type"],
        title=r["title"],
        lifecycle=Lifecycle(r["lifecycle_status"]),
        business_status=r["business_status"],
        status_definition_version=int(r["status_definition_version"]),
        operation_definition_version=int(r["operation_definition_version"]),
        attempt=int(r["attempt"]),
        coordinator_source_seq=int(r["coordinator_source_seq"]),
        version=int(r["version"]),
        health=Health(r["health"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        summary=DataBody(r["summary_schema"], r["summary_data"]) if r["summary_schema"] else None,
        failure_code=r["failure_code"],
        failure_message=r["failure_message"],
        failed_step_id=r["failed_step_id"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        duration_ms=r["duration_ms"],
        duration_source=_ds(r["duration_source"]),
        coordinator_id=r["coordinator_id"],
        progress_due_at=r["progress_due_at"],
    )


def task_values(t: TaskState) -> dict[str, Any]:
    return {
        "id": t.id,
        "tenant_id": t.tenant_id,
        "owner_id": t.owner_id,
        "project_id": t.project_id,
        "product": t.product,
        "task_type": t.task_type,
        "title": t.title,
        "lifecycle_status": t.lifecycle.value,
        "business_status": t.business_status,
        "status_definition_version": t.status_definition_version,
        "operation_definition_version": t.operation_definition_version,
        "attempt": t.attempt,
        "coordinator_source_seq": t.coordinator_source_seq,
        "version": t.version,
        "health": t.health.value,
        "summary_schema": t.summary.schema if t.summary else None,
        "summary_data": dict(t.summary.value) if t.summary else None,
        "failure_code": t.failure_code,
        "failure_message": t.failure_message,
        "failed_step_id": t.failed_step_id,
        "created_at": t.created_at,
        "started_at": t.started_at,
        "finished_at": t.finished_at,
        "duration_ms": t.duration_ms,
        "duration_source": t.duration_source.value if t.duration_source else None,
        "updated_at": t.updated_at,
        "coordinator_id": t.coordinator_id,
        "progress_due_at": t.progress_due_at,
    }


def step_from_row(r: Mapping[Any, Any]) -> StepState:
    progress = r["progress"]
    error = None
    if r["error_code"]:
        error = ErrorInfo(
            category=r["error_category"],
            code=r["error_code"],
            retryable=bool(r["error_retryable"]),
            user_message=r["error_message"] or "",
            diagnostics_ref=r["diagnostics_ref"],
        )
    return StepState(
        task_id=r["task_id"],
        step_id=r["step_id"],
        attempt=int(r["attempt"]),
        operation_code=r["operation_code"],
        producer_id=r["service_name"],
        source_seq=int(r["source_seq"]),
        version=int(r["version"]),
        lifecycle=Lifecycle(r["lifecycle_status"]),
        business_status=r["business_status"],
        health=Health(r["health"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        last_heartbeat_at=r["last_heartbeat_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        duration_ms=r["duration_ms"],
        duration_source=_ds(r["duration_source"]),
        progress=Progress(progress["current"], progress.get("total"), progress.get("unit"))
        if progress
        else None,
        data=DataBody(r["data_schema"], r["state_data"]) if r["data_schema"] else None,
        error=error,
    )


def step_values(s: StepState) -> dict[str, Any]:
    e = s.error
    return {
        "task_id": s.task_id,
        "step_id": s.step_id,
        "attempt": s.attempt,
        "operation_code": s.operation_code,
        "service_name": s.producer_id,
        "source_seq": s.source_seq,
        "version": s.version,
        "lifecycle_status": s.lifecycle.value,
        "business_status": s.business_status,
        "health": s.health.value,
        "last_heartbeat_at": s.last_heartbeat_at,
        "data_schema": s.data.schema if s.data else None,
        "state_data": dict(s.data.value) if s.data else None,
        "progress": s.progress.to_json() if s.progress else None,
        "created_at": s.created_at,
        "started_at": s.started_at,
        "finished_at": s.finished_at,
        "duration_ms": s.duration_ms,
        "duration_source": s.duration_source.value if s.duration_source else None,
        "error_category": e.category if e else None,
        "error_code": e.code if e else None,
        "error_message": e.user_message if e else None,
        "error_retryable": e.retryable if e else None,
        "diagnostics_ref": e.diagnostics_ref if e else None,
        "updated_at": s.updated_at,
    }


# The hot reads as module-level statements with an expanding ``IN`` parameter: SQLAlchemy memoizes
# a statement object's cache key, so a batch looks its compiled form up instead of building a new
# statement and hashing its structure every time (the ingest path's profile).
_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
_LOCK_TASKS = sa.select(task).where(task.c.id.in_(_IDS)).order_by(task.c.id).with_for_update()
_GET_TASKS = sa.select(task).where(task.c.id.in_(_IDS))
_CURRENT_STEPS = sa.select(task_step).where(task_step.c.task_id.in_(_IDS)).order_by(task_step.c.attempt)
_d = task_event_dedup.c
_GET_DEDUPS = sa.select(_d.event_id, _d.task_id, _d.payload_hash, _d.result).where(_d.event_id.in_(_IDS))


async def lock_tasks(conn: AsyncConnection, task_ids: Iterable[str]) -> dict[str, TaskState]:
    """``SELECT … FOR UPDATE`` task rows in ascending id order (two batches never deadlock on each
    other; SQLite: the BEGIN IMMEDIATE lock already serializes). Missing ids are absent."""
    ids = sorted(set(task_ids))
    if not ids:
        return {}
    rows = await select_in(conn, task, "id", ids, _LOCK_TASKS, order_by="id", for_update=True)
    return {r["id"]: task_from_row(r) for r in rows}


async def lock_batch(
    conn: AsyncConnection, task_ids: Iterable[str], event_ids: Iterable[str]
) -> tuple[dict[str, TaskState], dict[str, dict[str, StepState]], dict[str, Mapping[str, Any]]]:
    """A batch transaction's reads: :func:`lock_tasks` of ``task_ids``, :func:`current_steps` of
    the tasks found, :func:`get_dedups` of ``event_ids``. On MariaDB/MySQL the three queries go as
    ONE request (``driver_sql.Request``), the lock first; other dialects run the three functions."""
    ids = sorted(set(task_ids))
    eids = sorted(set(event_ids))
    if conn.dialect.name not in ("mysql", "mariadb"):
        tasks = await lock_tasks(conn, ids)
        return tasks, await current_steps(conn, tasks), await get_dedups(conn, eids)
    req = Request(conn)
    lock = req.select(task, "id", ids, order_by="id", for_update=True) if ids else -1
    steps_at = req.select(task_step, "task_id", ids, order_by="attempt") if ids else -1
    dedup_at = req.select(task_event_dedup, "event_id", eids) if eids else -1
    results = await req.send() if len(req) else []
    tasks = {r["id"]: task_from_row(r) for r in (results[lock] if ids else ())}
    steps: dict[str, dict[str, StepState]] = {tid: {} for tid in tasks}
    for r in results[steps_at] if ids else ():
        found = steps.get(r["task_id"])
        if found is not None:
            found[r["step_id"]] = step_from_row(r)
    dedups = {r["event_id"]: r for r in (results[dedup_at] if eids else ())}
    return tasks, steps, dedups


async def get_tasks(conn: AsyncConnection, task_ids: Iterable[str]) -> dict[str, TaskState]:
    ids = sorted(set(task_ids))
    if not ids:
        return {}
    rows = (await conn.execute(_GET_TASKS, {"ids": ids})).mappings()
    return {r["id"]: task_from_row(r) for r in rows}


async def current_steps(conn: AsyncConnection, task_ids: Iterable[str]) -> dict[str, dict[str, StepState]]:
    """taskId -> stepId -> the step's current (highest) attempt; every asked id has an entry."""
    ids = list(dict.fromkeys(task_ids))
    out: dict[str, dict[str, StepState]] = {tid: {} for tid in ids}
    if not ids:
        return out
    for r in await select_in(conn, task_step, "task_id", ids, _CURRENT_STEPS, order_by="attempt"):
        out[r["task_id"]][r["step_id"]] = step_from_row(r)
    return out


async def get_dedups(conn: AsyncConnection, event_ids: Iterable[str]) -> dict[str, Mapping[str, Any]]:
    """event_id -> (task_id, payload_hash, result) of the eventIds already recorded."""
    ids = sorted(set(event_ids))
    if not ids:
        return {}
    return {r["event_id"]: r for r in await select_in(conn, task_event_dedup, "event_id", ids, _GET_DEDUPS)}


async def last_task_level_seq(
    conn: AsyncConnection, task_id: str, producer_id: str, task_attempt: int
) -> int:
    """Highest accepted sourceSeq of one producer's task-level events (its own counter, seed §5)."""
    value = await conn.scalar(
        sa.select(sa.func.max(task_event_log.c.source_seq)).where(
            task_event_log.c.task_id == task_id,
            task_event_log.c.producer_id == producer_id,
            task_event_log.c.task_attempt == task_attempt,
            task_event_log.c.step_id.is_(None),
        )
    )
    return int(value or 0)


async def list_user_tasks(
    conn: AsyncConnection,
    tenant_id: str,
    owner_id: str,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[TaskState]:
    """The owner's tasks, newest update first, keyset-paged on (updated_at, id)."""
    q = sa.select(task).where(task.c.tenant_id == tenant_id, task.c.owner_id == owner_id)
    if after is not None:
        ts, tid = after
        q = q.where(sa.or_(task.c.updated_at < ts, sa.and_(task.c.updated_at == ts, task.c.id < tid)))
    q = q.order_by(task.c.updated_at.desc(), task.c.id.desc()).limit(limit)
    return [task_from_row(r) for r in (await conn.execute(q)).mappings()]


async def timeline(conn: AsyncConnection, task_id: str, after_version: int, limit: int) -> list[RowMapping]:
    q = (
        sa.select(task_event_log)
        .where(task_event_log.c.task_id == task_id, task_event_log.c.task_version > after_version)
        .order_by(task_event_log.c.task_version)
        .limit(limit)
    )
    return list((await conn.execute(q)).mappings())


async def oldest_retained_version(conn: AsyncConnection, task_id: str) -> int | None:
    v = await conn.scalar(
        sa.select(sa.func.min(task_event_log.c.task_version)).where(task_event_log.c.task_id == task_id)
    )
    return int(v) if v is not None else None


async def purge_timeline(conn: AsyncConnection, task_id: str, up_to_version: int) -> int:
    """Delete a task's event-log entries with ``task_version <= up_to_version`` (retention)."""
    res = await conn.execute(
        sa.delete(task_event_log).where(
            task_event_log.c.task_id == task_id, task_event_log.c.task_version <= up_to_version
        )
    )
    return int(res.rowcount or 0)


async def purgeable_prefixes(
    conn: AsyncConnection, older_than: datetime, limit: int
) -> list[tuple[str, int, int]]:
    """(task_id, highest task_version committed before ``older_than``, how many entries were) for
    up to ``limit`` tasks.

    Retention deletes whole prefixes: the retained part of a timeline is always a suffix, so
    ``oldest retained version > afterTaskVersion + 1`` tells a purged window from no events even
    if replicas' clocks disagree by a little.
    """
    e = task_event_log.c
    q = (
        sa.select(e.task_id, sa.func.max(e.task_version), sa.func.count())
        .where(e.committed_at < older_than)
        .group_by(e.task_id)
        .order_by(e.task_id)
        .limit(limit)
    )
    return [(r[0], int(r[1]), int(r[2])) for r in await conn.execute(q)]


async def health_candidates(
    conn: AsyncConnection, cutoff: datetime, limit: int
) -> list[tuple[str, str, int, str]]:
    """(task_id, step_id, attempt, wanted health) for running steps of open tasks whose health
    should change: HEALTHY with no liveness since ``cutoff`` -> STALE; STALE with liveness since
    ``cutoff`` -> HEALTHY. Steps of a terminal task are never candidates (seed §4.2)."""
    alive = sa.func.coalesce(task_step.c.last_heartbeat_at, task_step.c.started_at, task_step.c.created_at)
    base = (
        sa.select(task_step.c.task_id, task_step.c.step_id, task_step.c.attempt)
        .join(task, task.c.id == task_step.c.task_id)
        .where(
            task_step.c.lifecycle_status == Lifecycle.RUNNING.value,
            task.c.lifecycle_status.not_in([lc.value for lc in TERMINAL]),
        )
    )
    to_stale = (
        await conn.execute(
            base.where(task_step.c.health == Health.HEALTHY.value, alive < cutoff).limit(limit)
        )
    ).all()
    to_ok = (
        await conn.execute(base.where(task_step.c.health == Health.STALE.value, alive >= cutoff).limit(limit))
    ).all()
    return [(r[0], r[1], int(r[2]), Health.STALE.value) for r in to_stale] + [
        (r[0], r[1], int(r[2]), Health.HEALTHY.value) for r in to_ok
    ]
