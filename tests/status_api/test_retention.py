"""Event-log retention (issue 14; seed §17 "the timeline … recognises a purged window"), on SQLite
and MariaDB: the use case, the scheduled run on the reconciler, the CLI command and the option."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.config import ConfigError, load_config
from status_api.storage.tables import task, task_event_dedup, task_event_log
from tests.status_api.harness import TEST_CONFIG, FakeClock, Harness, build
from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]


async def _backdate(h: Harness, task_id: str, up_to_version: int, days: float) -> None:
    """Make versions ``<= up_to_version`` look committed ``days`` earlier (execution tokens are
    checked against real time, so the history is written now and aged here)."""
    e = task_event_log.c
    async with h.comp.engine.begin() as conn:
        for version, at in list(
            await conn.execute(
                sa.select(e.task_version, e.committed_at).where(
                    e.task_id == task_id, e.task_version <= up_to_version
                )
            )
        ):
            await conn.execute(
                task_event_log.update()
                .where(e.task_id == task_id, e.task_version == version)
                .values(committed_at=at - timedelta(days=days))
            )


async def _old_then_new(h: Harness) -> str:
    """A task with versions 1-3 committed ten days ago and 4-5 now; returns its id."""
    t = await h.create_task()
    for kind, business in [("STEP_STARTED", "PARSING")] + [("STEP_PROGRESS", "PARSING")] * 3:
        await h.report(t, "02_parse", kind, business)
    await _backdate(h, t.id, 3, days=10)
    return t.id


async def _versions(h: Harness, task_id: str) -> list[int]:
    async with h.comp.engine.connect() as conn:
        q = sa.select(task_event_log.c.task_version).where(task_event_log.c.task_id == task_id)
        return sorted(int(r[0]) for r in await conn.execute(q))


async def _assert_purged_window(h: Harness, task_id: str) -> None:
    gone = await h.user_get(f"/api/tasks/{task_id}/events?afterTaskVersion=0")
    assert gone["purged"] is True and gone["oldestAvailableTaskVersion"] == "4"
    assert [e["taskVersion"] for e in gone["events"]] == ["4", "5"]
    kept = await h.user_get(f"/api/tasks/{task_id}/events?afterTaskVersion=3")
    assert kept["purged"] is False and [e["taskVersion"] for e in kept["events"]] == ["4", "5"]
    # current state is untouched
    assert (await h.user_get(f"/api/tasks/{task_id}"))["version"] == "5"


async def test_purge_deletes_old_prefixes_and_the_timeline_says_purged(h: Harness) -> None:
    task_id = await _old_then_new(h)
    fresh = await h.create_task()
    assert await h.service.purge_event_log(h.clock() - timedelta(days=5)) == 3
    assert await _versions(h, task_id) == [4, 5]
    assert await _versions(h, fresh.id) == [1]
    await _assert_purged_window(h, task_id)
    assert await h.service.purge_event_log(h.clock() - timedelta(days=5)) == 0  # idempotent
    assert await h.scalar(sa.select(sa.func.count()).select_from(task)) == 2


async def test_purge_runs_in_batches_of_tasks(engine: AsyncEngine, clock: FakeClock) -> None:
    h = Harness(build(engine, clock, {"retention": {"batch_size": 2}}), clock)
    await h.service.load_registry_files()
    try:
        ids = [(await h.create_task(owner=f"u{i}")).id for i in range(5)]
        for task_id in ids:
            await _backdate(h, task_id, 1, days=3)
        assert await h.service.purge_event_log(clock() - timedelta(days=1)) == 5
        assert [await _versions(h, task_id) for task_id in ids] == [[]] * 5
        page = await h.user_get(f"/api/tasks/{ids[0]}/events?afterTaskVersion=0", user="u0")
        assert page["purged"] is True and page["oldestAvailableTaskVersion"] is None
    finally:
        await h.http.aclose()


async def test_scheduled_run_on_the_reconciler_honours_the_option(
    engine: AsyncEngine, clock: FakeClock
) -> None:
    h = Harness(build(engine, clock, {"retention": {"event_log_days": 5, "interval_seconds": 600}}), clock)
    await h.service.load_registry_files()
    try:
        rec = h.comp.reconciler
        task_id = await _old_then_new(h)
        assert await rec.purge_once() == 3
        await _assert_purged_window(h, task_id)
        # not due again before interval_seconds of the injected clock
        await _backdate(h, task_id, 5, days=6)
        assert await rec.purge_once() == 0
        h.clock.advance(601)
        assert await rec.purge_once() == 2
        assert await _versions(h, task_id) == []
    finally:
        await h.http.aclose()
        await h.check_outbox_messages()


async def test_without_the_option_the_scheduled_run_keeps_everything(h: Harness) -> None:
    task_id = await _old_then_new(h)
    assert await h.comp.reconciler.purge_once() == 0
    assert await h.service.purge_event_log() == 0
    assert await _versions(h, task_id) == [1, 2, 3, 4, 5]
    assert await h.scalar(sa.select(sa.func.count()).select_from(task_event_dedup)) == 4


async def _cli(tmp_path: Path, db_url: str, *args: str) -> tuple[int, str, str]:
    cfg = tmp_path / "status.json"
    cfg.write_text(json.dumps({**TEST_CONFIG, "database": {"url": db_url, "auto_init": False}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "taskcast",
        "status-api",
        "purge-events",
        "--config",
        str(cfg),
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), scaled(120))
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_purge_events_command(h: Harness, tmp_path: Path) -> None:
    task_id = await _old_then_new(h)
    url = h.comp.engine.url.render_as_string(hide_password=False)
    code, _, err = await _cli(tmp_path, url)
    assert code == 2 and "retention.event_log_days" in err
    code, out, err = await _cli(tmp_path, url, "--older-than-days", "5")
    assert code == 0, err
    assert "purged 3 event-log entries" in out
    await _assert_purged_window(h, task_id)


@pytest.mark.parametrize(
    ("retention", "needle"),
    [
        ({"event_log_days": 0}, "retention.event_log_days: must be > 0"),
        ({"event_log_days": -1}, "retention.event_log_days: must be > 0"),
        ({"interval_seconds": 0}, "retention.interval_seconds"),
        ({"batch_size": 0}, "retention.batch_size"),
        ({"event_log_dayz": 3}, "retention.event_log_dayz: unknown option"),
    ],
)
def test_retention_option_is_validated(tmp_path: Path, retention: dict[str, object], needle: str) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps({**TEST_CONFIG, "retention": retention}))
    with pytest.raises(ConfigError, match=needle):
        load_config(p, environ={})
    p.write_text(json.dumps({**TEST_CONFIG, "retention": {"event_log_days": 30}}))
    assert load_config(p, environ={}).retention.event_log_days == 30
