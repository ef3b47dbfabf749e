"""Deferred marks (``mark_defer_ms``) on real MariaDB and a real gateway.

The mark of a fully published batch rides with the relay's next claim (its second request) instead
of being its own round trip; a timer marks it alone when no claim comes within the bound, and a
graceful stop marks it. What must hold: a cycle is two database requests (the mark costs none of
its own); only rows the gateway acknowledged are ever marked; rows another replica took over are
left alone and counted as lost leases; a claim that fails keeps the marks for the next one; the
timer and the stop mark what no claim carried. (A kill -9 between the publish and the deferred
mark republishes the batch: ``test_crash_points.py``, ``after_deferred_mark``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases, create_engine, utc_now
from relay.publisher import HttpGatewayPublisher, Outcome, PublishResult
from relay.relay import Relay
from status_api.storage.outbox import OutboxRow
from status_api.storage.tables import task_outbox
from tests.relay.harness import insert, plan, relay_config, statuses, wait_until
from tests.relay.test_claim_round_trips import _Requests, add
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.mysql

Counted = tuple[OutboxLeases, _Requests, _Requests]


@pytest.fixture
async def counted(relay_db_url: str) -> AsyncIterator[Counted]:
    """Leases as the relay opens them (held connections, an autocommit settle engine), with the
    requests of each engine recorded by the driver's own query callback."""
    claims = create_engine(relay_db_url, pool_size=2, max_overflow=0)
    settle = create_engine(relay_db_url, pool_size=2, max_overflow=0, autocommit=True)
    recorded = _Requests(claims), _Requests(settle)
    async with claims.begin() as conn:
        await conn.execute(task_outbox.delete())
    leases = OutboxLeases(claims, "r-defer", lease_seconds=30, settle_engine=settle, hold_connections=True)
    yield leases, *recorded
    await leases.dispose()


async def by_status(eng: AsyncEngine) -> dict[str, str]:
    async with eng.connect() as conn:
        rows = await conn.execute(sa.select(task_outbox.c.aggregate_id, task_outbox.c.status))
        return {str(r[0]): str(r[1]) for r in rows}


async def test_the_next_claim_carries_the_mark_in_its_second_request(counted: Counted) -> None:
    """A cycle with a deferred mark is two database requests: the claim's reads, then the mark,
    the lease, the next-due read and COMMIT; the settle engine sends nothing."""
    leases, claim_reqs, settle_reqs = counted
    for i in range(3):
        await add(leases.engine, f"dm-a{i}", 0)
    rows = await leases.claim(10, takeover=False)
    acked = utc_now().replace(microsecond=0)
    leases.defer_published([r.id for r in rows], acked)
    assert leases.unmarked == 3
    assert set((await by_status(leases.engine)).values()) == {"PROCESSING"}  # nothing marked yet

    for i in range(2):
        await add(leases.engine, f"dm-b{i}", 0)
    claim_reqs.take(), settle_reqs.take()
    more = await leases.claim(10, takeover=False)
    sent = claim_reqs.take()
    assert len(sent) == 2, sent
    assert sent[1].startswith("UPDATE") and "'PUBLISHED'" in sent[1].split(";")[0], sent[1]
    assert sent[1].count("UPDATE") == 2 and sent[1].endswith("COMMIT"), sent[1]
    assert settle_reqs.take() == []
    assert leases.unmarked == 0
    assert {r.aggregate_id for r in more} == {"dm-b0", "dm-b1"}
    state = await by_status(leases.engine)
    assert state == {
        "dm-a0": "PUBLISHED",
        "dm-a1": "PUBLISHED",
        "dm-a2": "PUBLISHED",
        "dm-b0": "PROCESSING",
        "dm-b1": "PROCESSING",
    }
    async with leases.engine.connect() as conn:
        stamps = set(
            (
                await conn.execute(
                    sa.select(task_outbox.c.published_at).where(task_outbox.c.status == "PUBLISHED")
                )
            )
            .scalars()
            .all()
        )
    assert stamps == {acked}  # the acknowledgement time, not the carrying claim's

    # An empty claim carries a mark the same way: still two requests.
    leases.defer_published([r.id for r in more], utc_now())
    claim_reqs.take()
    assert await leases.claim(10, takeover=False) == []
    assert len(claim_reqs.take()) == 2
    assert set((await by_status(leases.engine)).values()) == {"PUBLISHED"}


async def test_rows_taken_over_meanwhile_are_left_alone_and_counted_lost(counted: Counted) -> None:
    leases, _, _ = counted
    for i in range(3):
        await add(leases.engine, f"dm-lost{i}", 0)
    rows = await leases.claim(10, takeover=False)
    lost: list[int] = []
    leases.on_lost_marks = lost.append
    leases.defer_published([r.id for r in rows], utc_now())
    async with leases.engine.begin() as conn:  # another replica took one over (its lease expired)
        await conn.execute(
            task_outbox.update().where(task_outbox.c.id == rows[0].id).values(locked_by="other-relay")
        )
    await leases.claim(10, takeover=False)
    assert lost == [1]
    async with leases.engine.connect() as conn:
        states = dict((await conn.execute(sa.select(task_outbox.c.id, task_outbox.c.status))).all())
    assert states == {rows[0].id: "PROCESSING", rows[1].id: "PUBLISHED", rows[2].id: "PUBLISHED"}


async def test_a_failed_claim_keeps_the_marks_for_the_next(counted: Counted) -> None:
    """The claim's transaction rolls back with the mark in it: the marks stay deferred and the
    next claim (on a fresh connection) carries them."""
    leases, _, _ = counted
    for i in range(2):
        await add(leases.engine, f"dm-fail{i}", 0)
    rows = await leases.claim(10, takeover=False)
    leases.defer_published([r.id for r in rows], utc_now())
    held = leases._held[leases.engine][0]  # the claims' held connection
    async with leases.engine.connect() as conn:
        await conn.exec_driver_sql(f"KILL {int(held.driver.thread_id())}")
    with pytest.raises(sa.exc.DBAPIError):
        await leases.claim(10, takeover=False)
    assert leases.unmarked == 2
    assert set((await by_status(leases.engine)).values()) == {"PROCESSING"}
    await leases.claim(10, takeover=False)
    assert leases.unmarked == 0
    assert set((await by_status(leases.engine)).values()) == {"PUBLISHED"}


class _Recording:
    """The real gateway publisher, recording the rows it was asked to publish; ``fail_ids`` answer
    a row-specific retry (the gateway did not acknowledge them)."""

    def __init__(self, inner: HttpGatewayPublisher, fail_ids: frozenset[str] = frozenset()) -> None:
        self.inner = inner
        self.fail_ids = fail_ids
        self.sent: list[int] = []

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        results = await self.inner.publish(rows)
        self.sent += [r.id for r in rows]
        failed = PublishResult(Outcome.RETRY, "api_100", "temporary")
        return [
            failed if r.aggregate_id in self.fail_ids else res for r, res in zip(rows, results, strict=True)
        ]

    async def aclose(self) -> None:
        await self.inner.aclose()


def _relay(
    engine: AsyncEngine, gateway: GatewayProcess, fail: frozenset[str] = frozenset(), **cfg: object
) -> Relay:
    config = relay_config(
        engine.url.render_as_string(False),
        gateway,
        lease_seconds=scaled(30.0),  # at least 2 x the harness's (scaled) publish timeout
        poll_interval_seconds=30.0,  # no poll comes to carry a mark: only the timer or the stop
        **cfg,
    )
    leases = OutboxLeases.open(
        config.database_url,
        config.relay_id,
        lease_seconds=config.lease_seconds,
        pool_size=2,
        lock_wait_timeout_seconds=5,
    )
    publisher = HttpGatewayPublisher(
        config.gateway_api_url, config.gateway_api_key, config.publish_timeout_seconds
    )
    return Relay(leases, _Recording(publisher, fail), config)


async def _run_until_sent(relay: Relay, n: int) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    relay.wake()
    publisher = relay.publisher
    assert isinstance(publisher, _Recording)
    await wait_until(lambda: len(publisher.sent) >= n, within=10, what="rows sent")
    return stop, task


async def _stop(relay: Relay, stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    await asyncio.wait_for(task, scaled(10))
    await relay.publisher.aclose()
    await relay.leases.dispose()


async def _statuses_are(engine: AsyncEngine, expected: dict[str, int]) -> bool:
    return dict(await statuses(engine)) == expected


async def test_the_timer_marks_what_no_claim_carried(engine: AsyncEngine, gateway: GatewayProcess) -> None:
    specs = plan(tasks=2, versions=2)
    await insert(engine, specs)
    relay = _relay(engine, gateway, mark_defer_ms=50)
    stop, task = await _run_until_sent(relay, len(specs))
    try:
        await wait_until(
            lambda: _statuses_are(engine, {"PUBLISHED": len(specs)}), within=10, what="timer mark"
        )
        assert relay.leases.unmarked == 0
    finally:
        await _stop(relay, stop, task)


async def test_a_graceful_stop_marks_the_deferred_rows_and_only_acknowledged_ones(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    """With a long bound and no poll, the published batch waits for its mark (PROCESSING) until the
    stop marks it. A batch with a row the gateway did not acknowledge is settled at once instead
    (retry → PENDING), and nothing of it is deferred."""
    specs = plan(tasks=2, versions=2)
    await insert(engine, specs)
    relay = _relay(engine, gateway, mark_defer_ms=5000)
    stop, task = await _run_until_sent(relay, len(specs))
    try:
        assert relay.leases.unmarked == len(specs)
        assert await statuses(engine) == {"PROCESSING": len(specs)}
    finally:
        await _stop(relay, stop, task)
    assert await statuses(engine) == {"PUBLISHED": len(specs)}

    async with engine.begin() as conn:
        await conn.execute(task_outbox.delete())
    failing = plan(tasks=2, versions=1)
    await insert(engine, failing)
    relay = _relay(engine, gateway, frozenset({failing[0].task}), mark_defer_ms=5000)
    stop, task = await _run_until_sent(relay, len(failing))
    try:
        await wait_until(
            lambda: _statuses_are(engine, {"PUBLISHED": 2, "PENDING": 2}), within=10, what="settled"
        )
        assert relay.leases.unmarked == 0
    finally:
        await _stop(relay, stop, task)


async def test_a_row_handed_back_meanwhile_is_not_marked(counted: Counted) -> None:
    """The deferred mark is guarded by the lease: a row handed back meanwhile (PENDING) is not
    marked by it."""
    leases, _, _ = counted
    await add(leases.engine, "dm-back", 0)
    rows = await leases.claim(10, takeover=False)
    leases.defer_published([r.id for r in rows], utc_now())
    await leases.release([r.id for r in rows])
    lost: list[int] = []
    leases.on_lost_marks = lost.append
    later = utc_now() + timedelta(seconds=60)
    async with leases.engine.begin() as conn:
        await conn.execute(task_outbox.update().values(available_at=later))
    await leases.claim(10, takeover=False)
    assert lost == [1]
    assert await by_status(leases.engine) == {"dm-back": "PENDING"}
