"""The one writer of the Status API: :func:`write` saves a batch of :class:`Change` values inside
the caller's open transaction — task and step rows, the event log, the outbox and the idempotency
rows, each table with at most one statement (a multi-row upsert for updates on MariaDB, an
executemany on SQLite), so a batch of 64 events costs the same round trips as one event. A single
change is a batch of one.

Writers lock their task rows first (``repository.lock_tasks``, ascending id order), which serializes
everything that touches one task without a global lock (seed §11.2). Several changes of one task in
a batch collapse into one task row write (version-checked against the version read under the lock)
and one row write per step attempt. Must not import the domain's decision modules or the service.

The outbox's write side lives here too (:func:`append_outbox`; what a row means is
``storage/outbox.py``). The outbox is written last, just before the caller's COMMIT, and with
``stamp`` its rows' ``created_at`` (the relays' "commit clock", the start of
``state_commit_to_publish_seconds``) is read at that moment: a clock read when the use
case decided would count the whole transaction — locks, reads, the other writes — as
commit→publish latency.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain.model import JSON, StepState, TaskState
from status_api.storage.driver_sql import Request, driver_execute, insert_rows
from status_api.storage.outbox import PENDING, OutboxMessage, Priority, effective_priority, supersedable
from status_api.storage.repository import purge_timeline, step_values, task_values
from status_api.storage.tables import (
    execution_token_renewal,
    task,
    task_event_dedup,
    task_event_log,
    task_outbox,
    task_step,
)


@dataclass(frozen=True, slots=True)
class DedupRow:
    """The idempotency record of an eventId (or creation ``Idempotency-Key``): the first result."""

    event_id: str
    task_id: str
    payload_hash: str
    result: Mapping[str, JSON]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Change:
    """What one use case changes on one task; commits atomically with its batch (seed §5.1).

    ``task`` is the task after the change, or None when the task row stays as it is (a heartbeat,
    a stale event). ``base_version`` is the version the task had when read under its lock; None
    means ``task`` is new (INSERT). ``steps`` are step-attempt rows to update, ``new_steps`` rows to
    insert (creation, a new attempt). ``log`` holds ``task_event_log`` rows; ``outbox`` the
    messages of version ``task.version``, stamped ``at`` (the commit-time clock). ``purge`` =
    ``(task_id, version)`` deletes that task's event-log entries up to ``version`` (retention).
    ``coalesce`` (a STEP_PROGRESS version, seed §3.5 "throttled, overwritable"): the version's
    messages replace the task's older supersedable *progress* messages still waiting for a relay,
    in this batch and in the outbox (complete state: only intermediate progress is dropped; every
    other version keeps its rows). ``due_at`` (a progress version held back by the task's progress
    window, ``domain/progress_window.py``): its rows' ``available_at``, when the relays may claim
    them (never before the commit clock). Any other new version of a task whose latest progress is
    due after ``at`` (``task.progress_due_at``) replaces those waiting progress rows the same way,
    so a held-back progress is never published after a newer version of its channel.
    ``traceparent``: the W3C trace context stored on the version's outbox rows (set only when the
    Status API traces; httpwire/tracing.py).
    """

    at: datetime
    task: TaskState | None = None
    base_version: int | None = None
    steps: tuple[StepState, ...] = ()
    new_steps: tuple[StepState, ...] = ()
    log: tuple[Mapping[str, Any], ...] = ()
    outbox: tuple[OutboxMessage, ...] = ()
    dedup: DedupRow | None = None
    purge: tuple[str, int] | None = None
    #: ``execution_token_renewal`` audit rows (a renewal writes only these).
    renewals: tuple[Mapping[str, Any], ...] = ()
    coalesce: bool = False
    due_at: datetime | None = None
    traceparent: str | None = None


_UPDATE_TASK = sa.update(task).where(
    task.c.id == sa.bindparam("b_id"), task.c.version == sa.bindparam("b_expected_version")
)
_UPDATE_STEP = sa.update(task_step).where(
    task_step.c.task_id == sa.bindparam("b_task_id"),
    task_step.c.step_id == sa.bindparam("b_step_id"),
    task_step.c.attempt == sa.bindparam("b_attempt"),
)
StepKey = tuple[str, str, int]


def _key(s: StepState) -> StepKey:
    return (s.task_id, s.step_id, s.attempt)


@dataclass(slots=True)
class _Rows:
    """A batch's changes merged per table: one entry per task and per step attempt."""

    new_tasks: dict[str, TaskState] = field(default_factory=dict)
    updated: dict[str, tuple[TaskState, int]] = field(default_factory=dict)
    new_steps: dict[StepKey, StepState] = field(default_factory=dict)
    steps: dict[StepKey, StepState] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    messages: list[OutboxEntry] = field(default_factory=list)
    dedup: list[dict[str, Any]] = field(default_factory=list)
    purges: list[tuple[str, int]] = field(default_factory=list)
    renewals: list[dict[str, Any]] = field(default_factory=list)
    #: (task_id, version) of coalescing progress versions (:attr:`Change.coalesce`).
    coalesce: list[tuple[str, int]] = field(default_factory=list)
    #: (task_id, version) of the other versions that replace a held-back progress.
    replacing: list[tuple[str, int]] = field(default_factory=list)
    #: (task_id, version) -> the due time of a held-back progress version's rows.
    due: dict[tuple[str, int], datetime] = field(default_factory=dict)
    #: (task_id, version) -> traceparent of the traced versions (:attr:`Change.traceparent`);
    #: None until one is (an untraced batch allocates nothing for it).
    traces: dict[tuple[str, int], str] | None = None

    def add(self, c: Change) -> None:
        t = c.task
        if t is not None:
            if c.base_version is None or t.id in self.new_tasks:
                self.new_tasks[t.id] = t
            else:
                base = self.updated[t.id][1] if t.id in self.updated else c.base_version
                self.updated[t.id] = (t, base)
            if c.outbox:
                self.messages.append((t.id, t.version, c.outbox, c.at))
                if c.coalesce:
                    self.coalesce.append((t.id, t.version))
                elif t.progress_due_at is not None and t.progress_due_at > c.at:
                    self.replacing.append((t.id, t.version))
                if c.due_at is not None:
                    self.due[(t.id, t.version)] = c.due_at
                if c.traceparent:
                    if self.traces is None:
                        self.traces = {}
                    self.traces[(t.id, t.version)] = c.traceparent
        for s in c.new_steps:
            self.new_steps[_key(s)] = s
        for s in c.steps:
            (self.new_steps if _key(s) in self.new_steps else self.steps)[_key(s)] = s
        self.log += (dict(r) for r in c.log)
        if c.dedup is not None:
            d = c.dedup
            self.dedup.append(
                {
                    "event_id": d.event_id,
                    "task_id": d.task_id,
                    "payload_hash": d.payload_hash,
                    "result": dict(d.result),
                    "created_at": d.created_at,
                }
            )
        if c.purge is not None:
            self.purges.append(c.purge)
        self.renewals += (dict(r) for r in c.renewals)


async def write(
    conn: AsyncConnection,
    changes: Sequence[Change],
    stamp: Callable[[], datetime] | None = None,
    *,
    commit: bool = False,
) -> int:
    """Save ``changes`` in order (later changes of a task win). Writes nothing for an empty batch.
    Returns the number of outbox rows written: the caller wakes the relays once the transaction
    has COMMITTED (``ServiceContext.transact``), never before. ``stamp`` (the service clock) is
    read once, right before the outbox INSERT, for the rows' ``created_at`` / ``available_at``
    (never earlier than a change's ``at``); without it they are the changes' ``at``.

    On MariaDB/MySQL every statement goes in ONE request (``driver_sql.Request``), with the
    ``COMMIT`` when ``commit`` (the last thing the caller's transaction does: it then sends no
    COMMIT of its own); other dialects run them one by one and ignore ``commit`` (the caller's
    transaction commits).

    Raises:
        RuntimeError: a task's version moved under the lock (a bug: writers lock first).
        sqlalchemy.exc.IntegrityError: a unique key (eventId, version, sourceSeq) was taken.
    """
    rows = _Rows()
    for c in changes:
        rows.add(c)
    for task_id, up_to_version in rows.purges:  # retention only: a background batch, never ingest
        await purge_timeline(conn, task_id, up_to_version)
    req = Request(conn) if _multi_row(conn) else None
    if rows.new_tasks:
        await _insert(conn, req, task, [task_values(t) for t in rows.new_tasks.values()])
    if rows.updated:
        await _update_tasks(conn, list(rows.updated.values()), req)
    if rows.new_steps:
        await _insert(conn, req, task_step, [step_values(s) for s in rows.new_steps.values()])
    if rows.steps:
        await _update_steps(conn, list(rows.steps.values()), req)
    if rows.log:
        await _insert(conn, req, task_event_log, rows.log)
    if rows.dedup:
        await _insert(conn, req, task_event_dedup, rows.dedup)
    if rows.renewals:
        await _insert(conn, req, execution_token_renewal, rows.renewals)
    entries = rows.messages
    if rows.coalesce or rows.replacing:
        entries = _coalesced(entries, rows.coalesce, rows.replacing)
        wanted = set(rows.coalesce) | set(rows.replacing)
        replacing = [(a, m.channel, v) for a, v, messages, _ in entries if (a, v) in wanted for m in messages]
        await supersede_pending(conn, replacing, request=req)
    if stamp is not None and entries:
        at = stamp()
        entries = [(agg, version, messages, max(at, c_at)) for agg, version, messages, c_at in entries]
    # last: its commit clock is read just before COMMIT
    await append_outbox(conn, entries, due=rows.due, traces=rows.traces, request=req)
    if req is not None and (len(req) or commit):
        await req.send(commit=commit)
    return sum(len(messages) for _, _, messages, _ in entries)


async def _insert(
    conn: AsyncConnection, req: Request | None, table: sa.Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    if req is not None:
        req.insert(table, rows)
    else:
        await insert_rows(conn, table, rows)


#: ``(aggregate_id, aggregate_version, messages, now)``: the outbox messages of one aggregate version.
OutboxEntry = tuple[str, int, Sequence[OutboxMessage], datetime]


async def append_outbox(
    conn: AsyncConnection,
    entries: Sequence[OutboxEntry],
    *,
    aggregate_type: str = "task",
    due: Mapping[tuple[str, int], datetime] | None = None,
    traces: Mapping[tuple[str, int], str] | None = None,
    request: Request | None = None,
) -> None:
    """Insert one PENDING outbox row per message of every entry with ONE multi-row statement (inside
    the Status API's state transaction); ``created_at`` / ``available_at`` are the commit-time clock,
    the priority is :func:`~status_api.storage.outbox.effective_priority`. ``aggregate_type``:
    ``task``, or ``broadcast`` for a tenant/system notice (seed §6.6). ``due`` maps ``(aggregate_id,
    version)`` to a later ``available_at`` (a progress held back by its window; never earlier than
    the commit clock). ``traces``: ``(aggregate_id, version) -> traceparent`` for the rows'
    ``traceparent`` column (empty or None: the column is left out of the statement and stays NULL).
    ``request``: the statement is added to it instead of run (MariaDB/MySQL, :func:`write`)."""
    due = due or {}
    rows: list[dict[str, Any]] = [
        {
            "aggregate_type": aggregate_type,
            "aggregate_id": aggregate_id,
            "aggregate_version": version,
            "channel": m.channel,
            "projection": m.projection,
            "payload": m.payload,
            "status": PENDING,
            "priority": effective_priority(m.priority, version),
            "available_at": max(now, due.get((aggregate_id, version), now)),
            "attempts": 0,
            "created_at": now,
        }
        for aggregate_id, version, messages, now in entries
        for m in messages
    ]
    if traces:
        contexts = [traces.get((a, v)) for a, v, messages, _ in entries for _ in messages]
        for row, traceparent in zip(rows, contexts, strict=True):
            row["traceparent"] = traceparent
    if rows:
        await _insert(conn, request, task_outbox, rows)


async def append_outbox_version(
    conn: AsyncConnection,
    aggregate_id: str,
    aggregate_version: int,
    messages: Sequence[OutboxMessage],
    now: datetime,
    *,
    aggregate_type: str = "task",
) -> None:
    """:func:`append_outbox` for one aggregate version (a batch of one)."""
    await append_outbox(
        conn, [(aggregate_id, aggregate_version, messages, now)], aggregate_type=aggregate_type
    )


def _coalesced(
    entries: Sequence[OutboxEntry],
    coalesce: Sequence[tuple[str, int]],
    replacing: Sequence[tuple[str, int]] = (),
) -> list[OutboxEntry]:
    """``entries`` without the supersedable messages of a progress version (``coalesce``) that a
    later progress version, or a later ``replacing`` version, of the same task replaces on the same
    channel within this batch."""
    newest: dict[tuple[str, str], int] = {}
    wanted = set(coalesce)
    newer = wanted | set(replacing)
    for agg, version, messages, _ in entries:
        if (agg, version) in newer:
            for m in messages:
                key = (agg, m.channel)
                newest[key] = max(newest.get(key, 0), version)
    out: list[OutboxEntry] = []
    for agg, version, messages, at in entries:
        kept = [
            m
            for m in messages
            if not (
                (agg, version) in wanted
                and supersedable(effective_priority(m.priority, version))
                and newest.get((agg, m.channel), 0) > version
            )
        ]
        if kept:
            out.append((agg, version, kept, at))
    return out


async def supersede_pending(
    conn: AsyncConnection, items: Sequence[tuple[str, str, int]], *, request: Request | None = None
) -> int:
    """Inside the state transaction: delete the PENDING supersedable rows of ``(aggregate_id,
    channel)`` older than ``version`` that a STEP_PROGRESS produced (its ``task_event_log`` entry
    says so), whether due or still held back by the progress window: a newer complete state on
    that channel replaces them before any relay publishes them (seed §3.5 progress coalescing).
    Rows a relay holds, and every other version's rows, are left alone. One statement for all of
    ``items`` (one round trip per batch, not per item; of several versions of one channel the
    newest bounds the others). Returns the number of rows deleted (0 when the statement is only
    added to ``request``, to run with the others: :func:`write`)."""
    if not items:
        return 0
    newest: dict[tuple[str, str], int] = {}
    for aggregate_id, channel, version in items:
        key = (aggregate_id, channel)
        newest[key] = max(version, newest.get(key, 0))
    pairs = sorted(newest.items())
    if request is not None:
        lit = request.literal
        match = " OR ".join(
            f"(aggregate_id = {lit(a)} AND channel = {lit(c)} AND aggregate_version < {int(v)})"
            for (a, c), v in pairs
        )
        head = _SUPERSEDE_SQL.format(mark="%s") % (lit(PENDING), int(Priority.PROGRESS))
        request.add(f"{head} AND ({match})")
        return 0
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    match = " OR ".join(
        [f"(aggregate_id = {mark} AND channel = {mark} AND aggregate_version < {mark})"] * len(pairs)
    )
    params: list[object] = [PENDING, int(Priority.PROGRESS)]
    for (aggregate_id, channel), version in pairs:
        params += (aggregate_id, channel, version)
    # Plain SQL through the driver: a statement object built per batch would cost more CPU in
    # SQLAlchemy (cache key, a compile per item count) than the round trips it saves.
    sql = _SUPERSEDE_SQL.format(mark=mark) + f" AND ({match})"
    if _multi_row(conn):  # MariaDB: on the driver connection (driver_sql's module docstring)
        return max((await driver_execute(conn, sql, tuple(params)))[1], 0)
    res = await conn.exec_driver_sql(sql, tuple(params))
    return max(res.rowcount, 0)


#: The rows :func:`supersede_pending` may delete, whatever the channel: pending, supersedable, and
#: of a version its task's event log records as a STEP_PROGRESS.
_SUPERSEDE_SQL = (
    "DELETE FROM task_outbox WHERE status = {mark} AND priority <= {mark}"
    " AND aggregate_version IN (SELECT task_version FROM task_event_log"
    " WHERE task_event_log.task_id = task_outbox.aggregate_id"
    " AND task_event_log.event_type = 'STEP_PROGRESS')"
)


def _multi_row(conn: AsyncConnection) -> bool:
    return conn.dialect.name in ("mysql", "mariadb")


async def _update_tasks(
    conn: AsyncConnection, changes: Sequence[tuple[TaskState, int]], req: Request | None = None
) -> None:
    """``(task, version it had when locked)`` pairs in one statement.

    SQLite: an UPDATE executemany whose version predicate is a belt-and-braces check on top of the
    lock. MariaDB: one multi-row upsert of rows this transaction holds ``FOR UPDATE`` (their version
    cannot move); every row must report "updated" (2), so a row that had vanished (the upsert would
    have inserted it, 1) fails the batch as the version check would (with ``req``: checked in
    the request, before anything after it runs: ``Request.expect_affected``).
    """
    if req is not None:
        req.insert(
            task,
            [task_values(t) for t, _ in changes],
            upsert=True,
            expect_per_row=2,
            message="task rows changed under the lock",
        )
        return
    if _multi_row(conn):
        affected = await insert_rows(conn, task, [task_values(t) for t, _ in changes], upsert=True)
        if affected not in (-1, 2 * len(changes)):
            raise RuntimeError(f"task rows changed under the lock (upsert rowcount {affected})")
        return
    rows = []
    for t, expected in changes:
        values = task_values(t)
        values["b_id"] = values.pop("id")
        values["b_expected_version"] = expected
        rows.append(values)
    res = await conn.execute(_UPDATE_TASK, rows)
    if res.rowcount not in (-1, len(rows)):
        raise RuntimeError(f"{len(rows) - res.rowcount} task version(s) moved under the lock")


async def _update_steps(
    conn: AsyncConnection, rows_in: Sequence[StepState], req: Request | None = None
) -> None:
    """Step-attempt rows of tasks this transaction locked: one multi-row upsert on MariaDB (added
    to ``req`` when given), an UPDATE executemany on SQLite."""
    if req is not None:
        req.insert(task_step, [step_values(s) for s in rows_in], upsert=True)
        return
    if _multi_row(conn):
        await insert_rows(conn, task_step, [step_values(s) for s in rows_in], upsert=True)
        return
    rows = []
    for s in rows_in:
        values = step_values(s)
        values["b_task_id"] = values.pop("task_id")
        values["b_step_id"] = values.pop("step_id")
        values["b_attempt"] = values.pop("attempt")
        rows.append(values)
    await conn.execute(_UPDATE_STEP, rows)
