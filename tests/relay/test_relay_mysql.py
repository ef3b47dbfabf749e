"""Relay against real MariaDB and a real gateway process, driven in-process through run_once()/run().

Covers: the happy path with commit time in tags, priority over a progress backlog, collapse of
superseded progress, lease takeover (injected clock), guarded marks, the out-of-order commit,
two and four concurrent relays, a poison row, a gateway outage, graceful shutdown, retention and
the dead-letter queue.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Sequence
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases, utc_now
from relay.metrics import serve
from relay.publisher import PUBLISHED, PublishResult, committed_at_ms
from relay.relay import Relay
from status_api.storage import outbox, write
from status_api.storage.outbox import OutboxMessage, OutboxRow
from status_api.storage.tables import task_outbox
from tests.relay.harness import (
    RowSpec,
    Subscriber,
    detail_channel,
    drain,
    insert,
    make_relay,
    plan,
    relay_config,
    statuses,
    user_channel,
    wait_until,
)
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.mysql


FAILURES = "taskcast_relay_publish_failures_total"


def sample(relay: Relay, name: str, **labels: str) -> float:
    value = relay.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _put_back(relay: Relay) -> int:
    """Rows ``relay`` made claimable again: publish failures retried or requeued, released rows."""
    failed = sum(
        s.value
        for metric in relay.metrics.registry.collect()
        for s in metric.samples
        if s.name == f"{FAILURES}" and s.labels.get("outcome") in ("retry", "requeue")
    )
    return int(failed + sample(relay, "taskcast_relay_released_rows_total"))


def channels_of(specs: Sequence[RowSpec]) -> list[str]:
    return sorted({s.channel for s in specs})


async def test_publishes_every_row_with_commit_time_tag(engine: AsyncEngine, gateway: GatewayProcess) -> None:
    specs = plan(tasks=4, versions=5)
    await insert(engine, specs)
    relay = make_relay(engine, relay_config(str(engine.url.render_as_string(False)), gateway))
    async with Subscriber(gateway, channels_of(specs)) as sub:
        assert await drain(relay) == len(specs)
        await wait_until(lambda: sub.has_all(specs), what="all publications")
        sub.assert_exactly_once(specs)
        sub.assert_gate_monotonic(specs)
    assert await statuses(engine) == {"PUBLISHED": len(specs)}
    async with engine.connect() as conn:
        created = {
            (r.channel, r.aggregate_id, int(r.aggregate_version)): r.created_at
            for r in await conn.execute(sa.select(task_outbox))
        }
    for channel, task, version, tags in sub.received:
        assert tags["committed_at_ms"] == str(committed_at_ms(created[(channel, task, version)]))
    assert sample(relay, "taskcast_relay_state_commit_to_publish_seconds_sum") > 0
    await relay.publisher.aclose()


async def test_terminal_notice_and_new_task_rows_jump_a_progress_backlog(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    backlog = [RowSpec("busy-task", v, user_channel(0)) for v in range(2, 302)]
    await insert(engine, backlog)
    urgent = [
        RowSpec("done-task", 7, user_channel(1), priority=10),  # terminal / notice (PRIORITY_NOTICE)
    ]
    await insert(engine, urgent)
    async with engine.begin() as conn:  # a new task: version 1, priority floor applied by append
        await write.append_outbox_version(
            conn, "new-task", 1, [OutboxMessage(user_channel(2), "USER_SUMMARY", {"v": 1}, 0)], utc_now()
        )
    relay = make_relay(engine, relay_config(engine.url.render_as_string(False), gateway, batch_size=10))
    leases = relay.leases
    first = await leases.claim(2)
    assert [(r.aggregate_id, r.priority) for r in first] == [
        ("done-task", 10),
        ("new-task", outbox.PRIORITY_NEW_AGGREGATE),
    ]
    assert await leases.settle([r.id for r in first], [], []) == (2, 0, 0)
    await relay.publisher.aclose()


async def test_collapse_publishes_only_the_newest_progress_but_keeps_notices(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    progress = [RowSpec("t-collapse", v, user_channel(3)) for v in range(2, 12)]
    notice = [RowSpec("t-collapse", 12, user_channel(3), priority=10)]
    await insert(engine, progress + notice + [RowSpec("t-collapse", 13, user_channel(3))])
    cfg = relay_config(
        engine.url.render_as_string(False), gateway, batch_size=100, collapse_superseded_progress=True
    )
    relay = make_relay(engine, cfg)
    async with Subscriber(gateway, [user_channel(3)]) as sub:
        assert await drain(relay) == 12
        await wait_until(lambda: len(sub.received) == 2, what="two publications")
        assert sorted(v for _, _, v, _ in sub.received) == [12, 13]
    assert await statuses(engine) == {"PUBLISHED": 12}
    assert sample(relay, "taskcast_relay_superseded_rows_total") == 10
    await relay.publisher.aclose()


async def test_expired_lease_is_taken_over_and_the_stale_owner_cannot_mark(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    specs = plan(tasks=2, versions=3)
    await insert(engine, specs)
    url = engine.url.render_as_string(False)
    crashed = OutboxLeases(engine, "crashed-relay", lease_seconds=2.0)
    held = await crashed.claim(100)
    assert len(held) == len(specs)
    relay = make_relay(engine, relay_config(url, gateway, batch_size=100))
    assert await relay.run_once() == 0, "a live lease must not be taken"
    short = {"lease_seconds": 2.0, "publish_timeout_seconds": 1.0}  # the leases' length is what expires
    later = make_relay(
        engine,
        relay_config(url, gateway, batch_size=100, **short),
        now=lambda: utc_now() + timedelta(seconds=3),
    )
    async with Subscriber(gateway, channels_of(specs)) as sub:
        assert await later.run_once() == len(specs)
        await wait_until(lambda: sub.has_all(specs), what="taken-over rows published")
    assert sample(later, "taskcast_relay_lease_takeovers_total") == len(specs)
    assert await crashed.settle([r.id for r in held], [], []) == (0, 0, 0), "stale owner clobbered a row"
    async with engine.connect() as conn:
        attempts = {int(r[0]) for r in await conn.execute(sa.select(task_outbox.c.attempts))}
    assert attempts == {2}
    assert await statuses(engine) == {"PUBLISHED": len(specs)}
    for r in (relay, later):
        await r.publisher.aclose()


async def test_earlier_transaction_committed_late_is_published_within_one_poll_interval(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    poll = 0.3
    cfg = relay_config(engine.url.render_as_string(False), gateway, poll_interval_seconds=poll)
    relay = make_relay(engine, cfg)
    early, late = RowSpec("t-early", 1, user_channel(4)), RowSpec("t-late", 1, user_channel(4))
    stop = asyncio.Event()
    async with Subscriber(gateway, [user_channel(4)]) as sub, asyncio.TaskGroup() as tg:
        tg.create_task(relay.run(stop))
        conn_a = await engine.connect()
        tx_a = await conn_a.begin()
        await write.append_outbox_version(
            conn_a,
            early.task,
            1,
            [OutboxMessage(early.channel, "USER_SUMMARY", payload_of(early), 0)],
            utc_now(),
        )
        await insert(engine, [late])  # a later transaction: higher id, committed first
        await wait_until(lambda: sub.applied[late.key] == 1, what="the later row")
        ids = await row_ids(engine)
        assert len(ids) == 1, "the early row is not visible yet"
        await tx_a.commit()
        committed = asyncio.get_running_loop().time()
        await wait_until(lambda: sub.applied[early.key] == 1, within=5, what="the early row")
        elapsed = asyncio.get_running_loop().time() - committed
        await conn_a.close()
        stop.set()
    async with engine.connect() as conn:
        id_of = {r.aggregate_id: int(r.id) for r in await conn.execute(sa.select(task_outbox))}
    assert id_of["t-early"] < id_of["t-late"], "the early transaction holds the lower id"
    # One poll interval plus one claim/publish round on a shared, loaded machine; a relay with a
    # "last id seen" cursor would never publish this row at all.
    assert elapsed <= poll + scaled(0.7), f"published {elapsed:.3f}s after commit (poll interval {poll}s)"
    await relay.publisher.aclose()


def payload_of(spec: RowSpec) -> dict[str, object]:
    return {"kind": "test.state", "taskId": spec.task, "version": spec.version}


async def row_ids(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        return [int(r[0]) for r in await conn.execute(sa.select(task_outbox.c.id))]


@pytest.mark.parametrize("replicas", [2, 4])
async def test_concurrent_relays_publish_every_row_and_versions_only_increase_at_the_client(
    engine: AsyncEngine, gateway: GatewayProcess, replicas: int
) -> None:
    specs = plan(tasks=20, versions=25)  # 1,000 rows
    await insert(engine, specs)
    url = engine.url.render_as_string(False)
    relays = [make_relay(engine, relay_config(url, gateway, batch_size=20)) for _ in range(replicas)]
    stop = asyncio.Event()
    async with Subscriber(gateway, channels_of(specs)) as sub:
        async with asyncio.TaskGroup() as tg:
            for r in relays:
                tg.create_task(r.run(stop))
            await wait_until(lambda: sub.has_all(specs), what="all rows at the client")
            stop.set()
        sub.assert_exactly_once(specs)
        sub.assert_gate_monotonic(specs)
    claimed = [int(sample(r, "taskcast_relay_claimed_rows_total")) for r in relays]
    # A row a relay put back (a publish that failed and is retried, a released batch) is claimed
    # again, legitimately: on a loaded machine a publish's 2 s connect bound expires. Any other
    # second claim is a row two replicas held at once.
    put_back = sum(_put_back(r) for r in relays)
    assert sum(claimed) == len(specs) + put_back, f"rows claimed twice: {claimed}, {put_back} put back"
    assert all(c > 0 for c in claimed), f"a replica never got work: {claimed}"
    assert await statuses(engine) == {"PUBLISHED": len(specs)}
    for r in relays:
        await r.publisher.aclose()


async def test_poison_row_goes_dead_and_the_others_flow(engine: AsyncEngine, gateway: GatewayProcess) -> None:
    good = plan(tasks=3, versions=3)
    poison = RowSpec("t-poison", 1, "no_such_namespace:t1/x")  # gateway: 102 unknown channel
    await insert(engine, [*good[:9], poison, *good[9:]])
    relay = make_relay(engine, relay_config(engine.url.render_as_string(False), gateway, batch_size=100))
    async with Subscriber(gateway, channels_of(good)) as sub:
        assert await drain(relay) == len(good) + 1
        await wait_until(lambda: sub.has_all(good), what="the good rows")
    assert await statuses(engine) == {"PUBLISHED": len(good), "DEAD": 1}
    dead = await relay.leases.list_dead()
    assert [(d.aggregate_id, d.attempts) for d in dead] == [("t-poison", 1)]
    assert dead[0].last_error is not None and "102" in dead[0].last_error
    assert gateway.api_key not in dead[0].last_error
    assert sample(relay, FAILURES, failure_class="api_102", outcome="dead") == 1
    assert await relay.leases.requeue_dead(None) == 1
    assert await statuses(engine) == {"PUBLISHED": len(good), "PENDING": 1}
    await relay.publisher.aclose()


async def _row_state(engine: AsyncEngine) -> tuple[int, int]:
    """``(sum of attempts, PENDING rows not yet due)`` of the whole outbox."""
    c = task_outbox.c
    async with engine.connect() as conn:
        attempts = int(await conn.scalar(sa.select(sa.func.coalesce(sa.func.sum(c.attempts), 0))) or 0)
        not_due = await conn.scalar(
            sa.select(sa.func.count()).where(c.status == "PENDING", c.available_at > utc_now())
        )
    return attempts, int(not_due or 0)


async def test_gateway_outage_pauses_and_probes_then_the_backlog_drains_at_full_speed(
    engine: AsyncEngine, own_gateway: GatewayProcess
) -> None:
    """Defect 7, measured by rows: while the gateway is down the loops stop claiming and only a
    one-row probe is sent now and then (the outage lasts until 3 probes failed, whatever that
    takes on this machine); no row waits out a per-row backoff (every PENDING row is due), the
    outage costs no attempts and dead-letters nothing (max_attempts=2); once a probe gets through,
    the 60-row backlog (the reported 30 s outage) goes in full batches. Production backoff
    defaults (0.5 s .. 60 s): the old per-row backoff left rows not due for up to a minute."""
    specs = plan(tasks=12, versions=5)
    await insert(engine, specs)
    cfg = relay_config(
        engine.url.render_as_string(False),
        own_gateway,
        batch_size=10,
        concurrency=2,
        max_attempts=2,
        backoff_base_seconds=0.5,
        backoff_max_seconds=60.0,
    )
    relay = make_relay(engine, cfg)
    own_gateway.terminate()
    stop = asyncio.Event()
    probes = "taskcast_relay_gateway_probes_total"
    async with asyncio.TaskGroup() as tg:
        tg.create_task(relay.run(stop))
        await wait_until(lambda: sample(relay, probes, result="down") >= 3, what="three failed probes")
        assert not relay.gateway_up
        attempts, not_due = await _row_state(engine)
        # gateway-wide failures refund the claim's attempt: only a probe in flight holds one
        assert attempts <= 1, attempts
        assert not_due == 0, "rows wait out a per-row backoff although nothing is wrong with them"
        assert "DEAD" not in await statuses(engine)
        assert sample(relay, FAILURES, failure_class="connect", outcome="retry") == 0

        claims_before = sample(relay, "taskcast_relay_claims_total")
        pending_before = (await statuses(engine)).get("PENDING", 0)
        own_gateway.start()
        await wait_until(lambda: _all_published(engine, len(specs)), what="backlog drained after the outage")
        stop.set()
    assert relay.gateway_up
    # full speed: the successful probe, then full batches (each loop may end on one partial batch)
    claims = sample(relay, "taskcast_relay_claims_total") - claims_before
    assert claims <= 1 + -(-pending_before // cfg.batch_size) + cfg.concurrency, claims
    await relay.publisher.aclose()


async def _all_published(engine: AsyncEngine, n: int) -> bool:
    return (await statuses(engine)).get("PUBLISHED", 0) == n


class SlowPublisher:
    """Blocks every publish until released; records what it was asked to publish."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        self.started.set()
        await self.release.wait()
        return [PUBLISHED] * len(rows)

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("finishes", [True, False], ids=["in-flight-finishes", "deadline-releases"])
async def test_graceful_shutdown_finishes_or_releases_in_flight_batch(
    engine: AsyncEngine, gateway: GatewayProcess, finishes: bool
) -> None:
    specs = plan(tasks=2, versions=5)
    await insert(engine, specs)
    cfg = relay_config(
        engine.url.render_as_string(False), gateway, batch_size=100, shutdown_timeout_seconds=0.5
    )
    publisher = SlowPublisher()
    relay = Relay(OutboxLeases(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds), publisher, cfg)
    stop = asyncio.Event()
    run = asyncio.create_task(relay.run(stop))
    await asyncio.wait_for(publisher.started.wait(), scaled(5))
    stop.set()
    if finishes:
        publisher.release.set()
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(run, scaled(5))
    assert asyncio.get_running_loop().time() - started < scaled(2.0)
    expected = {"PUBLISHED": len(specs)} if finishes else {"PENDING": len(specs)}
    assert await statuses(engine) == expected
    if not finishes:
        async with engine.connect() as conn:
            locked = await conn.scalar(sa.select(sa.func.count()).where(task_outbox.c.locked_by.is_not(None)))
        assert locked == 0
        assert sample(relay, "taskcast_relay_released_rows_total") == len(specs)


async def test_retention_purges_only_old_published_rows(engine: AsyncEngine, gateway: GatewayProcess) -> None:
    specs = plan(tasks=2, versions=4)
    await insert(engine, specs)
    url = engine.url.render_as_string(False)
    relay = make_relay(engine, relay_config(url, gateway, batch_size=100, retention_seconds=3600))
    await drain(relay)
    await insert(engine, [RowSpec("t-pending", 1, user_channel(0))])
    assert await relay.purge() == 0
    later = make_relay(
        engine,
        relay_config(url, gateway, retention_seconds=3600),
        now=lambda: utc_now() + timedelta(seconds=3601),
    )
    assert await later.purge() == len(specs)
    assert await statuses(engine) == {"PENDING": 1}
    for r in (relay, later):
        await r.publisher.aclose()


async def test_metrics_endpoint_exposes_the_relay_series(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    specs = plan(tasks=1, versions=2)
    await insert(engine, specs)
    relay = make_relay(engine, relay_config(engine.url.render_as_string(False), gateway))
    server = serve(relay.metrics, "127.0.0.1", 0)
    try:
        await drain(relay)
        await insert(engine, [RowSpec("t-m", 1, user_channel(0))])
        await relay.refresh_gauges()
        text = await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
    for series in (
        'taskcast_relay_outbox_rows{status="pending"} 1.0',
        'taskcast_relay_outbox_rows{status="dead"} 0.0',
        'taskcast_relay_outbox_rows{status="processing"} 0.0',
        "taskcast_relay_oldest_pending_age_seconds",
        "taskcast_relay_claims_total 1.0",
        "taskcast_relay_published_rows_total 4.0",
        "taskcast_relay_lease_takeovers_total 0.0",
        "taskcast_relay_state_commit_to_publish_seconds_count 4.0",
        "taskcast_relay_publish_failures_total",
    ):
        assert series in text, series
    await relay.publisher.aclose()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


async def test_detail_and_user_channels_are_distinct_idempotency_keys(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    spec_u, spec_d = RowSpec("t-idem", 1, user_channel(1)), RowSpec("t-idem", 1, detail_channel("t-idem"))
    await insert(engine, [spec_u, spec_d])
    relay = make_relay(engine, relay_config(engine.url.render_as_string(False), gateway))
    async with Subscriber(gateway, [spec_u.channel, spec_d.channel]) as sub:
        await drain(relay)
        await wait_until(lambda: sub.has_all([spec_u, spec_d]), what="both channels")
        async with engine.begin() as conn:  # republish both (as after a crash before the mark)
            await conn.execute(sa.update(task_outbox).values(status="PENDING"))
        await drain(relay)
        sentinel = [RowSpec("t-idem", 2, spec_u.channel), RowSpec("t-idem", 2, spec_d.channel)]
        await insert(engine, sentinel)  # delivered after any duplicate on the same channels
        await drain(relay)
        await wait_until(lambda: sub.has_all(sentinel), what="the sentinels")
    assert sample(relay, "taskcast_relay_published_rows_total") == 6
    assert sub.duplicates == 0, "the gateway's idempotency window should have absorbed the re-publish"
    await relay.publisher.aclose()
