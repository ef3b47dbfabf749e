"""End to end: Status API use cases commit state + outbox in one transaction → relay.run_once() →
real gateway → a subscriber on the user and detail channels (seed §3, §5, §14.1)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.publisher import committed_at_ms
from status_api.storage.database import create_engine as status_engine
from status_api.storage.tables import task_outbox
from tests.relay.harness import Subscriber, drain, make_relay, relay_config, wait_until
from tests.status_api.harness import FakeClock, Harness, build
from tests.support import GatewayProcess

pytestmark = pytest.mark.mysql


@pytest.fixture
async def status(engine: AsyncEngine, relay_db_url: str) -> AsyncIterator[Harness]:
    eng = status_engine(relay_db_url, pool_size=5)
    clock = FakeClock()  # starts at the real time: commit timestamps are realistic
    harness = Harness(build(eng, clock), clock)
    await harness.service.load_registry_files()
    yield harness
    await harness.http.aclose()
    await eng.dispose()


async def test_task_lifecycle_reaches_the_client_through_the_relay(
    status: Harness, engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    t = await status.create_task()
    await status.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    await status.report(
        t,
        "01_prepare",
        "STEP_COMPLETED",
        "PREPARED",
        durationMs=3100,
        data={"schema": "file.prepare.completed.v1", "value": {"fileName": "c.pdf", "sizeBytes": 10}},
    )
    await status.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await status.task_event(t, "TASK_COMPLETED", "COMPLETED", durationMs=42600)
    rows = await status.outbox_publications(t.id)  # one row per version, two publications each
    final_version = max(r["aggregate_version"] for r in rows)
    channels = sorted({r["channel"] for r in rows})
    assert channels == ["task_detail:t1/" + t.id, "task_user:t1/u1"]
    relay = make_relay(engine, relay_config(relay_db_url, gateway, batch_size=100))
    async with Subscriber(gateway, channels) as sub:
        assert await drain(relay) == len(rows) // 2 == final_version  # rows published
        await wait_until(lambda: all(sub.gate.get((c, t.id)) == final_version for c in channels))
        visible_ms = time.time() * 1000
    assert sub.duplicates == 0
    created = {(r["channel"], r["aggregate_version"]): r["created_at"] for r in rows}
    for channel, _task, version, tags in sub.received:
        committed = int(tags["committed_at_ms"])
        assert committed == committed_at_ms(created[(channel, version)])
        assert 0 <= visible_ms - committed < 60_000  # state_commit_to_visible_seconds, client side
    async with engine.connect() as conn:
        left = await conn.scalar(
            sa.select(sa.func.count()).where(
                task_outbox.c.status != "PUBLISHED", task_outbox.c.aggregate_id == t.id
            )
        )
    assert left == 0
    await relay.publisher.aclose()
