"""Health and failure reporting of the Redis engine under outages (issue 13, defects 6 and 7).

* Health follows what publishing needs: after a restart Redis answers PUBLISH and SUBSCRIBE
  while it is still LOADING its dataset, but no script; ``healthy()`` must stay False until the
  publish script runs again.
* Failures are logged once per state change (with a count when they end), never once per
  failed command, PUB/SUB reconnect attempt or bad message; the ``on_error`` hook (the metric)
  still sees every failure.

Each test runs its own throwaway redis-server. LOADING is made to last with Redis' own knobs
(``key-load-delay`` per key, events processed every KiB) and ended on demand with CONFIG SET,
so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError

from gateway.engine.base import EngineError, HistoryOptions
from gateway.engine.redis import build_shards
from gateway.engine.redis_broker import RedisBroker
from gateway.engine.redis_codec import PROBE
from gateway.protocol.messages import Publication
from tests.contracts.test_broker import Recorder
from tests.helpers import redis_engine
from tests.helpers.redis_engine import RedisServer, running
from tests.support import scaled, wait_until

pytestmark = pytest.mark.redis

HISTORY = HistoryOptions(size=10, ttl_seconds=60, meta_ttl_seconds=600)
SLOW_LOADING = ("--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024")
"""1 ms per key (a sleep: a slower machine only loads longer), and clients are served during the
load, every KiB: the 20,000 keys below load for at least 20 s."""


def pub(n: int = 0) -> Publication:
    return Publication(data=f'{{"n":{n}}}'.encode())


@pytest.fixture
async def server() -> AsyncIterator[RedisServer]:
    instance = await RedisServer().start()
    try:
        yield instance
    finally:
        instance.stop()


def make_broker(server: RedisServer, errors: Counter[str], **options: object) -> RedisBroker:
    config = redis_engine.settings(server.url, prefix="p", io_timeout=1.0)
    options.setdefault("probe_interval_seconds", 0.1)
    options.setdefault("probe_timeout_seconds", 10.0)  # no needless rebuilds on a loaded machine
    options.setdefault("reconnect_backoff_seconds", (0.02, 0.1))
    shards = build_shards(config, on_error=lambda op: errors.update([op]))
    return RedisBroker(shards, prefix="p", **options)  # type: ignore[arg-type]


async def _loading(admin: Redis) -> bool:
    try:
        info = await admin.info("persistence")
    except BusyLoadingError:
        return True
    return bool(info.get("loading"))


async def _wait_loading(url: str) -> None:
    async with asyncio.timeout(scaled(20)):
        while True:
            admin = Redis.from_url(url, socket_connect_timeout=0.5)
            try:
                await admin.ping()
            except BusyLoadingError:
                return
            except Exception:  # refused while the process boots
                pass
            finally:
                await admin.aclose()
            await asyncio.sleep(0.02)


async def test_health_stays_down_while_redis_loads_its_dataset(server: RedisServer) -> None:
    errors: Counter[str] = Counter()
    async with contextlib.AsyncExitStack() as stack:
        admin = Redis.from_url(server.url)
        stack.push_async_callback(admin.aclose)
        await admin.eval("for i = 1, 20000 do redis.call('SET', 'k' .. i, string.rep('x', 1100)) end", 0)
        # The PUB/SUB silence bound (3 probe intervals) must exceed a round trip to a loading Redis.
        broker = await stack.enter_async_context(
            running(make_broker(server, errors, probe_interval_seconds=0.5))
        )
        await broker.publish("ch", pub(1), HISTORY)
        await admin.save()  # what AOF would keep: the restarted Redis loads it

        server.kill()
        await wait_until(lambda: not broker.healthy(), what="unhealthy after kill -9")
        server.extra = SLOW_LOADING
        server.spawn()
        await _wait_loading(server.url)

        # Watch the probe's keep-alive PUBLISH on this node's channel: once three rounds went by
        # with the PUB/SUB connection back, the old probe (a bare PUBLISH) had long turned healthy.
        probes = Redis.from_url(server.url)
        stack.push_async_callback(probes.aclose)
        watcher = probes.pubsub()
        stack.push_async_callback(watcher.aclose)
        await watcher.subscribe(broker.keys.node(broker.node_id))
        seen = 0
        healthy_while_loading = False
        async with asyncio.timeout(scaled(20)):
            while seen < 3:
                message = await watcher.get_message(ignore_subscribe_messages=True, timeout=1.0)
                listeners_back = all(listener.ready for listener in broker._listeners)
                if message is not None and message["data"] == PROBE and listeners_back:
                    seen += 1
                healthy_while_loading |= broker.healthy()
        loader = Redis.from_url(server.url)
        stack.push_async_callback(loader.aclose)
        assert await _loading(loader), "Redis finished loading early: the test proved nothing"
        assert not healthy_while_loading, "healthy while Redis was LOADING (publishes fail then)"
        assert errors["probe"] >= 1

        await loader.config_set("key-load-delay", 0)
        await wait_until(broker.healthy, 20, "healthy once loaded")
        result = await broker.publish("ch", pub(2), HISTORY)

    assert result.position is not None and result.position.offset == 2


async def test_an_outage_is_logged_once_with_a_count_when_it_ends(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    errors: Counter[str] = Counter()
    broker = make_broker(server, errors)  # not running: only these commands touch Redis
    try:
        await broker.publish("ch", pub(), HISTORY)
        server.kill()
        with caplog.at_level(logging.INFO, logger="gateway.engine"):
            for _ in range(50):
                with pytest.raises(EngineError):
                    await broker.publish("ch", pub(), HISTORY)
            with pytest.raises(EngineError):
                await broker.history("ch", HISTORY, limit=-1)
            failing = [r for r in caplog.records if r.levelno >= logging.WARNING]
            server.spawn()
            await server.wait_up()
            result = await broker.publish("ch", pub(), HISTORY)
    finally:
        await broker.close()

    assert result.position is not None
    assert len(failing) == 1 and failing[0].levelno == logging.ERROR and not failing[0].exc_info
    assert "failing" in failing[0].getMessage()
    recovered = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(recovered) == 1 and "after 51 failures" in recovered[0], recovered
    assert errors == Counter(publish=50, history=1)


async def test_pubsub_reconnect_attempts_are_logged_once_per_outage(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    errors: Counter[str] = Counter()
    broker = make_broker(server, errors)
    events = Recorder()
    broker.set_handler(events)
    with caplog.at_level(logging.INFO, logger="gateway.engine"):
        async with running(broker):
            await broker.subscribe("ch")
            server.kill()
            await wait_until(lambda: errors["pubsub"] >= 5, what="several failed reconnect attempts")
            await wait_until(lambda: errors["probe"] >= 5, what="several failed probes")
            server.spawn()
            await server.wait_up()
            await wait_until(lambda: events.reconnects == 1, what="resubscribed")
            await wait_until(broker.healthy, what="healthy again")

    pubsub = [r for r in caplog.records if "PUB/SUB" in r.getMessage()]
    commands = [r for r in caplog.records if "(broker)" in r.getMessage()]
    assert [r.levelno for r in pubsub] == [logging.WARNING, logging.INFO], [r.getMessage() for r in pubsub]
    assert [r.levelno for r in commands] == [logging.ERROR, logging.INFO], [r.getMessage() for r in commands]


async def test_bad_pubsub_messages_are_logged_once_per_run(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(server, Counter())
    events = Recorder()
    broker.set_handler(events)
    admin = Redis.from_url(server.url)
    try:
        with caplog.at_level(logging.INFO, logger="gateway.engine"):
            async with running(broker):
                await broker.subscribe("ch")
                name = broker.keys.client_channel("ch")
                for _ in range(30):
                    await admin.publish(name, b"__p1:not-a-position")
                    await admin.publish(name, b"garbage")
                await broker.publish("ch", pub(1), HISTORY)
                await events.wait(1)
    finally:
        await admin.aclose()

    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].exc_info, [r.getMessage() for r in errors]
    assert any("recovered after 60 failures" in r.getMessage() for r in caplog.records)


async def test_commands_after_a_restart_do_not_fail_on_stale_pooled_connections(server: RedisServer) -> None:
    # redis-py 8 used closed pooled connections as they were: after kill -9 and a restart,
    # every connection the pool held failed one publish with error 100 ("Connection closed by
    # server"), while /health was already 200 (tests/faults/pipeline/test_redis_faults.py).
    async with running(make_broker(server, Counter())) as broker:
        await asyncio.gather(*(broker.publish(f"ch{n}", pub(n), HISTORY) for n in range(8)))
        server.kill()
        await wait_until(lambda: not broker.healthy(), what="unhealthy after kill -9")
        server.spawn()
        await server.wait_up()
        await wait_until(broker.healthy, 20, "healthy after the restart")

        # Concurrent, as a gateway's commands are: every pooled connection is checked out.
        results = await asyncio.gather(
            *(broker.publish(f"ch{n}", pub(n), HISTORY) for n in range(8)), return_exceptions=True
        )

    assert [r for r in results if isinstance(r, BaseException)] == []
