"""``storage/driver_sql.insert_rows`` stores rows exactly as SQLAlchemy's INSERT does (JSON columns,
a ``None`` in a JSON column, quotes and non-ASCII text, timestamps), cuts a large batch into several
statements, and its upsert counts 2 affected rows per updated row."""

from __future__ import annotations

from datetime import datetime
from operator import itemgetter
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage import driver_sql
from status_api.storage.tables import task, task_event_dedup, task_outbox, task_step
from tests.status_api.harness import Harness


def _outbox(n: int) -> dict[str, Any]:
    return {
        "aggregate_type": "task",
        "aggregate_id": f"task-{n}",
        "aggregate_version": n,
        "channel": 'task_detail:t/it\'s "quoted" \\ ünïcode',
        "projection": "task.detail",
        "payload": None if n == 0 else {"n": n, "text": 'it\'s "quoted" \\ ünïcode %s'},
        "status": "PENDING",
        "priority": n % 3,
        "available_at": datetime(2026, 12, 2, 10, 0, 0, 123000),
        "attempts": 0,
        "created_at": datetime(2026, 12, 2, 10, 0, 1, 456000),
        "traceparent": None,
    }


def _dedup(n: int, **over: Any) -> dict[str, Any]:
    row = {
        "event_id": f"e{n}",
        "task_id": "t",
        "payload_hash": "h",
        "result": {"n": n},
        "created_at": datetime(2026, 12, 2),
    }
    return {**row, **over}


async def _outbox_rows(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    """Every outbox row but its id, with the payload as stored text (SQL NULL and JSON null differ)."""
    cols = [c for c in task_outbox.c if c.name != "id"]
    stmt = sa.select(*cols, sa.cast(task_outbox.c.payload, sa.Text)).order_by(task_outbox.c.aggregate_id)
    async with engine.connect() as conn:
        return [tuple(r) for r in (await conn.execute(stmt)).all()]


@pytest.mark.mysql
async def test_rows_are_stored_as_sqlalchemy_stores_them(engine: AsyncEngine) -> None:
    if engine.dialect.name == "sqlite":
        pytest.skip("the driver path is MariaDB's; SQLite runs the SQLAlchemy insert")
    rows = [_outbox(n) for n in range(3)]
    async with engine.begin() as conn:
        await conn.execute(sa.insert(task_outbox), rows)
    expected = await _outbox_rows(engine)
    async with engine.begin() as conn:
        await conn.execute(task_outbox.delete())
        assert await driver_sql.insert_rows(conn, task_outbox, rows) == 3
    assert await _outbox_rows(engine) == expected
    assert expected[0][-1] == "null"  # a None in a JSON column is JSON null, as SQLAlchemy writes it


@pytest.mark.mysql
async def test_upsert_and_a_batch_cut_into_several_statements(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.dialect.name == "sqlite":
        pytest.skip("upsert is MariaDB's")
    monkeypatch.setattr(driver_sql, "MAX_STATEMENT_BYTES", 3 * driver_sql._ROW_ALLOWANCE)
    async with engine.begin() as conn:
        assert await driver_sql.insert_rows(conn, task_event_dedup, [_dedup(n) for n in range(7)]) == 7
        updated = [_dedup(n, result={"n": -n}, payload_hash="h2") for n in range(7)]
        assert await driver_sql.insert_rows(conn, task_event_dedup, updated, upsert=True) == 14
    async with engine.connect() as conn:
        rows = (
            await conn.execute(sa.select(task_event_dedup.c.payload_hash, task_event_dedup.c.result))
        ).all()
    assert sorted((h, r["n"]) for h, r in rows) == [("h2", -n) for n in reversed(range(7))]


async def test_sqlite_runs_the_sqlalchemy_insert(engine: AsyncEngine) -> None:
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's path")
    async with engine.begin() as conn:
        await driver_sql.insert_rows(conn, task_event_dedup, [_dedup(n) for n in range(3)])
        with pytest.raises(ValueError):
            await driver_sql.insert_rows(conn, task_event_dedup, [_dedup(9)], upsert=True)
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(task_event_dedup))).scalar() == 3


@pytest.mark.mysql
async def test_select_in_reads_what_the_sqlalchemy_statement_reads(h: Harness) -> None:
    """Task and step rows of real tasks (JSON, booleans, NULLs, timestamps) read both ways."""
    ids = []
    for n in range(3):
        t = await h.create_task()
        ids.append(t.id)
        await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
        if n == 1:
            await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING", progress={"current": 3, "total": 9})
        if n == 2:
            error = {"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True}
            await h.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=error)
    engine = h.comp.engine
    ids.sort()
    lock = sa.select(task).where(task.c.id.in_(sa.bindparam("ids", expanding=True))).order_by(task.c.id)
    steps = sa.select(task_step).where(task_step.c.task_id.in_(sa.bindparam("ids", expanding=True)))
    async with engine.begin() as conn:
        expected_tasks = [dict(r) for r in (await conn.execute(lock, {"ids": ids})).mappings()]
        expected_steps = [dict(r) for r in (await conn.execute(steps, {"ids": ids})).mappings()]
        got_tasks = await driver_sql.select_in(conn, task, "id", ids, lock, order_by="id", for_update=True)
        got_steps = await driver_sql.select_in(conn, task_step, "task_id", ids, steps)
    assert len(expected_tasks) == 3 and len(expected_steps) == 9
    assert [dict(r) for r in got_tasks] == expected_tasks
    key = itemgetter("task_id", "step_id", "attempt")
    assert sorted((dict(r) for r in got_steps), key=key) == sorted(expected_steps, key=key)
