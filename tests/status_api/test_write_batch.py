"""The one writer's statement shape (storage/write.py) and the hot path's small encoders (issue 16).

On MariaDB a batch's task and step rows are written with one multi-row upsert per table, not one
UPDATE per row; the rows read back exactly as the events left them, and a task row that vanished
under the lock still fails the batch (the version check's job). On SQLite the executemany path is
unchanged (the same behaviour tests run on both dialects).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from status_api.domain.projections import iso
from status_api.json_response import FastJSONResponse
from status_api.storage import repository as repo
from status_api.storage.tables import task, task_step
from status_api.storage.write import Change, write
from tests.status_api.harness import Harness


@contextmanager
def _statements(h: Harness) -> Iterator[list[str]]:
    """Every statement the Status API's engine sends while the block runs (the client's own count:
    the server's GLOBAL counters are shared with the tests running beside this one)."""
    sent: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        sent.append(statement)

    target = h.comp.engine.sync_engine
    event.listen(target, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(target, "before_cursor_execute", record)


async def test_a_batch_writes_its_task_and_step_rows_without_one_update_per_row(h: Harness) -> None:
    """8 tasks' events in one batch: 0 UPDATE statements on MariaDB (was 16: one per task row and
    one per step row), and every row reads back as the events left it."""
    if h.comp.engine.dialect.name == "sqlite":
        pytest.skip("the multi-row upsert is the MariaDB path; SQLite keeps its executemany")
    tasks = [await h.create_task(owner=f"u{i}") for i in range(8)]
    group = h.service.ingestor.group
    assert group is not None
    bodies = [
        h.step_event(t, "02_parse", "STEP_STARTED", "PARSING", progress={"current": i, "total": 9})
        for i, t in enumerate(tasks)
    ]
    callers = [h.comp.api.service_auth.event_caller(t.steps["02_parse"].token) for t in tasks]
    before = len(group.batch_sizes)
    with _statements(h) as sent:
        results = await asyncio.gather(
            *(h.service.ingest_event(b, c, b["eventId"]) for b, c in zip(bodies, callers, strict=True))
        )
    assert list(group.batch_sizes)[before:] == [8], "expected one batch"
    assert any(s.lstrip().upper().startswith("INSERT") for s in sent), sent  # the listener saw the batch
    assert [s for s in sent if s.lstrip().upper().startswith("UPDATE")] == []
    assert [r["taskVersion"] for r in results] == ["2"] * 8
    async with h.comp.engine.connect() as conn:
        stored = await repo.get_tasks(conn, [t.id for t in tasks])
        steps = await repo.current_steps(conn, [t.id for t in tasks])
    for i, t in enumerate(tasks):
        assert stored[t.id].version == 2 and stored[t.id].business_status == "PARSING"
        step = steps[t.id]["02_parse"]
        assert step.version == 2 and step.progress is not None and step.progress.current == i
        assert step.lifecycle.value == "RUNNING"
        assert steps[t.id]["01_prepare"].version == 1  # the untouched step stays as it was


async def test_a_task_row_that_vanished_under_the_lock_fails_the_batch(h: Harness) -> None:
    """The version predicate's guard on both dialects: the row is gone, the write raises, and the
    rollback leaves no trace (on MariaDB the upsert must not re-insert it)."""
    t = await h.create_task()
    async with h.comp.engine.connect() as conn:
        state = (await repo.get_tasks(conn, [t.id]))[t.id]
    moved = Change(at=state.updated_at, task=state, base_version=state.version)
    with pytest.raises(RuntimeError):
        async with h.comp.engine.begin() as conn:
            await conn.execute(task_step.delete().where(task_step.c.task_id == t.id))
            await conn.execute(task.delete().where(task.c.id == t.id))
            await write(conn, [moved])
    assert await h.scalar(sa.select(sa.func.count()).where(task.c.id == t.id)) == 1


def test_iso_prints_the_wall_clock_fields_in_milliseconds_whatever_the_tzinfo() -> None:
    def old(ts: datetime) -> str:
        return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"

    cases = [
        datetime(2026, 9, 21, 7, 10, 18, 156_789),
        datetime(2026, 9, 21, 7, 10, 18),
        datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 1_000, tzinfo=timezone(timedelta(hours=2))),
    ]
    for ts in cases:
        assert iso(ts) == old(ts)
    assert iso(None) is None


def test_fast_json_response_matches_starlette_and_falls_back_for_what_orjson_refuses() -> None:
    from starlette.responses import JSONResponse

    body: dict[str, Any] = {"accepted": True, "taskVersion": "2", "stepId": None, "msg": "é\u2028", "n": 7}
    assert FastJSONResponse(body).body == JSONResponse(body).body
    assert orjson.loads(FastJSONResponse(body).body) == body
    huge = {"n": 2**70}
    assert FastJSONResponse(huge).body == JSONResponse(huge).body
    assert FastJSONResponse(body).headers["content-type"] == "application/json"


class _TickingClock:
    """A clock that moves one second on every read: which read stamped what is visible."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


async def test_the_outbox_commit_clock_is_read_after_the_decision_just_before_commit(h: Harness) -> None:
    """Issue 16: the relays' commit→publish clock starts at the outbox row's ``created_at``. It is
    read by the writer right before the outbox INSERT (the transaction's last statement), not
    when the use case decided: the locks, reads and other writes are not commit→publish time."""
    from status_api.service.context import parse_time
    from status_api.storage.tables import task_outbox

    t = await h.create_task()
    ticking = _TickingClock(h.clock.now)
    h.service.clock = ticking
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    result = await h.send(body, t.steps["01_prepare"].token)
    decided = parse_time(result["committedAt"])
    async with h.comp.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(task_outbox.c.created_at, task_outbox.c.available_at).where(
                    task_outbox.c.aggregate_id == t.id,
                    task_outbox.c.aggregate_version == int(result["taskVersion"]),
                )
            )
        ).all()
    assert rows, "the event wrote outbox rows"
    stamped = {r.created_at.replace(microsecond=0) for r in rows}
    assert len(stamped) == 1, stamped  # one read for the whole batch
    assert stamped.pop() > decided, (rows, decided)
    assert all(r.available_at == r.created_at for r in rows)
