"""The Status API's and the relay's wake-up hints over Redis Sentinel (status_api/redis_client.py):
real master, replica and three Sentinels (taskcast/dev/sentinel.py); the master is SIGKILLed,
the Sentinels promote the replica, and hints flow again through the same ``redis+sentinel://`` URL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.config import ConfigError as RelayConfigError
from relay.config import load_config as load_relay_config
from relay.wake import RedisWakeListener
from status_api import redis_client
from status_api.wake import RedisWakePublisher
from taskcast.dev.sentinel import RedisSentinel
from tests.support import scaled, wait_until

pytestmark = pytest.mark.timeout(scaled(180))


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[RedisSentinel]:
    group = RedisSentinel(tmp_path / "sentinel", down_after_ms=1000, failover_timeout_ms=3000)
    try:
        yield group.start(scaled(30))
    finally:
        group.stop()


async def test_hints_flow_through_sentinel_and_again_after_a_failover(sentinel: RedisSentinel) -> None:
    woken: list[float] = []
    stop = asyncio.Event()
    listener = RedisWakeListener(sentinel.url, "wake-test", lambda: woken.append(time.monotonic()))
    listening = asyncio.create_task(listener.run(stop))
    publisher = RedisWakePublisher(sentinel.url, "wake-test")
    try:
        await wait_until(listener.subscribed.is_set, 30, "listener subscribed through Sentinel")
        before = len(woken)
        publisher.notify(1)
        await wait_until(lambda: len(woken) > before, 10, "a hint through the first master")

        old = sentinel.master()
        sentinel.procs["redis-master"].kill()
        await wait_until(
            lambda: (m := sentinel.master()) is not None and m != old, 60, "the replica promoted"
        )
        after = len(woken)

        def hint_arrived() -> bool:
            publisher.notify(1)  # hints sent while the listener reconnects are lost: keep sending
            return len(woken) > after + 1

        await wait_until(hint_arrived, 60, "hints through the promoted master", every=0.1)
    finally:
        stop.set()
        await listening
        await publisher.aclose()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel://127.0.0.1:26379", "sentinel_master_name"),
        ("redis+sentinel://127.0.0.1:26379?sentinel_master_name=m&addr=nohost", "host:port"),
        ("redis+sentinel://127.0.0.1:26379/x?sentinel_master_name=m", "DB number"),
        ("redis+sentinel://127.0.0.1:26379?sentinel_master_name=m&bogus=1", "bogus"),
        ("http://127.0.0.1:6379", "must be a"),
    ],
)
def test_bad_urls_are_refused_with_the_reason_and_without_the_password(url: str, problem: str) -> None:
    with pytest.raises(redis_client.RedisUrlError, match=problem):
        redis_client.check(url.replace("://", "://u:hunter2@", 1))
    try:
        redis_client.check(url.replace("://", "://u:hunter2@", 1))
    except redis_client.RedisUrlError as exc:
        assert "hunter2" not in str(exc)


def test_relay_config_accepts_a_sentinel_url_and_refuses_a_broken_one(tmp_path: Path) -> None:
    good = "redis+sentinel://s1:26379?sentinel_master_name=taskcast&addr=s2:26379&addr=s3:26379"
    doc = tmp_path / "relay.yaml"
    doc.write_text(f'database_url: "sqlite+aiosqlite:///x.db"\ngateway_api_url: "http://gw/api"\n'
                   f'gateway_api_key: "k"\nwake_redis_url: "{good}"\n')  # fmt: skip
    assert load_relay_config(doc, {}).wake_redis_url == good
    doc.write_text(doc.read_text().replace("sentinel_master_name=taskcast&", ""))
    with pytest.raises(RelayConfigError, match="sentinel_master_name"):
        load_relay_config(doc, {})
