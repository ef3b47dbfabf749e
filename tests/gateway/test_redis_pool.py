"""Bursts of concurrent Redis commands larger than a client's connection pool queue for a free
connection instead of failing (a reconnect storm subscribes thousands of clients at once).
Covers the gateway engine's shards and the Status API / relay client (status_api.redis_client).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster

from gateway.config.schema import RedisSettings
from gateway.engine.base import HistoryOptions
from gateway.engine.redis import POOL_SIZE, build_shards
from gateway.protocol.messages import ClientInfo
from status_api import redis_client
from tests.helpers import redis_engine

BURST = 500
HISTORY = HistoryOptions(size=10, ttl_seconds=60, meta_ttl_seconds=600)


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[tuple[RedisSettings, Redis]]:
    prefix = redis_engine.unique_prefix()
    admin = Redis.from_url(redis_url)
    try:
        # A generous io_timeout and connect_timeout: the burst waits for connections (128 connects
        # at once on a loaded machine), it must not time out here.
        yield redis_engine.settings(redis_url, prefix=prefix, io_timeout=30.0, connect_timeout=30.0), admin
    finally:
        await redis_engine.delete_prefix(admin, prefix)
        await admin.aclose()


@pytest.mark.redis
async def test_a_burst_of_presence_adds_larger_than_the_pool_all_succeed(
    shared: tuple[RedisSettings, Redis],
) -> None:
    config, _ = shared
    assert BURST > 3 * POOL_SIZE
    presence = redis_engine.presence(config, now=lambda: 1000.0)
    try:
        results = await asyncio.gather(
            *(
                presence.add(f"ch{i % 50}", f"c{i}", ClientInfo(user=f"u{i}", client=f"c{i}"))
                for i in range(BURST)
            ),
            return_exceptions=True,
        )
        assert [r for r in results if r is not None] == []
        assert sum([len(await presence.presence(f"ch{i}")) for i in range(50)]) == BURST
    finally:
        await presence.close()


@pytest.mark.redis
async def test_a_burst_of_history_reads_larger_than_the_pool_all_succeed(
    shared: tuple[RedisSettings, Redis],
) -> None:
    config, _ = shared
    broker = redis_engine.broker(config)
    try:
        results = await asyncio.gather(
            *(broker.history(f"ch{i}", HISTORY) for i in range(BURST)), return_exceptions=True
        )
        assert [r for r in results if isinstance(r, BaseException)] == []
    finally:
        await broker.close()


@pytest.mark.redis
async def test_the_status_api_client_queues_a_burst_larger_than_its_pool(redis_url: str) -> None:
    assert BURST > 3 * redis_client.POOL_SIZE
    client = redis_client.client(redis_url, socket_timeout=30.0, socket_connect_timeout=30.0)
    name = redis_engine.unique_prefix()
    try:
        results = await asyncio.gather(
            *(client.publish(name, b"x") for _ in range(BURST)), return_exceptions=True
        )
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert client.connection_pool.max_connections == redis_client.POOL_SIZE
    finally:
        await client.aclose()


def test_every_client_kind_has_a_bounded_pool() -> None:
    # Built without connecting: the Sentinel master's pool waits for a free connection (the
    # gateway's shards queue in RedisShard.call, bounded by the same size).
    sentinel = redis_client.client("redis+sentinel://127.0.0.1:1?sentinel_master_name=m", socket_timeout=1.0)
    assert isinstance(sentinel.connection_pool, BlockingConnectionPool)
    assert sentinel.connection_pool.max_connections == redis_client.POOL_SIZE
    assert sentinel.connection_pool.timeout == 1.0
    plain = redis_client.client("unix:///nonexistent.sock")
    assert isinstance(plain.connection_pool, BlockingConnectionPool)
    shards = [
        *build_shards(RedisSettings(sentinel_address=("127.0.0.1:1",), sentinel_master_name="m")),
        *build_shards(RedisSettings(address=("unix:///nonexistent.sock",))),
    ]
    for shard in shards:
        assert isinstance(shard.client, Redis)
        assert shard.client.connection_pool.max_connections == POOL_SIZE
    cluster = build_shards(RedisSettings(cluster_address=("127.0.0.1:1",)))[0].client
    assert isinstance(cluster, RedisCluster)
    assert cluster.get_connection_kwargs()["max_connections"] == POOL_SIZE
