"""A PUB/SUB connection that subscribes many channels again after a reconnect keeps its progress
on a slow Redis: SUBSCRIBEs go out in bounded batches while confirmations are read, each batch
within ``io_timeout``, instead of one deadline for the whole resubscribe (which, whenever Redis
read slower than the whole set could be sent within ``io_timeout``, aborted and restarted it
from zero forever). Runs on a throwaway redis-server reached over a unix socket (small kernel
buffers, so a Redis that is not reading blocks the sender quickly), slowed by SIGSTOP/SIGCONT.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.engine.redis_broker import RedisBroker
from tests.helpers import redis_engine
from tests.helpers.redis_engine import RedisServer, running
from tests.support import scaled, wait_until

CHANNELS = 10_000
GONE = 100
PADDING = "x" * 16  # ~550 KB of SUBSCRIBE arguments: twice what a unix socket buffers


@pytest.fixture
async def unix_redis() -> AsyncIterator[RedisServer]:
    server = RedisServer()
    path = server.dir / "redis.sock"
    server.extra = ("--unixsocket", str(path), "--unixsocketperm", "700")
    await server.start()
    try:
        yield server
    finally:
        server.stop()


async def _slow_redis(pid: int, stopped: float, running_for: float) -> None:
    """Let Redis run ``running_for`` seconds out of every ``stopped + running_for``."""
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(stopped)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(running_for)
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.redis
@pytest.mark.timeout(180)
async def test_a_large_resubscribe_completes_on_a_redis_slower_than_io_timeout(
    unix_redis: RedisServer,
) -> None:
    assert unix_redis.proc is not None
    url = f"unix://{unix_redis.dir / 'redis.sock'}"
    prefix = redis_engine.unique_prefix()
    admin = Redis.from_url(unix_redis.url)
    broker: RedisBroker = redis_engine.broker(
        redis_engine.settings(url, prefix=prefix, io_timeout=scaled(10.0)), probe_timeout_seconds=scaled(30.0)
    )
    try:
        async with running(broker):
            limit = asyncio.Semaphore(500)

            async def subscribe(i: int) -> None:
                async with limit:
                    await broker.subscribe(f"task:{i}:{PADDING}")

            await asyncio.gather(*(subscribe(i) for i in range(CHANNELS)))
            listener = broker._listeners[0]  # the test watches its reconnects
            connects = listener.connects

            # A stalled Redis blocks any send longer than this; each batch of a resubscribe fits
            # in the socket's buffer, the whole resubscribe does not.
            broker.shards[0].io_timeout = 0.1
            await admin.client_kill_filter(_type="pubsub")
            slow = asyncio.create_task(_slow_redis(unix_redis.proc.pid, stopped=0.2, running_for=0.002))
            try:
                # Channels left while the resubscribe runs are not subscribed again.
                await wait_until(lambda: listener.connects > connects, what="PUB/SUB reconnected")
                for i in range(CHANNELS - GONE, CHANNELS):
                    await broker.unsubscribe(f"task:{i}:{PADDING}")
                await wait_until(
                    lambda: listener.ready,
                    within=60.0,
                    what="every channel subscribed again",
                )
            finally:
                slow.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await slow
            assert listener.connects == connects + 1  # one resubscribe, never restarted
            subscribed = await admin.pubsub_channels(f"{prefix}.client.*")
            assert len(subscribed) == CHANNELS - GONE
    finally:
        await admin.aclose()
