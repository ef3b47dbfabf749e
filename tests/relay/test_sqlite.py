"""SQLite: the single-claimer mode (BEGIN IMMEDIATE serialises claimers, no row is shared), the relay
cycle, and the operator CLI (dead list / dead requeue / purge). No services needed."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay import cli
from relay.claim import OutboxLeases, create_engine, utc_now
from relay.config import RelayConfig, build_config
from relay.publisher import PUBLISHED, Outcome, PublishResult
from relay.relay import Relay
from relay.wakeups import ClaimStart
from status_api.storage.database import init_db
from status_api.storage.outbox import OutboxRow
from status_api.storage.tables import task_outbox
from tests.relay.harness import RowSpec, insert, plan, statuses
from tests.support import scaled


@pytest.fixture
async def sqlite_url(tmp_path: Path) -> AsyncIterator[str]:
    url = f"sqlite+aiosqlite:///{tmp_path}/outbox.db"
    eng = create_engine(url)
    await init_db(eng)
    await eng.dispose()
    yield url


class RecordingPublisher:
    """Publishes nothing; answers from a table of channel → result (default: published)."""

    def __init__(self, results: dict[str, PublishResult] | None = None) -> None:
        self.results = results or {}
        self.calls: list[list[int]] = []

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        self.calls.append([r.id for r in rows])
        return [self.results.get(r.channel, PUBLISHED) for r in rows]

    async def aclose(self) -> None:
        return None


def config(url: str, **extra: object) -> RelayConfig:
    return build_config(
        {"database_url": url, "gateway_api_url": "http://unused/api", "relay_id": "sqlite-relay", **extra}
    )


async def test_concurrent_claimers_on_one_sqlite_file_never_share_a_row(sqlite_url: str) -> None:
    engines: list[AsyncEngine] = [create_engine(sqlite_url) for _ in range(3)]
    await insert(engines[0], plan(tasks=10, versions=10))  # 200 rows
    claimers = [OutboxLeases(e, f"claimer-{i}", lease_seconds=30) for i, e in enumerate(engines)]

    async def take_all(c: OutboxLeases) -> list[int]:
        got: list[int] = []
        while batch := await c.claim(7):
            got += [r.id for r in batch]
        return got

    results = await asyncio.gather(*(take_all(c) for c in claimers))
    flat = [i for ids in results for i in ids]
    assert len(flat) == len(set(flat)) == 200
    for e in engines:
        await e.dispose()


async def test_relay_cycle_on_sqlite_with_retry_and_dead(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    specs = [RowSpec("t", v, "task_user:t1/u1") for v in range(1, 4)]
    specs += [RowSpec("t", 1, "flaky:x"), RowSpec("t", 1, "poison:x")]
    await insert(engine, specs)
    publisher = RecordingPublisher(
        {
            "flaky:x": PublishResult(Outcome.RETRY, "api_100", "gateway error 100"),
            "poison:x": PublishResult(Outcome.DEAD, "api_102", "gateway error 102: unknown channel"),
        }
    )
    clock = [utc_now()]
    leases = OutboxLeases(engine, "sqlite-relay", lease_seconds=30, now=lambda: clock[0])
    relay = Relay(leases, publisher, config(sqlite_url, max_attempts=2), rand=lambda: 0.5)
    assert await relay.run_once() == 5
    assert await statuses(engine) == {"PUBLISHED": 3, "PENDING": 1, "DEAD": 1}
    assert await relay.run_once() == 0, "the retried row is not due before its backoff"
    clock[0] += timedelta(seconds=1)
    assert await relay.run_once() == 1
    assert await statuses(engine) == {"PUBLISHED": 3, "DEAD": 2}, "row-level transient error: max_attempts"
    async with engine.connect() as conn:
        errors = {r.channel: r.last_error for r in await conn.execute(sa.select(task_outbox))}
    assert errors["flaky:x"] == "gave up after 2 attempts: gateway error 100"
    await engine.dispose()


def test_cli_dead_list_requeue_and_purge(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg_file = tmp_path / "relay.json"
    cfg_file.write_text(
        json.dumps(
            {"database_url": sqlite_url, "gateway_api_url": "http://unused/api", "retention_seconds": 60}
        )
    )

    async def seed() -> None:
        engine = create_engine(sqlite_url)
        await insert(engine, [RowSpec("t", v, "task_user:t1/u1") for v in (1, 2, 3)])
        async with engine.begin() as conn:
            await conn.execute(
                sa.update(task_outbox)
                .where(task_outbox.c.aggregate_version < 3)
                .values(status="DEAD", last_error="gateway error 102: unknown channel", attempts=1)
            )
            await conn.execute(
                sa.update(task_outbox)
                .where(task_outbox.c.aggregate_version == 3)
                .values(status="PUBLISHED", published_at=utc_now() - timedelta(seconds=120))
            )
        await engine.dispose()

    # --json is one JSON document, also when nothing is dead (it used to print nothing at all)
    assert cli.main(["dead", "list", "--config", str(cfg_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    asyncio.run(seed())
    assert cli.main(["dead", "list", "--config", str(cfg_file), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["aggregateVersion"], d["lastError"]) for d in listed] == [
        (1, "gateway error 102: unknown channel"),
        (2, "gateway error 102: unknown channel"),
    ]
    assert cli.main(["dead", "requeue", "--config", str(cfg_file), "--id", str(listed[0]["id"])]) == 0
    assert "requeued 1 rows" in capsys.readouterr().out
    assert cli.main(["dead", "requeue", "--config", str(cfg_file), "--all"]) == 0
    assert "requeued 1 rows" in capsys.readouterr().out
    assert cli.main(["purge", "--config", str(cfg_file)]) == 0
    assert "purged 1 published rows" in capsys.readouterr().out

    async def final() -> dict[str, int]:
        engine = create_engine(sqlite_url)
        try:
            return dict(await statuses(engine))
        finally:
            await engine.dispose()

    assert asyncio.run(final()) == {"PENDING": 2}


def test_cli_refuses_a_bad_config_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "relay.json"
    f.write_text(
        json.dumps(
            {"database_url": "sqlite+aiosqlite:///x.db", "gateway_api_url": "http://g/api", "lease": 3}
        )
    )
    assert cli.main(["run", "--config", str(f)]) == 2
    assert "lease: unknown option" in capsys.readouterr().err


async def test_an_idle_relay_polls_once_per_bound_whatever_its_loop_count(sqlite_url: str) -> None:
    """Defect 8, through Relay.run: with concurrency 4 and nothing to do, the relay claims once per
    poll bound (``poll_interval_seconds / concurrency``), one loop at a time: its claims never
    coincide, every one of them is the relay-wide poll, each starts a bound or more after the
    previous one. Checked on the instants the claims start, not on how fast a loaded machine ran."""
    engine = create_engine(sqlite_url)
    cfg = config(sqlite_url, concurrency=4, poll_interval_seconds=0.2, stats_interval_seconds=60)
    stop = asyncio.Event()
    relay = Relay(OutboxLeases(engine, cfg.relay_id, lease_seconds=30), RecordingPublisher(), cfg)
    starts: list[float] = []
    claim_starts = relay.wakeups.claim_starts

    def recording() -> ClaimStart:
        scan = claim_starts()
        starts.append(relay.wakeups._claimed_at)
        if len(starts) >= 8:
            stop.set()
        return scan

    relay.wakeups.claim_starts = recording  # type: ignore[method-assign]
    try:
        async with asyncio.timeout(scaled(60)):
            await relay.run(stop)
    finally:
        await engine.dispose()
    bound = relay.wakeups.poll_bound_seconds
    assert bound == cfg.poll_interval_seconds / 4
    assert all(b - a >= bound for a, b in itertools.pairwise(starts)), starts
    assert relay.metrics.polls._value.get() == len(starts)  # no other claim while idle


async def test_a_backlog_drains_in_full_batches_with_every_loop_awake(sqlite_url: str) -> None:
    """Issue 14's benchmark regression suspect, as a behaviour: a full batch wakes the idle loops
    (``wake("backlog")``), and they must still drain a backlog in full batches — every claim but
    the tail ones takes ``batch_size`` rows, and no row is published twice."""
    engine = create_engine(sqlite_url)
    specs = plan(tasks=40, versions=5)  # 400 rows
    await insert(engine, specs)
    cfg = config(
        sqlite_url, concurrency=4, batch_size=25, poll_interval_seconds=30, stats_interval_seconds=60
    )
    stop = asyncio.Event()

    class Counting(RecordingPublisher):
        async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
            results = await super().publish(rows)
            if sum(len(c) for c in self.calls) >= len(specs):
                stop.set()
            return results

    publisher = Counting()
    relay = Relay(OutboxLeases(engine, cfg.relay_id, lease_seconds=30), publisher, cfg)
    relay.wake("test")  # the poll interval is long: only wake-ups move the loops
    try:
        async with asyncio.timeout(scaled(60)):
            await relay.run(stop)
        assert await statuses(engine) == {"PUBLISHED": len(specs)}
    finally:
        await engine.dispose()
    ids = [i for call in publisher.calls for i in call]
    assert len(ids) == len(set(ids)) == len(specs)
    assert [len(c) for c in publisher.calls] == [25] * (len(specs) // 25)
