"""The outbox gauges' query (``outbox_admin.stats``: each relay's gauges, ``GET /admin/v1/outbox/stats``)
costs what the rows that need attention cost, never the retention window of PUBLISHED rows.

The cost is counted by the server: the session's ``Handler_read%`` counters (index and row reads
of the storage engine) around one call, with 1,000 and then 50,000 PUBLISHED rows in the table.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.claim import OutboxLeases
from relay.config import build_config
from relay.publisher import HttpGatewayPublisher
from relay.relay import Relay
from status_api.storage import outbox_admin
from status_api.storage.outbox import DEAD, PENDING, PROCESSING, PUBLISHED
from status_api.storage.tables import task_outbox

pytestmark = pytest.mark.mysql

NOW = datetime(2026, 6, 1, 12, 0, 0)
#: Rows needing attention, the same in both measurements.
FEW = {PENDING: 3, PROCESSING: 2, DEAD: 1}


def _rows(status: str, first: int, n: int, created: datetime, priority: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "aggregate_id": f"stats-{first + i}",
            "aggregate_version": 1,
            "channel": "task_user:stats",
            "projection": "USER_SUMMARY",
            "payload": {"v": 1},
            "status": status,
            "priority": priority,
            "available_at": created,
            "created_at": created,
            "locked_by": None if status == PENDING else "relay-stats",
            "locked_at": None if status == PENDING else created,
            "published_at": created if status == PUBLISHED else None,
        }
        for i in range(n)
    ]


async def _add(engine: AsyncEngine, rows: list[dict[str, Any]]) -> None:
    async with engine.begin() as conn:
        for k in range(0, len(rows), 5000):
            await conn.execute(sa.insert(task_outbox), rows[k : k + 5000])


async def _handler_reads(conn: AsyncConnection) -> int:
    rows = await conn.execute(sa.text("SHOW SESSION STATUS LIKE :name"), {"name": "Handler_read%"})
    return sum(int(value) for _, value in rows)


async def _measured(engine: AsyncEngine) -> tuple[int, dict[str, Any]]:
    """Handler reads of one ``stats`` call on its own session, and its answer."""
    async with engine.connect() as conn:
        await outbox_admin.stats(conn, NOW)  # the session's first call may open the table
        before = await _handler_reads(conn)
        got = await outbox_admin.stats(conn, NOW)
        after = await _handler_reads(conn)
        baseline = await _handler_reads(conn)  # what the SHOW itself reads
    return after - before - (baseline - after), got


async def test_the_stats_query_reads_the_same_rows_at_1k_and_50k_published(engine: AsyncEngine) -> None:
    # the oldest PENDING row is not the first written: the first of its priority (a notice)
    await _add(engine, _rows(PENDING, 0, 1, NOW) + _rows(PENDING, 1, 1, NOW, priority=5))
    await _add(engine, _rows(PENDING, 2, FEW[PENDING] - 2, NOW - timedelta(seconds=42), priority=10))
    await _add(engine, _rows(PROCESSING, 10, FEW[PROCESSING], NOW) + _rows(DEAD, 20, FEW[DEAD], NOW))
    await _add(engine, _rows(PUBLISHED, 1000, 1000, NOW - timedelta(minutes=5)))
    small_reads, small = await _measured(engine)

    await _add(engine, _rows(PUBLISHED, 2000, 49_000, NOW - timedelta(minutes=5)))
    large_reads, large = await _measured(engine)

    assert small_reads < 100, small_reads  # the six rows needing attention, a few index dives
    assert large_reads <= small_reads + 10, (small_reads, large_reads)
    for got in (small, large):
        assert {s: got["counts"][s] for s in FEW} == FEW
        assert got["oldestPendingAgeSeconds"] == 42.0
    async with engine.begin() as conn:
        await conn.exec_driver_sql("ANALYZE TABLE task_outbox")  # the estimate from fresh statistics
    _, analysed = await _measured(engine)
    assert 40_000 <= analysed["counts"][PUBLISHED] <= 60_000, analysed

    # a backlog: counted entry by entry (it is what the count is), the oldest row still found by
    # index dives (a minimum of created_at over 20,000 PENDING rows would read them all again,
    # or the whole table)
    await _add(engine, _rows(PENDING, 100_000, 20_000, NOW))
    backlog_reads, backlog = await _measured(engine)
    assert backlog_reads <= small_reads + 20_000 + 10, (small_reads, backlog_reads)
    assert backlog["counts"][PENDING] == FEW[PENDING] + 20_000
    assert backlog["oldestPendingAgeSeconds"] == 42.0
    async with engine.connect() as conn:  # what the Status API's /metrics exports per priority
        by_priority = await outbox_admin.oldest_pending_by_priority(conn)
    assert by_priority == {0: NOW, 5: NOW, 10: NOW - timedelta(seconds=42)}


async def test_the_relay_gauges_show_exact_counts_and_the_published_estimate(engine: AsyncEngine) -> None:
    await _add(engine, _rows(PENDING, 0, 2, NOW) + _rows(DEAD, 5, 1, NOW))
    await _add(engine, _rows(PUBLISHED, 100, 500, NOW))
    cfg = build_config(
        {
            "database_url": engine.url.render_as_string(False),
            "gateway_api_url": "http://127.0.0.1:9/api",  # never called: no claim runs here
            "gateway_api_key": "unused",
            "relay_id": "relay-stats",
        }
    )
    relay = Relay(
        OutboxLeases(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds, now=lambda: NOW),
        HttpGatewayPublisher(cfg.gateway_api_url, cfg.gateway_api_key, cfg.publish_timeout_seconds),
        cfg,
    )
    try:
        await relay.refresh_gauges()
    finally:
        await relay.publisher.aclose()

    def gauge(status: str) -> float | None:
        return relay.metrics.registry.get_sample_value("taskcast_relay_outbox_rows", {"status": status})

    assert (gauge("pending"), gauge("processing"), gauge("dead")) == (2, 0, 1)
    published = gauge("published")
    assert published is not None and published >= 0  # an estimate (fresh statistics: see above)
