"""An ingest batch on MariaDB is two requests (``storage/driver_sql.Request``): its reads (the task
lock, the steps, the idempotency rows), then every write and the COMMIT; no server-side prepared
statement, no COMMIT of the transaction's own after the request's. Counted with the server's
per-session counters on an engine of one pooled connection (every transaction runs on the session
read). Values are SQL literals rendered by the request: they are stored and read back as
SQLAlchemy's statements store and read them (with and without ``NO_BACKSLASH_ESCAPES``). A
failing statement in the middle of the write request is the error the retries key on, and the
whole batch rolls back; a task row that vanished under the lock still fails the batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from operator import itemgetter
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage import driver_sql
from status_api.storage import repository as repo
from status_api.storage.database import create_engine
from status_api.storage.tables import task, task_event_dedup, task_outbox, task_step
from status_api.storage.write import Change, DedupRow, write
from tests.status_api.harness import FakeClock, Harness, build
from tests.status_api.test_driver_sql import _outbox, _outbox_rows

pytestmark = pytest.mark.mysql

COUNTERS = ("Com_stmt_prepare", "Com_stmt_execute", "Com_commit", "Com_rollback", "Com_select")


@pytest.fixture
async def one_conn(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """An engine of exactly one pooled connection on the test's (cleaned) MariaDB database."""
    if engine.dialect.name == "sqlite":
        pytest.skip("the request path is MariaDB's")
    eng = create_engine(engine.url.render_as_string(hide_password=False), pool_size=1, max_overflow=0)
    yield eng
    await eng.dispose()


async def _session(eng: AsyncEngine) -> dict[str, int]:
    """This session's counters."""
    async with eng.connect() as conn:
        rows = (await conn.exec_driver_sql("SHOW SESSION STATUS")).all()
    return {str(r[0]): int(r[1]) for r in rows if r[0] in COUNTERS}


async def _counted(eng: AsyncEngine, before: dict[str, int]) -> dict[str, int]:
    """The counters' change since ``before``, less what reading them costs (measured: two reads
    in a row; the read is itself a statement and ends with the Connection's ROLLBACK)."""
    after = await _session(eng)
    again = await _session(eng)
    return {k: (after[k] - before[k]) - (again[k] - after[k]) for k in COUNTERS}


async def test_a_batch_is_two_requests_without_prepared_statements(one_conn: AsyncEngine) -> None:
    h = Harness(build(one_conn, FakeClock()), FakeClock())
    await h.service.load_registry_files()
    try:
        tasks = [await h.create_task(owner=f"u{i}") for i in range(8)]
        group = h.service.ingestor.group
        assert group is not None
        bodies = [
            h.step_event(t, "02_parse", "STEP_STARTED", "PARSING", progress={"current": i, "total": 9})
            for i, t in enumerate(tasks)
        ]
        callers = [h.comp.api.service_auth.event_caller(t.steps["02_parse"].token) for t in tasks]
        sent: list[str] = []

        def record(_c: object, _cur: object, statement: str, *_args: object) -> None:
            sent.append(statement)

        before = await _session(one_conn)
        batches = len(group.batch_sizes)
        sa.event.listen(one_conn.sync_engine, "before_cursor_execute", record)
        try:
            results = await asyncio.gather(
                *(h.service.ingest_event(b, c, b["eventId"]) for b, c in zip(bodies, callers, strict=True))
            )
        finally:
            sa.event.remove(one_conn.sync_engine, "before_cursor_execute", record)
        d = await _counted(one_conn, before)
        assert list(group.batch_sizes)[batches:] == [8], "expected one batch"
        assert [r["taskVersion"] for r in results] == ["2"] * 8
        assert len(sent) == 2, sent  # the reads, then the writes with the COMMIT
        assert sent[0].count("SELECT") == 3 and "FOR UPDATE" in sent[0]
        assert sent[1].rstrip().endswith("COMMIT")
        assert d["Com_stmt_prepare"] == 0 and d["Com_stmt_execute"] == 0, d
        assert d["Com_commit"] == 1, d  # the request's: the transaction sent none of its own
        assert d["Com_rollback"] == 0, d
        async with one_conn.connect() as conn:  # committed: another transaction sees it
            stored = await repo.get_tasks(conn, [t.id for t in tasks])
        assert {s.version for s in stored.values()} == {2}
    finally:
        await h.http.aclose()


async def test_a_failing_statement_rolls_back_the_whole_request(one_conn: AsyncEngine) -> None:
    """A duplicate idempotency key after the task's upsert: ``IntegrityError`` (1062, what the
    transaction retries key on), the upsert before it is rolled back, nothing after it ran (the
    COMMIT), and the connection serves the next transaction."""
    h = Harness(build(one_conn, FakeClock()), FakeClock())
    await h.service.load_registry_files()
    try:
        t = await h.create_task()
        async with one_conn.connect() as conn:
            state = (await repo.get_tasks(conn, [t.id]))[t.id]
        dedup = DedupRow("e-dup", t.id, "h", {"n": 1}, state.updated_at)
        async with one_conn.begin() as conn:
            await write(conn, [Change(at=state.updated_at, dedup=dedup)], commit=True)
        bumped = dataclasses.replace(state, version=state.version + 1, business_status="X")
        change = Change(at=state.updated_at, task=bumped, base_version=state.version, dedup=dedup)
        with pytest.raises(sa.exc.IntegrityError) as caught:
            async with one_conn.begin() as conn:
                await write(conn, [change], commit=True)
        assert caught.value.orig is not None and caught.value.orig.args[0] == 1062
        async with one_conn.connect() as conn:
            again = (await repo.get_tasks(conn, [t.id]))[t.id]
        assert (again.version, again.business_status) == (state.version, state.business_status)
    finally:
        await h.http.aclose()


@pytest.mark.parametrize("commit", [False, True], ids=["open", "commit"])
@pytest.mark.parametrize("server", ["mariadb", "mysql-path", "split"])
async def test_a_task_row_that_vanished_under_the_lock_fails_the_request(
    one_conn: AsyncEngine, commit: bool, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upsert's affected-rows guard runs in the request, before the COMMIT (MariaDB); on the
    MySQL path (no ``IF`` outside stored programs) it is checked on the answer and the COMMIT is
    sent only after the check (forced here on MariaDB), and a good batch still commits. A request
    cut into several (past ``MAX_REQUEST_BYTES``) keeps each guard with its statement."""
    if server == "mysql-path":
        monkeypatch.setattr(driver_sql, "mariadb", lambda _conn: False)
    if server == "split":  # a request per statement: the guard still goes with its upsert
        monkeypatch.setattr(driver_sql, "MAX_REQUEST_BYTES", 1)
    h = Harness(build(one_conn, FakeClock()), FakeClock())
    await h.service.load_registry_files()
    try:
        t = await h.create_task()
        async with one_conn.connect() as conn:
            state = (await repo.get_tasks(conn, [t.id]))[t.id]
        moved = Change(at=state.updated_at, task=state, base_version=state.version)
        with pytest.raises(RuntimeError, match="under the lock"):
            async with one_conn.begin() as conn:
                await conn.execute(task_step.delete().where(task_step.c.task_id == t.id))
                await conn.execute(task.delete().where(task.c.id == t.id))
                await write(conn, [moved], commit=commit)
        async with one_conn.connect() as conn:
            n = (await conn.execute(sa.select(sa.func.count()).where(task.c.id == t.id))).scalar()
        assert n == 1
        bumped = dataclasses.replace(state, version=state.version + 1, business_status="Y")
        async with one_conn.begin() as conn:
            await write(
                conn, [Change(at=state.updated_at, task=bumped, base_version=state.version)], commit=commit
            )
        async with one_conn.connect() as conn:
            assert (await repo.get_tasks(conn, [t.id]))[t.id].business_status == "Y"
    finally:
        await h.http.aclose()


@pytest.mark.parametrize("no_backslash", [False, True], ids=["default", "no-backslash-escapes"])
async def test_literals_store_and_read_what_sqlalchemy_does(
    one_conn: AsyncEngine, no_backslash: bool
) -> None:
    """Quotes, backslashes, ``%s``, non-ASCII, JSON null, SQL NULL, timestamps: rows written by a
    request equal rows written by ``sa.insert``; a request's SELECT reads what SQLAlchemy reads."""
    rows = [_outbox(n) for n in range(3)]
    rows[1]["traceparent"] = "00-'\\x1a\n\r\x00-é"  # a plain string column with what needs escaping
    async with one_conn.begin() as conn:
        await conn.execute(task_outbox.delete())
        await conn.execute(sa.insert(task_outbox), rows)
    expected = await _outbox_rows(one_conn)
    async with one_conn.begin() as conn:
        if no_backslash:
            await conn.exec_driver_sql("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
        await conn.execute(task_outbox.delete())
        req = driver_sql.Request(conn)
        req.insert(task_outbox, rows)
        await req.send()
        dedups = [
            {
                "event_id": f"e'{n}\\",
                "task_id": "t",
                "payload_hash": "h",
                "result": {"s": "a'b\\c"},
                "created_at": rows[0]["created_at"],
            }
            for n in range(2)
        ]
        req = driver_sql.Request(conn)
        req.insert(task_event_dedup, dedups)
        await req.send()
        req = driver_sql.Request(conn)
        at = req.select(task_event_dedup, "event_id", [d["event_id"] for d in dedups])
        got: list[Any] = (await req.send())[at]
        want = await driver_sql.select_in(
            conn, task_event_dedup, "event_id", [d["event_id"] for d in dedups], sa.select(task_event_dedup)
        )
        if no_backslash:
            await conn.exec_driver_sql(
                "SET SESSION sql_mode = REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', '')"
            )
    assert await _outbox_rows(one_conn) == expected
    key = itemgetter("event_id")
    assert sorted(got, key=key) == sorted(want, key=key)
    assert sorted(r["result"]["s"] for r in got) == ["a'b\\c", "a'b\\c"]
