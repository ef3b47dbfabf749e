"""``storage/driver_sql.insert_rows`` stores rows exactly as SQLAlchemy's INSERT does (JSON columns,
a ``None`` in a JSON column, quotes and non-ASCII text, timestamps), cuts a large batch into several
statements, and its upsert counts 2 affected rows per updated row. A request past the driver's read
bound is a lost, invalidated connection."""

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


_ANY = sa.select(task_event_dedup)  # SQLite's statement: unused on the MariaDB path


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


@pytest.mark.mysql
async def test_driver_errors_are_sqlalchemy_errors(engine: AsyncEngine) -> None:
    """Statements run on the driver connection raise what ``exec_driver_sql`` raised: the
    transaction retries key on ``IntegrityError`` and on the driver error's code."""
    if engine.dialect.name == "sqlite":
        pytest.skip("the driver path is MariaDB's")
    async with engine.begin() as conn:
        await driver_sql.insert_rows(conn, task_event_dedup, [_dedup(1)])
    with pytest.raises(sa.exc.IntegrityError) as caught:
        async with engine.begin() as conn:
            await driver_sql.insert_rows(conn, task_event_dedup, [_dedup(1)])
    assert caught.value.orig is not None and caught.value.orig.args[0] == 1062  # duplicate key
    with pytest.raises(sa.exc.DBAPIError) as error:
        async with engine.connect() as conn:
            await driver_sql.driver_execute(conn, "SELECT no_such_column FROM task", ())
    assert error.value.orig is not None and error.value.orig.args[0] == 1054  # unknown column
    assert not error.value.connection_invalidated


@pytest.mark.mysql
async def test_cursor_listeners_see_driver_statements(engine: AsyncEngine) -> None:
    """``before_cursor_execute`` listeners (the capacity benchmark's statement log) see the
    statements run on the driver connection, with their parameters."""
    if engine.dialect.name == "sqlite":
        pytest.skip("the driver path is MariaDB's")
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        seen.append((statement, params))

    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        async with engine.begin() as conn:
            await driver_sql.insert_rows(conn, task_event_dedup, [_dedup(7)])
            await driver_sql.select_in(conn, task_event_dedup, "event_id", ["e7"], _ANY)
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert [s.split()[0] for s, _ in seen] == ["INSERT", "SELECT"]
    assert seen[1][1] == ("e7",)


@pytest.mark.mysql
async def test_a_lost_connection_is_invalidated(engine: AsyncEngine) -> None:
    """A connection killed under a statement on the driver path is invalidated (never returned to
    the pool), as SQLAlchemy does for its own statements."""
    if engine.dialect.name == "sqlite":
        pytest.skip("the driver path is MariaDB's")
    async with engine.connect() as killer:
        with pytest.raises(sa.exc.DBAPIError) as caught:
            async with engine.connect() as conn:
                victim = (await conn.exec_driver_sql("SELECT CONNECTION_ID()")).scalar()
                await killer.exec_driver_sql(f"KILL CONNECTION {int(victim)}")
                await driver_sql.select_in(conn, task_event_dedup, "event_id", ["e1"], _ANY)
    assert caught.value.connection_invalidated
    async with engine.connect() as conn:  # the pool hands out a working connection
        assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1


@pytest.mark.mysql
async def test_a_request_past_the_read_bound_is_a_lost_connection(engine: AsyncEngine) -> None:
    """A request bounds its whole exchange by the driver's ``read_timeout`` (one timer, not one
    per socket read): past it, the error is the driver's for a timed-out read (``CR_SERVER_LOST``)
    as SQLAlchemy's, with the connection invalidated; the pool then hands out a working one."""
    if engine.dialect.name == "sqlite":
        pytest.skip("the request path is MariaDB's")
    with pytest.raises(sa.exc.OperationalError) as caught:
        async with engine.connect() as conn:
            sync = conn.sync_connection
            assert sync is not None
            driver: Any = sync.connection.driver_connection
            driver._read_timeout = 0.3
            req = driver_sql.Request(conn)
            req.add("SELECT SLEEP(5)")
            await req.send()
    assert caught.value.connection_invalidated
    assert caught.value.orig is not None and caught.value.orig.args[0] == 2013
    async with engine.connect() as conn:
        assert (await conn.exec_driver_sql("SELECT 1")).scalar() == 1
