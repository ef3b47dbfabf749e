"""The progress window end to end (seed §3.5, §9.1): Status API use cases on the wall clock →
the outbox → a running relay (``Relay.run``) → a real gateway → a subscriber on the user and the
detail channel, on MariaDB and on SQLite (the embedded wiring: one engine, the post-commit hook
calls ``Relay.wake``).

The relays poll at ``NEVER``: a hint makes a relay claim at once, and only the relay's own wake-up
at a held-back row's due time (``wakeups_total{source="due"}``) can publish that row — so these
tests fail on a relay that does not wake at the due time, and on a Status API without the window
(every hint would publish every progress).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.publisher import committed_at_ms
from relay.relay import Relay
from status_api.storage.database import create_engine as status_engine
from status_api.storage.database import init_db, utc_now
from status_api.storage.tables import task, task_outbox
from tests.relay.harness import Subscriber, make_relay, relay_config, wait_until
from tests.status_api.harness import FakeClock, Harness, Task, build
from tests.support import GatewayProcess, scaled

NEVER = 3600.0  # the relays' poll interval: no test outlives it
WITHIN = 15.0  # bound on "at once" under this loaded machine (scaled)
STEP = "01_prepare"


class WallClock(FakeClock):
    """The Status API's clock is the real one here: the relay compares due times with its own."""

    def __call__(self) -> datetime:
        return utc_now()


@dataclass
class Pipeline:
    status: Harness
    relay: Relay
    gateway: GatewayProcess
    window_ms: int


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/window.db"
    return str(request.getfixturevalue("relay_db_url"))


@pytest.fixture
async def backend(db_url: str) -> AsyncIterator[tuple[str, AsyncEngine]]:
    url = db_url
    eng = status_engine(url, pool_size=5)
    if eng.dialect.name == "sqlite":
        await init_db(eng)
    else:
        async with eng.begin() as conn:
            await conn.execute(task_outbox.delete())
    yield url, eng
    await eng.dispose()


@pytest.fixture
async def pipeline(backend: tuple[str, AsyncEngine], gateway: GatewayProcess) -> AsyncIterator[Pipeline]:
    """A Status API with a window of 1.5 s (scaled: a loaded machine still sends a burst within
    one window), and a running relay woken by its post-commit hook."""
    url, eng = backend
    window_ms = int(scaled(1.5) * 1000)
    clock = WallClock()
    status = Harness(build(eng, clock, {"progress": {"min_interval_ms": window_ms}}), clock)
    await status.service.load_registry_files()
    relay = make_relay(eng, relay_config(url, gateway, poll_interval_seconds=NEVER, concurrency=2))
    status.service.on_commit = lambda _rows: relay.wake()
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        yield Pipeline(status, relay, gateway, window_ms)
    finally:
        stop.set()
        await asyncio.wait_for(running, scaled(30))
        await relay.publisher.aclose()
        await status.http.aclose()


def _channels(t: Task) -> list[str]:
    return ["task_user:t1/u1", f"task_detail:t1/{t.id}"]


def _versions(sub: Subscriber, t: Task, channel: str) -> list[int]:
    return [v for c, tid, v, _ in sub.received if tid == t.id and c == channel]


async def _seen(sub: Subscriber, t: Task, version: int, what: str, within: float = WITHIN) -> None:
    await wait_until(
        lambda: all(version in _versions(sub, t, c) for c in _channels(t)), within=within, what=what
    )


def _due_wakeups(relay: Relay) -> float:
    return float(relay.metrics.wakeups.labels("due")._value.get())


async def _progress(p: Pipeline, t: Task, current: int) -> int:
    r = await p.status.report(
        t, STEP, "STEP_PROGRESS", "PREPARING", progress={"current": current, "total": 100}
    )
    return int(r["taskVersion"])


async def _row_times(eng: AsyncEngine, task_id: str, version: int) -> list[tuple[datetime, datetime | None]]:
    c = task_outbox.c
    async with eng.connect() as conn:
        rows = await conn.execute(
            sa.select(c.available_at, c.published_at).where(
                c.aggregate_id == task_id, c.aggregate_version == version
            )
        )
        return [(r[0], r[1]) for r in rows]


async def test_a_burst_in_one_window_publishes_only_the_last_progress_when_the_window_closes(
    pipeline: Pipeline,
) -> None:
    """Ten progress reports inside one window, after a first one: the client gets the first at
    once and, of the ten, only the last — published by the relay's wake-up at its due time (the
    hints of the ten found nothing due), within the window plus a bounded delay. Every state
    version from the subscription on reaches the client on both channels."""
    p = pipeline
    t = await p.status.create_task()
    async with Subscriber(p.gateway, _channels(t)) as sub:
        # The creation (version 1) may have been published before the subscription: not asserted.
        await p.status.report(t, STEP, "STEP_STARTED", "PREPARING")
        await _seen(sub, t, 2, "STEP_STARTED")
        opened = time.monotonic()  # no later than the first progress's window opens
        first = await _progress(p, t, 1)
        await _seen(sub, t, first, "the first progress, at once (the leading edge)")
        wakeups = _due_wakeups(p.relay)
        burst = [await _progress(p, t, i) for i in range(2, 12)]
        took = time.monotonic() - opened
        last = burst[-1]
        await _seen(sub, t, last, "the last progress", within=WITHIN + p.window_ms / 1000)
        # At most one progress per window: a burst that a loaded machine stretched over k windows
        # may publish up to k of its reports (each the newest when its window closed); the last
        # always arrives, and nothing but progress versions of the burst comes between. The
        # windows are counted from the first progress's (they are aligned to it, not to the burst).
        windows = 1 + int(took * 1000 // p.window_ms)
        for channel in _channels(t):
            seen = [v for v in _versions(sub, t, channel) if v > 1]
            assert seen[:2] == [2, first] and seen[-1] == last, (channel, seen)
            assert set(seen[2:]) <= set(burst) and len(seen) - 2 <= windows, (channel, seen, took)
        if windows == 1:
            assert _due_wakeups(p.relay) > wakeups  # the due-time wake-up published it, not a hint
        eng = p.relay.leases.engine

        async def marked() -> list[tuple[datetime, datetime | None]] | None:
            rows = await _row_times(eng, t.id, last)
            return rows if all(published for _, published in rows) else None

        times = await wait_until(marked, within=WITHIN, what="the last progress marked PUBLISHED")
        assert len(times) == 1  # one row: both channels' publications
        for due, published in times:
            assert published is not None and published >= due  # never before its window closed
        for channel, tid, version, tags in sub.received:
            if tid == t.id and version == last:
                assert int(tags["published_at_ms"]) >= committed_at_ms(min(d for d, _ in times)), channel


async def test_a_state_change_right_after_a_progress_wins_and_the_held_progress_never_follows(
    pipeline: Pipeline,
) -> None:
    """A progress held back by the window, then STEP_COMPLETED: the state reaches the client; the
    held progress's rows were replaced in the state's commit, so once its due time has passed, a
    later version (STEP_STARTED of the next step) reaches the client with nothing older between:
    the client applied every version in order and never the held one."""
    p = pipeline
    t = await p.status.create_task()
    async with Subscriber(p.gateway, _channels(t)) as sub:
        await p.status.report(t, STEP, "STEP_STARTED", "PREPARING")
        first = await _progress(p, t, 1)
        await _seen(sub, t, first, "the first progress")
        held = await _progress(p, t, 2)
        done = await p.status.report(t, STEP, "STEP_COMPLETED", "PREPARED", durationMs=5)
        state = int(done["taskVersion"])
        await _seen(sub, t, state, "STEP_COMPLETED")
        assert await _row_times(p.relay.leases.engine, t.id, held) == []
        due = await p.status.scalar(sa.select(task.c.progress_due_at).where(task.c.id == t.id))
        await wait_until(lambda: utc_now() > due, within=WITHIN, what="the held progress's due time")
        later = await p.status.report(t, "02_parse", "STEP_STARTED", "PARSING")
        await _seen(sub, t, int(later["taskVersion"]), "the next step's STEP_STARTED")
        for channel in _channels(t):
            versions = _versions(sub, t, channel)
            assert held not in versions, channel
            assert versions == sorted(set(versions)) and versions[-2:] == [state, int(later["taskVersion"])]
