"""The relay-wide safety-net poll (relay/wakeups.py, docs/relay.md "Wake-up"): a relay claims for
the poll only when none of its claims started for the poll bound (``poll interval / concurrency``),
so a relay whose hints keep it claiming never polls on top of them; its hint claims scan for
expired leases once per bound instead; a hint that is dropped is still published by the poll.

Real MariaDB, a real gateway process; the first test drives an in-process relay (its claims are
recorded), the second a ``taskcast relay run`` process woken through Redis. No test waits on a
clock: the claims' start instants are compared with the bound the relay itself reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases, create_engine
from relay.relay import Relay
from status_api.storage.database import utc_now
from status_api.storage.outbox import OutboxRow
from status_api.storage.tables import task_outbox
from tests.relay.harness import (
    RelayProcess,
    crashed_relay_rows,
    insert,
    make_relay,
    plan,
    relay_config,
    statuses,
    wait_until,
)
from tests.relay.test_crash_points import process_config
from tests.status_api.harness import FakeClock
from tests.support import GatewayProcess, free_port, scaled

pytestmark = pytest.mark.mysql

WITHIN = 30.0  # bound on "eventually" on this loaded machine (scaled)


class _Recording(OutboxLeases):
    """Real leases that record each claim: (monotonic start, rows leased, rows taken over, scan);
    ``leased`` is set by every claim that leased rows."""

    claims: list[tuple[float, int, int, bool]]
    leased: asyncio.Event

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[OutboxRow]:
        started = time.monotonic()
        rows = await super().claim(limit, takeover=takeover, backlog=backlog)
        self.claims.append((started, len(rows), sum(r.taken_over for r in rows), takeover))
        if rows:
            self.leased.set()
        return rows


async def _published(engine: AsyncEngine, n: int) -> bool:
    return (await statuses(engine)).get("PUBLISHED", 0) == n


@contextlib.asynccontextmanager
async def _running_with_looks(
    relay: Relay, engine: AsyncEngine, relay_db_url: str, **leases: Any
) -> AsyncIterator[None]:
    """``relay`` running on leases that look before they claim (a settle engine of its own, as
    ``OutboxLeases.open`` gives it); stopped and its connections returned afterwards."""
    cfg = relay.config
    settle = create_engine(relay_db_url, pool_size=2, autocommit=True)
    relay.leases = OutboxLeases(
        engine, cfg.relay_id, lease_seconds=cfg.lease_seconds, settle_engine=settle, **leases
    )
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, scaled(30))
        await relay.publisher.aclose()
        await relay.leases.return_connections()
        await settle.dispose()


async def test_a_relay_claiming_for_hints_does_not_poll_and_its_hint_claims_take_over_expired_leases(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    clock = FakeClock(utc_now())
    held = await crashed_relay_rows(engine, clock)
    # 4 loops, a 0.4 s interval: the relay-wide bound is 0.1 s; staggered loops polled 10 times a second
    cfg = relay_config(relay_db_url, gateway, concurrency=4, poll_interval_seconds=0.4)
    clock.advance(cfg.lease_seconds + 5.0)  # the leases expired (the clock stands still from now on)
    relay: Relay = make_relay(engine, cfg, now=clock)
    recording = _Recording(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds, now=clock)
    recording.claims = []
    recording.leased = asyncio.Event()
    relay.leases = recording
    bound = relay.wakeups.poll_bound_seconds
    assert bound == pytest.approx(0.1)
    decided: list[float] = []  # when the relay decided that a claim scans (its own clock)
    claim_starts = relay.wakeups.claim_starts

    def recorded() -> Any:
        start = claim_starts()
        if start.scan:
            decided.append(relay.wakeups.clock())
        return start

    relay.wakeups.claim_starts = recorded  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    fresh = events = 0
    try:
        for _ in range(150):  # the next event once this one's claim leased it: far inside the bound
            events += 1
            recording.leased.clear()
            specs = plan(tasks=1, versions=1)
            await insert(engine, specs, now=clock.now)
            fresh += len(specs)
            relay.wake()
            await asyncio.wait_for(recording.leased.wait(), scaled(WITHIN))
        await wait_until(
            lambda: _published(engine, fresh + len(held)), within=WITHIN, what="every row published"
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, scaled(30))
        await relay.publisher.aclose()
    claims = sorted(recording.claims)  # appended as they end; several loops claim at once
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(claims)]
    # A poll needs a gap of the bound without any claim start before it (the first claim may be one).
    quiet = 1 + sum(g >= bound for g in gaps)
    polls = relay.metrics.polls._value.get()
    assert polls <= quiet, (polls, quiet, gaps)
    # one claim per hint at most; any other claim is a poll, and a poll needs such a gap
    assert len(claims) - events <= quiet, (len(claims), events, quiet, claims)
    # the crashed relay's rows were taken over by a claim that scanned, at most once per bound
    # (decided when the claim starts; a claim that looks first reaches the database later)
    assert sum(c[2] for c in claims) == len(held)
    assert len(decided) >= sum(c[3] for c in claims)  # a poll that looked and found nothing: no claim
    assert all(b - a >= bound - 0.001 for a, b in itertools.pairwise(decided)), decided  # read just after


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("taskcast_relay_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def _metrics(doc: dict[str, Any]) -> dict[str, float]:
    async with httpx.AsyncClient() as c:
        return _samples((await c.get(f"http://127.0.0.1:{doc['metrics_port']}/metrics")).text)


@pytest.mark.redis
async def test_a_dropped_hint_is_published_by_the_relay_wide_poll(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A relay process subscribed to the hints (0.4 s interval, 2 loops: bound 0.2 s) gets rows
    whose hint never comes: its poll publishes them. Idle, it makes no claim transaction but the
    polls' (and the one after subscribing), and once every row is marked, none at all: each poll
    only looks (one statement, no transaction)."""
    doc = process_config(
        relay_db_url,
        gateway,
        concurrency=2,
        poll_interval_seconds=0.1,
        wake_poll_interval_seconds=0.4,
        wake_redis_url=redis_url,
        wake_channel=f"taskcast:test:wake:{uuid.uuid4().hex[:8]}",
        metrics_port=free_port(),
        stats_interval_seconds=60,
    )
    relay = RelayProcess(doc, tmp_path).start()
    try:

        async def subscribed() -> bool:
            return (await _metrics(doc)).get("taskcast_relay_wake_listener_up") == 1.0

        await wait_until(subscribed, within=WITHIN, what="relay subscribed")
        specs = plan(tasks=2, versions=1)
        await insert(engine, specs)  # committed; its hint is lost
        await wait_until(lambda: _published(engine, len(specs)), within=WITHIN, what="rows published")

        async def polled_twice_more() -> dict[str, float]:
            m = await _metrics(doc)
            return m if m.get("taskcast_relay_polls_total", 0) >= polls + 2 else {}

        polls = (await _metrics(doc)).get("taskcast_relay_polls_total", 0)
        m = await wait_until(polled_twice_more, within=WITHIN, what="two more polls")
        assert await _published(engine, len(specs))  # marked (the deferred mark rode on a claim)
        polls = m["taskcast_relay_polls_total"]
        idle = await wait_until(polled_twice_more, within=WITHIN, what="two more polls, idle")
    finally:
        relay.terminate()
    assert m["taskcast_relay_claims_total"] >= 1 and m["taskcast_relay_published_rows_total"] == len(specs)
    transactions = m["taskcast_relay_claims_total"] + m["taskcast_relay_empty_claims_total"]
    # the polls, the look after subscribing, and the wait for this scrape (at most one more poll)
    assert transactions <= m["taskcast_relay_polls_total"] + 2, m
    for name in ("taskcast_relay_claims_total", "taskcast_relay_empty_claims_total"):
        assert idle[name] == m[name], (name, m, idle)  # the idle polls only looked


async def test_a_poll_that_looks_still_takes_expired_leases_over(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    """Nothing due, no hint: the poll's look sees the crashed relay's expired leases and claims."""
    clock = FakeClock(utc_now())
    held = await crashed_relay_rows(engine, clock)
    cfg = relay_config(relay_db_url, gateway, concurrency=2, poll_interval_seconds=0.2)
    relay: Relay = make_relay(engine, cfg, now=clock)
    async with _running_with_looks(relay, engine, relay_db_url, now=clock):
        polls = relay.metrics.polls

        await wait_until(lambda: polls._value.get() >= 2, within=WITHIN, what="two polls")
        assert (await statuses(engine))["PROCESSING"] == len(held)  # leases alive: only looked
        assert relay.metrics.claims._value.get() == relay.metrics.empty_claims._value.get() == 0
        clock.advance(cfg.lease_seconds + 5.0)  # the leases expire
        await wait_until(lambda: _published(engine, len(held)), within=WITHIN, what="taken over")
    assert relay.metrics.takeovers._value.get() == len(held)


async def test_a_due_time_whose_row_is_gone_costs_a_look_not_a_claim(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    """A hinted claim learns a held-back row's due time; the row is gone before it (a newer
    version replaced it, or another claim took it): the due wake-up looks (one statement, no
    transaction) and makes no claim transaction."""
    cfg = relay_config(relay_db_url, gateway, poll_interval_seconds=60.0)  # no poll meanwhile
    relay: Relay = make_relay(engine, cfg, rand=lambda: 0.99)
    m = relay.metrics
    async with _running_with_looks(relay, engine, relay_db_url):
        specs = plan(tasks=1, versions=1)
        await insert(engine, specs, now=utc_now() + timedelta(seconds=scaled(0.5)))  # held back
        relay.wake()  # its commit's hint: the claim finds nothing due and learns the due time
        await wait_until(lambda: m.empty_claims._value.get() == 1, within=WITHIN, what="hinted claim")
        async with engine.begin() as conn:  # superseded before it became due
            await conn.execute(sa.delete(task_outbox))

        def settled() -> bool:
            due = m.wakeups.labels("due")._value.get()
            return due >= 1 and m.looks.labels("nothing")._value.get() + m.empty_claims._value.get() >= 2

        await wait_until(settled, within=WITHIN, what="the due wake-up handled")
    assert m.empty_claims._value.get() == 1 and m.claims._value.get() == 0
    assert m.looks.labels("nothing")._value.get() == 1
