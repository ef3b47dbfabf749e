"""A cancelled background loop stops, even when its cancellation comes back as an error
(docs/architecture.md, Background loops).

Each test cancels a loop while it waits inside a call that never answers (a real Redis PUB/SUB
read, a real MariaDB behind a blackholing proxy, an event nobody sets) and whose client turns
the ``CancelledError`` into its own error, as a client library can (redis-py, SQLAlchemy,
httpx); the loop's failure boundary catches that error. The task must end within a bound —
before the fix each of them logged, backed off and tried again, forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis.exceptions
import sqlalchemy.exc
from redis.asyncio.connection import AbstractConnection

from gateway.cluster import Cluster
from gateway.engine.base import EngineError
from gateway.hub import Hub
from relay.claim import OutboxLeases, create_engine
from relay.config import build_config
from relay.publisher import HttpGatewayPublisher
from relay.relay import Relay
from relay.wake import RedisWakeListener
from status_api.reconciler import HealthReconciler
from tests.helpers.faultproxy import FaultProxy
from tests.helpers.redis_engine import broker, settings, unique_prefix
from tests.support import wait_until

T = TypeVar("T")
STOP_WITHIN = 5.0  # a stopped loop ends at once; the bound only limits how long a failure hangs


class Conversion:
    """Whether ``converted`` turns cancellations into errors; a failed test switches it off to
    stop the loop that would otherwise swallow every cancellation."""

    on = True


async def converted(call: Awaitable[T], error: Callable[[], Exception]) -> T:
    """``await call``, with a cancellation raised as ``error()`` instead (a client library's habit)."""
    try:
        return await call
    except asyncio.CancelledError:
        if Conversion.on:
            raise error() from None
        raise


@pytest.fixture(autouse=True)
def conversion() -> Iterator[None]:
    Conversion.on = True
    yield
    Conversion.on = True


async def assert_stops(task: asyncio.Task[Any]) -> None:
    task.cancel()
    try:
        await wait_until(task.done, within=STOP_WITHIN, what="the cancelled loop to stop")
    finally:
        if not task.done():  # a failed test leaves nothing running: the next cancel goes through
            Conversion.on = False
            while not task.done():  # the test's own event loop: its loops' children too
                for other in asyncio.all_tasks() - {asyncio.current_task()}:
                    other.cancel()
                await asyncio.wait({task}, timeout=0.1)
    assert task.cancelled()


# --- gateway ---------------------------------------------------------------------------------------


class HangingControlChannel:
    """The broker side the cluster talks to: every control publish hangs and a cancellation
    comes back as ``EngineError`` (what ``RedisShard.call`` raises for a lost connection)."""

    def __init__(self) -> None:
        self.calls = 0

    async def publish_control(self, data: bytes, *, node_id: str = "") -> None:
        self.calls += 1
        await converted(asyncio.Event().wait(), lambda: EngineError("redis: connection lost"))


async def test_the_cluster_heartbeats_stop_when_cancelled_inside_a_failing_publish() -> None:
    channel = HangingControlChannel()
    cluster = Cluster(uid="n1", broker=channel, hub=Hub(), clock=lambda: 0.0, info=dict)  # type: ignore[arg-type]
    task = asyncio.create_task(cluster.run())
    await wait_until(lambda: channel.calls >= 1, what="the first heartbeat")
    await assert_stops(task)


@pytest.mark.redis
async def test_the_redis_pubsub_listener_stops_when_cancelled_inside_a_read(redis_url: str) -> None:
    engine = broker(settings(redis_url, prefix=unique_prefix()))
    reads = 0

    def converting(make: Callable[[], AbstractConnection]) -> Callable[[], AbstractConnection]:
        def connection() -> AbstractConnection:
            conn = make()
            read = conn.read_response

            async def read_response(*args: Any, **kwargs: Any) -> Any:
                nonlocal reads
                reads += 1
                return await converted(
                    read(*args, **kwargs), lambda: redis.exceptions.ConnectionError("connection lost")
                )

            conn.read_response = read_response  # type: ignore[method-assign]
            return conn

        return connection

    for shard in engine.shards:
        shard.pubsub_connection = converting(shard.pubsub_connection)
    task = asyncio.create_task(engine.run())
    try:
        await wait_until(engine.healthy, what="the broker subscribed")
        await wait_until(lambda: reads >= 2, what="the listener waiting for a message")
        await assert_stops(task)
    finally:
        await engine.close()


# --- Status API -----------------------------------------------------------------------------------


class HangingReconciler(HealthReconciler):
    """The reconciler loop over a pass that hangs on the database and reports a cancellation as
    the driver's ``OperationalError``."""

    passes = 0

    async def run_once(self) -> int:
        self.passes += 1
        return await converted(asyncio.Event().wait(), lost_connection)  # type: ignore[arg-type]


def lost_connection() -> Exception:
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("Lost connection to server"))


async def test_the_reconciler_stops_when_cancelled_inside_a_failing_pass() -> None:
    reconciler = HangingReconciler(None, heartbeat_timeout_seconds=60, interval_seconds=0.01)  # type: ignore[arg-type]
    task = asyncio.create_task(reconciler.run(asyncio.Event()))
    await wait_until(lambda: reconciler.passes >= 1, what="the first pass")
    await assert_stops(task)


# --- relay ----------------------------------------------------------------------------------------


class ConvertingLeases(OutboxLeases):
    """Real leases on a real database, whose claims and stats report a cancellation as the
    driver's ``OperationalError``."""

    claims = 0
    stats_calls = 0

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[Any]:
        self.claims += 1
        return await converted(super().claim(limit, takeover=takeover, backlog=backlog), lost_connection)

    async def stats(self) -> dict[str, Any]:
        self.stats_calls += 1
        return await converted(super().stats(), lost_connection)


@pytest.fixture
async def deaf_database(mysql_url: str) -> AsyncIterator[str]:
    """The shared MariaDB behind a proxy that accepts and never answers (a hung server)."""
    url = sqlalchemy.make_url(mysql_url)
    proxy = await FaultProxy(url.host or "127.0.0.1", url.port or 3306).start()
    proxy.blackhole()
    try:
        yield url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    finally:
        await proxy.close()


@pytest.mark.mysql
async def test_the_relay_loops_stop_when_cancelled_inside_a_hung_database_call(deaf_database: str) -> None:
    cfg = build_config(
        {
            "database_url": deaf_database,
            "gateway_api_url": "http://127.0.0.1:9/api",
            "gateway_api_key": "k",
            "relay_id": "cancel-test",
            "concurrency": 2,
            "poll_interval_seconds": 0.01,
            "stats_interval_seconds": 0.01,
        }
    )
    engine = create_engine(cfg.database_url)
    leases = ConvertingLeases(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds)
    publisher = HttpGatewayPublisher(cfg.gateway_api_url, cfg.gateway_api_key, cfg.publish_timeout_seconds)
    relay = Relay(leases, publisher, cfg)
    task = asyncio.create_task(relay.run(asyncio.Event()))  # cancelled, never stopped
    try:
        in_database = lambda: leases.claims >= 2 and leases.stats_calls >= 1  # noqa: E731
        await wait_until(in_database, what="the loops in the database")
        await assert_stops(task)
    finally:
        await publisher.aclose()
        await engine.dispose()


class ConvertingWakeListener(RedisWakeListener):
    """The wake-up listener whose Redis subscription reports a cancellation as redis-py's
    ``ConnectionError``."""

    async def _listen(self, stop: asyncio.Event) -> None:
        await converted(super()._listen(stop), lambda: redis.exceptions.ConnectionError("connection lost"))


@pytest.mark.redis
async def test_the_relay_wake_listener_stops_when_cancelled_inside_a_read(redis_url: str) -> None:
    listener = ConvertingWakeListener(redis_url, f"{unique_prefix()}.wake", lambda: None)
    task = asyncio.create_task(listener.run(asyncio.Event()))  # cancelled, never stopped
    await wait_until(listener.subscribed.is_set, what="the listener subscribed")
    await assert_stops(task)
