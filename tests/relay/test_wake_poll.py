"""What a relay does on the quiet path while wake-up hints flow (issue 16, docs/relay.md "Wake-up"):
the safety-net poll slows to ``wake_poll_interval_seconds`` only while the hint listener is
subscribed and speeds up (with one claim at once) the moment it is not; a hint's claim skips the
expired-lease scan, which polls keep doing; the claim's statements are built once, not per claim.

No test waits on a clock: intervals are read from the relay, leases expire on an injected clock.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases, create_engine
from relay.config import build_config
from relay.metrics import RelayMetrics
from relay.publisher import HttpGatewayPublisher
from relay.relay import Relay
from relay.wake import RedisWakeListener
from status_api.storage.database import init_db, utc_now
from status_api.storage.outbox import OutboxRow
from tests.relay.harness import (
    crashed_relay_rows,
    insert,
    make_relay,
    plan,
    relay_config,
    statuses,
    wait_until,
)
from tests.relay.test_wake import NEVER, WITHIN, _channel, _running, _stopped
from tests.status_api.harness import FakeClock
from tests.support import GatewayProcess
from tests.support.waiting import scaled


def _offline_relay(**overrides: Any) -> Relay:
    """A relay whose database and gateway are never reached (only its scheduling is looked at)."""
    cfg = build_config(
        {
            "database_url": "sqlite+aiosqlite:///unused.db",
            "gateway_api_url": "http://127.0.0.1:9/api",
            "concurrency": 4,
            "poll_interval_seconds": 0.2,
            "wake_poll_interval_seconds": 2.0,
            **overrides,
        }
    )
    leases = OutboxLeases(create_engine(cfg.database_url), cfg.relay_id, lease_seconds=cfg.lease_seconds)
    return Relay(leases, HttpGatewayPublisher(cfg.gateway_api_url, "", 1.0), cfg, rand=lambda: 0.0)


def test_the_poll_slows_only_while_hints_flow_and_a_lost_listener_claims_at_once() -> None:
    relay = _offline_relay()
    assert relay.poll_interval_seconds == 0.2
    assert relay.wakeups.poll_bound_seconds == 0.05
    relay.hints_up(True)
    assert relay.poll_interval_seconds == 2.0
    # one relay-wide poll, 4 loops: a lost hint waits at most 2 s / 4 for some claim of the relay
    assert relay.wakeups.poll_bound_seconds == 0.5
    assert relay.metrics.wakeups.labels("listener-down")._value.get() == 0
    relay.hints_up(False)  # hints sent from now on are lost: look once, and poll fast again
    assert relay.poll_interval_seconds == 0.2
    assert relay.wakeups.pending
    assert relay.metrics.wakeups.labels("listener-down")._value.get() == 1
    relay.hints_up(False)  # no transition, no extra claim
    assert relay.metrics.wakeups.labels("listener-down")._value.get() == 1


def test_the_slow_poll_is_never_faster_than_the_configured_poll() -> None:
    relay = _offline_relay(poll_interval_seconds=5.0, wake_poll_interval_seconds=1.0)
    relay.hints_up(True)
    assert relay.poll_interval_seconds == 5.0


@pytest.mark.redis
async def test_the_listener_reports_its_subscription_to_the_relay(redis_url: str) -> None:
    relay = _offline_relay()
    states: list[bool] = []

    def on_state(up: bool) -> None:
        states.append(up)
        relay.hints_up(up)

    listener = RedisWakeListener(redis_url, _channel(), lambda: None, RelayMetrics(), on_state=on_state)
    stop = asyncio.Event()
    listening = asyncio.create_task(listener.run(stop))
    try:
        await wait_until(listener.subscribed.is_set, within=WITHIN, what="listener subscribed")
        assert states == [True] and relay.poll_interval_seconds == 2.0
    finally:
        stop.set()
        await asyncio.wait_for(listening, scaled(30))
    assert states == [True, False] and relay.poll_interval_seconds == 0.2


class _Recording(OutboxLeases):
    """Real leases that record each claim's ``takeover`` flag."""

    flags: list[bool]

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[OutboxRow]:
        rows = await super().claim(limit, takeover=takeover, backlog=backlog)
        self.flags.append(takeover)
        return rows


@pytest.mark.mysql
async def test_a_hint_claim_leaves_expired_leases_to_the_poll(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    clock = FakeClock(utc_now())
    held = await crashed_relay_rows(engine, clock)
    clock.advance(5.0)  # the leases expired
    # the leases' length is what expires on the fake clock
    cfg = relay_config(
        relay_db_url, gateway, poll_interval_seconds=NEVER, lease_seconds=2.0, publish_timeout_seconds=1.0
    )
    relay = make_relay(engine, cfg, now=clock)
    recording = _Recording(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds, now=clock)
    recording.flags = []
    relay.leases = recording
    fresh = plan(tasks=1, versions=1)
    await insert(engine, fresh, now=clock.now)
    stop, task = await _running(relay)
    try:
        relay.wake()
        await wait_until(
            lambda: _count(engine, "PUBLISHED", len(fresh)), within=WITHIN, what="the hinted rows"
        )
    finally:
        await _stopped(stop, task, relay)
    assert recording.flags[0] is False, recording.flags  # the hint's claim: no lease scan
    assert (await statuses(engine))["PROCESSING"] == len(held)  # still the crashed relay's
    # the next poll-shaped claim (run_once is what a poll runs) takes them over
    relay.publisher = HttpGatewayPublisher(cfg.gateway_api_url, cfg.gateway_api_key, 1.0)
    try:
        report = await relay.run_batch()
    finally:
        await relay.publisher.aclose()
    assert report.claimed == len(held) and report.published == len(held)


async def _count(engine: AsyncEngine, status: str, n: int) -> bool:
    return (await statuses(engine)).get(status, 0) >= n


async def _claim_statements(engine: AsyncEngine) -> list[list[int]]:
    """The ids of the statement objects SQLAlchemy executed during each of two claims of 2 rows."""
    seen: list[list[int]] = []

    def record(conn: Any, clauseelement: Any, *args: Any) -> None:
        seen[-1].append(id(clauseelement))

    leases = OutboxLeases(engine, f"relay-{uuid.uuid4().hex[:6]}", lease_seconds=30.0)
    await insert(engine, plan(tasks=2, versions=1))
    sa.event.listen(engine.sync_engine, "before_execute", record)
    try:
        for _ in range(2):
            seen.append([])
            assert len(await leases.claim(2)) == 2
    finally:
        sa.event.remove(engine.sync_engine, "before_execute", record)
    await leases.dispose()
    return seen


async def test_claim_statements_are_built_once(tmp_path: Any) -> None:
    """Two claims execute the very same statement objects (their cache keys are memoized), where
    statements built per claim cost SQLAlchemy a cache-key walk on every poll (SQLite: the path
    that runs the claim through SQLAlchemy)."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'claims.db'}")
    try:
        await init_db(engine)
        first, second = await _claim_statements(engine)
    finally:
        await engine.dispose()
    assert len(first) >= 3 and first == second, (first, second)


@pytest.mark.mysql
async def test_the_mysql_claim_bypasses_sqlalchemys_execute_path(engine: AsyncEngine) -> None:
    """On MariaDB the claim runs on the driver connection (SQL compiled once at import): no
    statement goes through SQLAlchemy's execute path at all."""
    assert await _claim_statements(engine) == [[], []]
