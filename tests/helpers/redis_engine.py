"""Redis engine test helpers: engines under a unique key prefix, time travel by lowering key TTLs,
cleanup, and throwaway redis-server processes on free ports."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from redis.asyncio import Redis

from gateway.config.schema import RedisSettings
from gateway.engine.redis import build_shards
from gateway.engine.redis_broker import RedisBroker
from gateway.engine.redis_presence import RedisPresence
from tests.support import free_port as free_port  # re-exported for the suites importing it from here
from tests.support import scaled, wait_until


def unique_prefix() -> str:
    return f"tctest.{uuid.uuid4().hex[:12]}"


def settings(*addresses: str, prefix: str, io_timeout: float = 2.0, **options: object) -> RedisSettings:
    return RedisSettings(address=addresses, prefix=prefix, io_timeout=io_timeout, **options)  # type: ignore[arg-type]


def broker(config: RedisSettings, **options: object) -> RedisBroker:
    options.setdefault("probe_interval_seconds", 0.5)
    # Generous: a loaded machine can leave a healthy PUB/SUB connection unread for seconds, and a
    # needless rebuild loses the publications sent meanwhile. Tests of silence detection pass theirs.
    options.setdefault("probe_timeout_seconds", 10.0)
    options.setdefault("reconnect_backoff_seconds", (0.02, 0.2))
    return RedisBroker(build_shards(config), prefix=config.prefix, **options)  # type: ignore[arg-type]


def presence(config: RedisSettings, now: Callable[[], float]) -> RedisPresence:
    return RedisPresence(build_shards(config), prefix=config.prefix, ttl_seconds=60, now=now)


@contextlib.asynccontextmanager
async def running(engine: RedisBroker, *, ready: bool = True) -> AsyncIterator[RedisBroker]:
    """Run ``engine.run()`` in a task (cancelled and awaited afterwards), then close it."""
    task = asyncio.create_task(engine.run())
    try:
        if ready:
            await wait_until(engine.healthy, what="broker ready")
        yield engine
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await engine.close()


async def keys_of(admin: Redis, prefix: str) -> list[bytes]:
    return [key async for key in admin.scan_iter(match=f"{prefix}.*", count=500)]


def ttl_lowerer(admin: Redis, prefix: str) -> Callable[[float], Awaitable[None]]:
    """An advancer for ``TimeMachine``: every key under ``prefix`` with a TTL gets ``seconds``
    less of it (deleted when nothing is left), as if that much time had passed."""

    async def advance(seconds: float) -> None:
        lower = round(seconds * 1000)
        for key in await keys_of(admin, prefix):
            ttl = await admin.pttl(key)
            if ttl < 0:
                continue
            if ttl <= lower:
                await admin.delete(key)
            else:
                await admin.pexpire(key, ttl - lower)

    return advance


async def delete_prefix(admin: Redis, prefix: str) -> None:
    keys = await keys_of(admin, prefix)
    if keys:
        await admin.delete(*keys)


class RedisServer:
    """A throwaway redis-server (no persistence) on a free port in a temporary directory."""

    def __init__(self, port: int | None = None, *extra: str) -> None:
        self.port = port or free_port()
        self.extra = extra
        self.dir = Path(tempfile.mkdtemp(prefix="tc-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> RedisServer:
        self.spawn()
        await self.wait_up()
        return self

    def spawn(self) -> None:
        binary = shutil.which("redis-server") or "redis-server"
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*args, "--daemonize", "no", "--dir", str(self.dir), *self.extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def wait_up(self, within: float = 10.0) -> None:
        async with asyncio.timeout(scaled(within)):
            while True:
                client = Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
                try:
                    if await client.ping():
                        return
                except OSError:
                    pass
                except Exception:  # redis ConnectionError and friends while it boots
                    pass
                finally:
                    await client.aclose()
                await asyncio.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
