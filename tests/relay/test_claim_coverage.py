"""One claim per hint, not per relay or per copy of it (docs/relay.md "Claim coverage"), with two
real relay processes on one wake-up channel, real Redis, MariaDB and gateway.

Claims are counted by the relays themselves (``taskcast_relay_claims_total`` + ``…_empty_claims_total``:
every claim transaction, with rows or without). Both relays poll never (``NEVER``) in the counted
tests, so every claim is a hint's. Invariants: a hint costs one claim in all; a burst of hints
that arrives before the woken loop's claim costs that one claim; a relay that holds a hint and
cannot act on it (stopped, then killed) leaves it to the other relay's safety-net poll; nothing
is lost and nothing is published twice.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.outbox import relay_wake_channel
from status_api.wake import RedisWakePublisher
from tests.relay.harness import RelayProcess, Subscriber, insert, plan, statuses, wait_until
from tests.relay.test_wake import NEVER, WITHIN, _channels, _relay_doc
from tests.support import GatewayProcess

pytestmark = [pytest.mark.mysql, pytest.mark.redis]

#: The wake-up sources besides hints that make a claim (``taskcast_relay_wakeups_total{source}``).
DUE_BACKLOG = ("due", "backlog")
#: Hints sent in one burst (one pipeline: they reach the relay together).
BURST = 5


def _config(
    db_url: str, gateway: GatewayProcess, redis_url: str, channel: str, **extra: Any
) -> dict[str, Any]:
    return _relay_doc(db_url, gateway, redis_url, channel, concurrency=4, lease_seconds=30.0, **extra)


async def _metrics(relay: RelayProcess) -> str:
    async with httpx.AsyncClient() as c:
        return (await c.get(f"http://127.0.0.1:{relay.config['metrics_port']}/metrics")).text


def _sample(text: str, name: str, default: float | None = None) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    if default is not None:  # a labelled sample exists once counted
        return default
    raise AssertionError(f"{name} not exported")


async def _claims(relay: RelayProcess) -> int:
    """Every claim transaction this relay made: with rows or empty."""
    text = await _metrics(relay)
    return int(
        _sample(text, "taskcast_relay_claims_total") + _sample(text, "taskcast_relay_empty_claims_total")
    )


async def _subscribed(relay: RelayProcess) -> bool:
    try:
        return "taskcast_relay_wake_listener_up 1.0" in await _metrics(relay)
    except httpx.HTTPError:
        return False


async def _settled(relays: list[RelayProcess]) -> list[int]:
    """Each relay subscribed and done with the claim it makes on subscribing: the claim counts."""
    for r in relays:
        await wait_until(lambda r=r: _subscribed(r), within=60, what=f"{r.name} subscribed")
    for r in relays:
        await wait_until(lambda r=r: _at_least(r, 1), within=WITHIN, what=f"{r.name}'s first claim")
    return [await _claims(r) for r in relays]


async def _counters(relays: list[RelayProcess]) -> dict[str, float]:
    """Every ``taskcast_relay_*_total`` sample of the relays (labels in the name), summed."""
    out: dict[str, float] = {}
    for r in relays:
        for line in (await _metrics(r)).splitlines():
            if line.startswith("taskcast_relay_") and "_total" in line.split(" ", 1)[0]:
                name, value = line.rsplit(" ", 1)
                out[name] = out.get(name, 0.0) + float(value)
    return out


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


async def _at_least(relay: RelayProcess, n: int) -> bool:
    return await _claims(relay) >= n


async def _published(engine: AsyncEngine, n: int) -> bool:
    return (await statuses(engine)).get("PUBLISHED", 0) == n


@pytest.fixture(scope="module")
def pair(
    relay_db_url: str, gateway: GatewayProcess, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[RelayProcess]]]:
    """Two relay processes on one wake-up channel, never polling: only hints make them claim."""
    channel = f"taskcast:test:coverage:{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("coverage")
    relays = [
        RelayProcess(_config(relay_db_url, gateway, redis_url, channel, poll_interval_seconds=NEVER), workdir)
        for _ in range(2)
    ]
    try:
        for r in relays:
            r.start()
        yield channel, relays
    finally:
        for r in relays:
            r.terminate()


async def test_a_hint_costs_one_claim_and_a_burst_of_hints_too(
    engine: AsyncEngine, redis_url: str, pair: tuple[str, list[RelayProcess]], gateway: GatewayProcess
) -> None:
    """The Status API's hint reaches one relay and costs one claim in all; then ``BURST`` hints for
    one commit, arriving together at one relay (as copies from several Status API workers, a due
    time and a hint do), cost one claim too: the woken loop's claim covers the others (without the
    coverage, each hint woke one more idle loop: ``BURST`` claims, all but one empty)."""
    channel, relays = pair
    before = await _settled(relays)
    first, second = plan(tasks=2, versions=1), plan(tasks=2, versions=1)
    publisher = RedisWakePublisher(redis_url, channel)
    client = redis.Redis.from_url(redis_url)
    try:
        async with Subscriber(gateway, _channels(first + second)) as sub:
            await insert(engine, first)
            publisher.notify(len(first))
            await wait_until(lambda: sub.has_all(first), within=WITHIN, what="the hinted rows")
            await wait_until(lambda: _published(engine, len(first)), within=WITHIN, what="marked")
            after_one = [await _claims(r) for r in relays]
            assert sum(after_one) - sum(before) == 1, (before, after_one)

            await insert(engine, second)
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(BURST):
                    pipe.publish(relay_wake_channel(channel, str(relays[0].config["relay_id"])), "2")
                received = await pipe.execute()
            assert received == [1] * BURST  # every copy reached the relay
            await wait_until(lambda: sub.has_all(second), within=WITHIN, what="the burst's rows")
            await wait_until(lambda: _published(engine, len(first + second)), within=WITHIN, what="marked")
            after_burst = [await _claims(r) for r in relays]
        sub.assert_exactly_once(first + second)
    finally:
        await publisher.aclose()
        await client.aclose()
    assert after_burst[0] - after_one[0] == 1, (after_one, after_burst)
    assert after_burst[1] == after_one[1], (after_one, after_burst)
    absorbed = _sample(await _metrics(relays[0]), "taskcast_relay_wakeups_absorbed_total")
    assert absorbed >= BURST - 1


async def test_many_commits_and_hints_publish_each_row_once(
    engine: AsyncEngine, redis_url: str, pair: tuple[str, list[RelayProcess]], gateway: GatewayProcess
) -> None:
    """Commits in quick succession, each followed by the Status API's hint, to both relays (round
    robin) with claim spacing and coverage absorbing hints: every row reaches the client exactly
    once, every row is marked, and there are no more claims than hints and due times."""
    channel, relays = pair
    before = await _settled(relays)
    counted = await _counters(relays)
    commits = [plan(tasks=1, versions=1) for _ in range(30)]
    publisher = RedisWakePublisher(redis_url, channel)
    hints = 0
    try:
        async with Subscriber(gateway, _channels([s for c in commits for s in c])) as sub:
            for specs in commits:
                await insert(engine, specs)
                sent = publisher.sent
                publisher.notify(len(specs))
                await asyncio.sleep(0)  # the hint leaves (or rides on the next one)
                hints += publisher.sent - sent
            every = [s for c in commits for s in c]
            await wait_until(lambda: sub.has_all(every), within=WITHIN, what="every row at the client")
            await wait_until(lambda: _published(engine, len(every)), within=WITHIN, what="every row marked")
        sub.assert_exactly_once(every)
        hints = max(hints, publisher.sent)
    finally:
        await publisher.aclose()
    after = [await _claims(r) for r in relays]
    changes = _delta(counted, await _counters(relays))
    # each hint reaches one relay
    assert changes.get('taskcast_relay_wakeups_total{source="redis"}', 0.0) <= hints, changes
    # every claim is a hint's or a due time's (a row committed during a claim, after its clock was
    # read, looks not yet due to that claim's next-due read), or a backlog's: a full claim (a slow
    # machine lets more than a batch pile up before the first claim) goes on claiming and wakes one
    # more loop (``source="backlog"``): two claims per full one. None is a second claim for one hint.
    due, backlog = (
        changes.get(f'taskcast_relay_wakeups_total{{source="{s}"}}', 0.0) for s in ("due", "backlog")
    )
    assert sum(after) - sum(before) <= hints + due + 2 * backlog, (before, after, hints, changes)


async def test_a_stopped_then_killed_relay_does_not_strand_its_hint(
    engine: AsyncEngine, redis_url: str, relay_db_url: str, gateway: GatewayProcess, tmp_path: Path
) -> None:
    """A relay that holds a hint and cannot act on it (SIGSTOP: still subscribed for Redis, so the
    hint is delivered to it) leaves the rows to the other relay's safety-net poll, within
    ``wake_poll_interval_seconds``; killing it afterwards loses nothing either."""
    channel = f"taskcast:test:coverage:{uuid.uuid4().hex[:8]}"
    stuck = RelayProcess(
        _config(relay_db_url, gateway, redis_url, channel, poll_interval_seconds=NEVER), tmp_path
    )
    other = RelayProcess(
        _config(
            relay_db_url,
            gateway,
            redis_url,
            channel,
            poll_interval_seconds=0.2,
            wake_poll_interval_seconds=1.0,
        ),
        tmp_path,
    )
    client = redis.Redis.from_url(redis_url)
    specs = plan(tasks=3, versions=1)
    try:
        stuck.start()
        other.start()
        await _settled([stuck, other])
        assert stuck.proc is not None
        stuck.proc.send_signal(signal.SIGSTOP)
        async with Subscriber(gateway, _channels(specs)) as sub:
            await insert(engine, specs)
            own = relay_wake_channel(channel, str(stuck.config["relay_id"]))
            assert await client.publish(own, str(len(specs))) == 1  # the stuck relay got the hint
            await wait_until(lambda: sub.has_all(specs), within=WITHIN, what="rows by the other relay's poll")
            stuck.kill()
            await wait_until(lambda: _published(engine, len(specs)), within=WITHIN, what="every row marked")
        sub.assert_exactly_once(specs)
    finally:
        await client.aclose()
        if stuck.proc is not None and stuck.running:
            stuck.proc.send_signal(signal.SIGCONT)
        stuck.kill()
        other.terminate()
