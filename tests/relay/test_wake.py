"""Post-commit wake-up (issue 16, docs/relay.md "Wake-up"): a commit that wrote outbox rows wakes
the relays, which publish at once; the poll stays the safety net.

Every test runs the relays with a poll interval far beyond the test's bounds (``NEVER``) where the
point is that the wake-up, not the poll, published — so each fails on a relay without wake-ups.
Invariants: a wake-up arriving while every loop is busy is kept; a lost wake-up still publishes (by
the poll); a relay killed after a wake-up loses nothing; the hint path failing never fails a commit.
Real MariaDB, Redis, gateway and Status API processes.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases
from relay.metrics import RelayMetrics
from relay.relay import Relay
from relay.wake import RedisWakeListener
from status_api.storage.database import create_engine as status_engine
from status_api.storage.database import init_db
from status_api.storage.outbox import OutboxRow, relay_wake_channel
from status_api.wake import RedisWakePublisher
from tests.relay.harness import (
    RelayProcess,
    RowSpec,
    Subscriber,
    insert,
    make_relay,
    plan,
    relay_config,
    statuses,
    wait_until,
)
from tests.relay.test_crash_points import crashing_relay, process_config
from tests.status_api.harness import COORDINATOR, DEFAULT_STEPS, TEST_CONFIG, FakeClock, Harness, build
from tests.support import GatewayProcess, StatusApiProcess, free_port, merge, scaled

pytestmark = pytest.mark.mysql

NEVER = 3600.0  # a poll interval no test outlives: only a wake-up can publish in time
WITHIN = 15.0  # bound on "at once" under this loaded machine (scaled); far below NEVER


def _channel() -> str:
    return f"taskcast:test:wake:{uuid.uuid4().hex[:8]}"


async def _running(relay: Relay) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(relay.run(stop))


async def _stopped(stop: asyncio.Event, task: asyncio.Task[None], relay: Relay) -> None:
    stop.set()
    await asyncio.wait_for(task, scaled(30))
    await relay.publisher.aclose()


def _channels(specs: Iterable[RowSpec]) -> list[str]:
    return sorted({s.channel for s in specs})


async def test_a_wake_up_publishes_at_once_instead_of_at_the_next_poll(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    relay = make_relay(
        engine, relay_config(relay_db_url, gateway, poll_interval_seconds=NEVER, concurrency=2)
    )
    specs = plan(tasks=3, versions=2)
    async with Subscriber(gateway, _channels(specs)) as sub:
        stop, task = await _running(relay)
        try:
            await insert(engine, specs)
            relay.wake()
            await wait_until(lambda: sub.has_all(specs), within=WITHIN, what="woken relay published")
        finally:
            await _stopped(stop, task, relay)
    sub.assert_exactly_once(specs)
    assert relay.metrics.wakeups.labels("local")._value.get() == 1


class _WakeDuringClaim(OutboxLeases):
    """Real leases; the first claim that finds rows commits more rows and wakes the relay before it
    returns — a wake-up arriving while the only loop is busy."""

    relay: Relay
    more: list[RowSpec]

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[OutboxRow]:
        rows = await super().claim(limit, takeover=takeover, backlog=backlog)
        if rows and self.more:
            more, self.more = self.more, []
            await insert(self.engine, more)
            self.relay.wake()
        return rows


async def test_a_wake_up_while_every_loop_is_busy_is_kept(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    cfg = relay_config(relay_db_url, gateway, poll_interval_seconds=NEVER, concurrency=1)
    first, second = plan(tasks=2, versions=1), plan(tasks=2, versions=1)
    leases = _WakeDuringClaim(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds)
    leases.more = second
    relay = make_relay(engine, cfg)
    relay.leases = leases
    leases.relay = relay
    async with Subscriber(gateway, _channels(first + second)) as sub:
        stop, task = await _running(relay)
        try:
            await insert(engine, first)
            relay.wake()
            await wait_until(lambda: sub.has_all(first + second), within=WITHIN, what="both batches")
        finally:
            await _stopped(stop, task, relay)
    sub.assert_exactly_once(first + second)


class _CountedClaims(OutboxLeases):
    """Real leases that count the claims made."""

    claims = 0

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[OutboxRow]:
        self.claims += 1
        return await super().claim(limit, takeover=takeover, backlog=backlog)


async def test_a_lingering_loop_absorbs_the_wake_ups_and_one_claim_carries_their_rows(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str
) -> None:
    """``linger_ms``: the woken loop waits before its claim; a wake-up meanwhile neither wakes the
    other idle loop nor costs a claim of its own, and the one claim publishes every row (without
    the linger, the second wake-up wakes the second loop: two claims)."""
    cfg = relay_config(relay_db_url, gateway, poll_interval_seconds=NEVER, concurrency=2, linger_ms=1000)
    first, second = plan(tasks=2, versions=1), plan(tasks=2, versions=1)
    leases = _CountedClaims(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds)
    relay = make_relay(engine, cfg)
    relay.leases = leases
    async with Subscriber(gateway, _channels(first + second)) as sub:
        stop, task = await _running(relay)
        try:
            await wait_until(
                lambda: len(relay.wakeups.sleepers) == 2, within=WITHIN, what="both loops asleep"
            )
            await insert(engine, first)
            await insert(engine, second)
            relay.wake()
            await wait_until(
                lambda: relay.wakeups.lingering == 1, within=WITHIN, what="the woken loop lingers"
            )
            relay.wake()  # absorbed: the lingering loop's claim comes after it
            await wait_until(lambda: sub.has_all(first + second), within=WITHIN, what="every row")
        finally:
            await _stopped(stop, task, relay)
    sub.assert_exactly_once(first + second)
    assert leases.claims == 1
    assert relay.metrics.wakeups.labels("local")._value.get() == 2


async def test_a_lost_wake_up_still_publishes_by_the_safety_net_poll(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str, redis_url: str
) -> None:
    relay = make_relay(engine, relay_config(relay_db_url, gateway, poll_interval_seconds=0.2))
    listener = RedisWakeListener(redis_url, _channel(), lambda: relay.wake("redis"), relay.metrics)
    specs = plan(tasks=2, versions=2)
    async with Subscriber(gateway, _channels(specs)) as sub:
        stop, task = await _running(relay)
        listening = asyncio.create_task(listener.run(stop))
        try:
            await wait_until(listener.subscribed.is_set, within=WITHIN, what="listener subscribed")
            await insert(engine, specs)  # committed, but the hint is lost: nobody publishes it
            await wait_until(lambda: sub.has_all(specs), within=WITHIN, what="poll published")
        finally:
            await _stopped(stop, task, relay)
            await asyncio.wait_for(listening, scaled(30))
    assert relay.metrics.wakeups.labels("redis")._value.get() == 1  # only the one on subscribing


async def test_redis_hints_reach_the_listener_and_coalesce(redis_url: str) -> None:
    channel, woken = _channel(), []
    metrics = RelayMetrics()
    listener = RedisWakeListener(redis_url, channel, lambda: woken.append(1), metrics)
    stop = asyncio.Event()
    listening = asyncio.create_task(listener.run(stop))
    publisher = RedisWakePublisher(redis_url, channel)
    try:
        await wait_until(listener.subscribed.is_set, within=WITHIN, what="listener subscribed")
        assert woken == [1]  # on subscribing: hints sent while it was away are lost, look once
        assert metrics.wake_listener_up._value.get() == 1
        for _ in range(100):  # one burst of commits in one loop turn
            publisher.notify(2)
        await wait_until(lambda: len(woken) >= 2, within=WITHIN, what="hint received")
        await wait_until(lambda: publisher._pending == 0 and publisher._sender.done())  # type: ignore[union-attr]
        assert 1 <= publisher.sent <= 2, publisher.sent  # coalesced: not one PUBLISH per commit
        assert publisher.failed == 0
    finally:
        stop.set()
        await asyncio.wait_for(listening, scaled(30))
        await publisher.aclose()
    assert metrics.wake_listener_up._value.get() == 0


async def test_each_hint_wakes_one_relay_and_a_relay_gone_or_an_older_one_is_handled(redis_url: str) -> None:
    """With relay channels, a hint reaches exactly one relay, round-robin; a relay that stopped
    listening is skipped by the very next hint; a listener of the shared channel alone (an older
    relay) makes every hint go to every relay again."""
    channel, now = _channel(), [0.0]
    woken: dict[str, list[int]] = {"a": [], "b": [], "old": []}
    stops: dict[str, asyncio.Event] = {}
    tasks: dict[str, asyncio.Task[None]] = {}

    async def listen(name: str, own: bool) -> RedisWakeListener:
        own_channel = relay_wake_channel(channel, name) if own else None
        listener = RedisWakeListener(
            redis_url, channel, lambda: woken[name].append(1), RelayMetrics(), own_channel=own_channel
        )
        stops[name] = asyncio.Event()
        tasks[name] = asyncio.create_task(listener.run(stops[name]))
        await wait_until(listener.subscribed.is_set, within=WITHIN, what=f"{name} subscribed")
        woken[name].clear()  # the wake-up on subscribing
        return listener

    publisher = RedisWakePublisher(redis_url, channel, clock=lambda: now[0])

    async def hint() -> None:
        sent = publisher.sent
        publisher.notify(1)
        await wait_until(lambda: publisher.sent > sent, within=WITHIN, what="hint sent")

    async def received(n: int) -> None:
        await wait_until(lambda: sum(map(len, woken.values())) >= n, within=WITHIN, what=f"{n} wake-ups")

    try:
        await listen("a", own=True)
        await listen("b", own=True)
        for i in range(1, 7):
            await hint()
            await received(i)
        assert (len(woken["a"]), len(woken["b"])) == (3, 3)  # one relay per hint, in turn

        stops["a"].set()
        await asyncio.wait_for(tasks["a"], scaled(30))
        for i in range(1, 3):  # the refresh (clock frozen) still lists a: PUBLISH says nobody got it
            await hint()
            await received(6 + i)
        assert (len(woken["a"]), len(woken["b"])) == (3, 5)

        await listen("old", own=False)
        now[0] += 60  # the next hint reads the subscribers again
        await hint()
        await received(7 + 2)
        assert (len(woken["b"]), len(woken["old"])) == (6, 1)  # every relay: an older one is there
    finally:
        for stop in stops.values():
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks.values()), scaled(30))
        await publisher.aclose()


async def test_an_unreachable_wake_channel_fails_nothing(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    publisher = RedisWakePublisher(dead)
    for _ in range(3):
        publisher.notify(1)  # never raises, never blocks the caller
    await wait_until(lambda: publisher.failed >= 1, within=WITHIN, what="failed hint")
    publisher.notify(1)
    await wait_until(lambda: publisher.failed >= 2, within=WITHIN, what="second failed hint")
    await publisher.aclose()
    metrics = RelayMetrics()
    listener = RedisWakeListener(dead, "c", lambda: None, metrics)
    stop = asyncio.Event()
    listening = asyncio.create_task(listener.run(stop))
    await wait_until(lambda: "wake-up channel unavailable" in caplog.text, within=WITHIN)
    stop.set()
    await asyncio.wait_for(listening, scaled(30))  # ends on stop while reconnecting; never raised
    warnings = [r for r in caplog.records if "hint not sent" in r.getMessage()]
    assert len(warnings) == 1, "one warning per outage, not one per commit"
    assert "Traceback" not in caplog.text and "127.0.0.1" not in caplog.text  # no URL in logs


async def test_embedded_status_api_commit_wakes_the_relay_in_process(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    """``taskcast up``'s wiring on SQLite: the Status API's post-commit hook is ``Relay.wake``."""
    url = f"sqlite+aiosqlite:///{tmp_path}/up.db"
    eng = status_engine(url)
    await init_db(eng)
    relay = make_relay(eng, relay_config(url, gateway, poll_interval_seconds=NEVER))
    status = Harness(build(eng, FakeClock()), FakeClock())
    status.service.on_commit = lambda _rows: relay.wake()
    await status.service.load_registry_files()
    async with Subscriber(gateway, ["task_user:t1/u1"]) as sub:
        stop, task = await _running(relay)
        try:
            t = await status.create_task()
            await wait_until(
                lambda: any(tid == t.id for _, tid, _, _ in sub.received),
                within=WITHIN,
                what="task at the client",
            )
        finally:
            await _stopped(stop, task, relay)
            await status.http.aclose()
            await eng.dispose()


# --- processes: Status API -> Redis hint -> relay -----------------------------------------------


def _relay_doc(
    db_url: str, gateway: GatewayProcess, redis_url: str, channel: str, **extra: Any
) -> dict[str, Any]:
    return process_config(
        db_url,
        gateway,
        wake_redis_url=redis_url,
        wake_channel=channel,
        metrics_port=free_port(),
        **extra,
    )


async def test_a_status_api_commit_wakes_a_relay_process(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str, redis_url: str, tmp_path: Path
) -> None:
    channel = _channel()
    api = StatusApiProcess(
        merge(
            TEST_CONFIG,
            {"database": {"url": relay_db_url}, "wake": {"redis_url": redis_url, "channel": channel}},
        ),
        tmp_path / "api",
    ).start()
    relay = RelayProcess(
        _relay_doc(relay_db_url, gateway, redis_url, channel, poll_interval_seconds=NEVER), tmp_path
    ).start()
    try:
        await wait_until(lambda: _listener_up_doc(relay.config), within=60, what="relay subscribed")
        async with (
            Subscriber(gateway, ["task_user:t1/u1"]) as sub,
            httpx.AsyncClient(base_url=api.url) as http,
        ):
            body = {
                "tenantId": "t1",
                "ownerId": "u1",
                "product": "DOCUMENT",
                "taskType": "DOCUMENT_PROCESS",
                "title": "wake",
                "statusDefinitionVersion": 1,
                "operationDefinitionVersion": 1,
                "steps": DEFAULT_STEPS,
            }
            r = await http.post(
                "/internal/v1/tasks", json=body, headers={"Authorization": f"Bearer {COORDINATOR}"}
            )
            assert r.status_code == 201, r.text
            task_id = r.json()["taskId"]
            await wait_until(
                lambda: any(t == task_id for _, t, _, _ in sub.received),
                within=WITHIN,
                what="task at the client",
            )
    finally:
        relay.terminate()
        api.terminate()
    assert "Traceback" not in api.log_text() + relay.log_text()
    assert redis_url not in api.log_text() + relay.log_text()


async def test_a_relay_killed_after_a_wake_up_loses_nothing(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str, redis_url: str, tmp_path: Path
) -> None:
    channel = _channel()
    doc = _relay_doc(relay_db_url, gateway, redis_url, channel, poll_interval_seconds=NEVER)
    doomed = crashing_relay(doc, tmp_path, "before_publish:1").start()
    specs = plan(tasks=4, versions=3)
    publisher = RedisWakePublisher(redis_url, channel)
    try:
        await wait_until(lambda: _listener_up_doc(doc), within=60, what="doomed relay subscribed")
        async with Subscriber(gateway, _channels(specs)) as sub:
            await insert(engine, specs)
            publisher.notify(len(specs))  # the commit's hint: the doomed relay claims and dies
            assert await doomed.wait_exit(60) == -signal.SIGKILL, doomed.log_text()
            assert (await statuses(engine)).get("PROCESSING", 0) > 0
            survivor = RelayProcess(_relay_doc(relay_db_url, gateway, redis_url, channel), tmp_path).start()
            try:  # the survivor's poll takes the expired lease over (the safety net, not a hint)
                await wait_until(lambda: sub.has_all(specs), within=60, what="every row at the client")
                await wait_until(
                    lambda: _published(engine, len(specs)), within=WITHIN, what="every row marked"
                )
            finally:
                survivor.terminate()
        sub.assert_exactly_once(specs)
    finally:
        doomed.kill()
        await publisher.aclose()


async def _listener_up_doc(doc: dict[str, Any]) -> bool:
    url = f"http://127.0.0.1:{doc['metrics_port']}/metrics"
    try:
        async with httpx.AsyncClient() as c:
            return "taskcast_relay_wake_listener_up 1.0" in (await c.get(url)).text
    except httpx.HTTPError:
        return False


async def _published(engine: AsyncEngine, n: int) -> bool:
    return (await statuses(engine)).get("PUBLISHED", 0) == n
