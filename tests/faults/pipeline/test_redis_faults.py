"""Redis faults under a gateway process on the Redis engine (issue 10), each checked with the
convergence checker over the client logs and the Redis streams:

* Redis kill -9 with AOF (``appendfsync always``): the epoch and history survive, clients recover
  with ``recovered=true``; without persistence: a new epoch, ``recovered=false``, clients re-read;
* a failover that lost the tail (the last stream entries and meta offset rolled back): a client
  whose position is past the top is told ``recovered=false`` — never a silent gap;
* the meta key evicted: the next publish mints a new epoch and subscribers are told;
* the proxy between the gateway and Redis stalling longer than ``io_timeout``: publishes fail fast
  with an error instead of hanging, and delivery heals when Redis answers again;
* a bad TTL config (``history_ttl`` > ``history_meta_ttl``) is refused at startup.

The "publisher" is the test itself through the server API (the relay's own faults are in
test_relay_faults.py); the database truth is the dict of the newest version per task it published.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from gateway.engine.redis_keys import RedisKeys
from tests.faults.pipeline.clients import ConvergentClient
from tests.faults.pipeline.conftest import SECRET, api, gateway_config
from tests.helpers.convergence import Checker, ClientLog, Streams
from tests.helpers.faultproxy import FaultProxy
from tests.helpers.redis_engine import RedisServer, unique_prefix
from tests.support import ROOT, GatewayProcess, scaled, wait_until

pytestmark = pytest.mark.redis

CHANNELS = ["task_user:t1/u1", "task_user:t1/u2"]
HEAL_SECONDS = 20.0


class Publisher:
    """Publishes full task states with versions through the server API; remembers the truth."""

    def __init__(self, gw: GatewayProcess) -> None:
        self.gw = gw
        self.truth: dict[str, dict[str, int]] = {ch: {} for ch in CHANNELS}

    async def publish(self, channel: str, task: str) -> dict[str, Any]:
        before = self.truth[channel].get(task, 0)
        version = before + 1
        body = {"channel": channel, "data": {"taskId": task, "version": version}}
        # Commit, then publish (the relay's order): a snapshot read while the publication is on
        # its way already holds the version. A refused publish is retried later with the same
        # version and idempotency key, as the relay retries an indefinite result.
        self.truth[channel][task] = version
        reply = await api(self.gw, "publish", {**body, "idempotency_key": f"{task}:{version}"})
        if "result" not in reply:
            self.truth[channel][task] = before
        return reply

    async def round(self, n: int = 1) -> None:
        for _ in range(n):
            for i, channel in enumerate(CHANNELS):
                for task in (f"a{i}", f"b{i}"):
                    reply = await self.publish(channel, task)
                    assert "result" in reply, (reply, self.gw.log_text()[-4000:])

    async def snapshot(self, channel: str) -> dict[str, int]:
        return dict(self.truth[channel])

    def expected(self) -> dict[tuple[str, str], int]:
        return {(ch, t): v for ch, tasks in self.truth.items() for t, v in tasks.items()}


def redis_engine(address: str, prefix: str) -> dict[str, Any]:
    return {"type": "redis", "redis": {"address": address, "prefix": prefix, "io_timeout": "1s"}}


async def _streams(url: str, prefix: str) -> Streams:
    admin = Redis.from_url(url)
    try:
        return await Streams.load(admin, prefix, CHANNELS)
    finally:
        await admin.aclose()


def _assert_converged(checker: Checker, logs: list[ClientLog], pub: Publisher) -> None:
    checker.assert_ok(logs, pub.expected())


@pytest.mark.parametrize("aof", [True, False], ids=["aof_always", "no_persistence"])
async def test_redis_kill_9_clients_recover_or_are_told_and_converge(
    gateways: Callable[..., GatewayProcess], aof: bool
) -> None:
    extra = ("--appendonly", "yes", "--appendfsync", "always") if aof else ()
    server = await RedisServer(None, *extra).start()
    prefix = unique_prefix()
    try:
        gw = gateways(**redis_engine(server.url, prefix))
        pub = Publisher(gw)
        await pub.round(3)
        before = await _streams(server.url, prefix)
        async with ConvergentClient(gw.ws_url, SECRET, CHANNELS, snapshot=pub.snapshot) as client:
            await Checker().wait_converged([client.log], pub.expected(), within=HEAL_SECONDS)
            server.kill()  # SIGKILL
            await wait_until(lambda: not gw.health_ok(), 15, "gateway unhealthy")
            server.spawn()
            await server.wait_up()
            await wait_until(gw.health_ok, HEAL_SECONDS, "gateway healthy again")
            await pub.round(2)
            healed = await Checker().wait_converged([client.log], pub.expected(), within=HEAL_SECONDS)
            after = await _streams(server.url, prefix)
            _assert_converged(Checker(streams=after), [client.log], pub)
        epochs_before = {ch: (before.meta[ch] or ("", 0))[0] for ch in CHANNELS}
        same_epoch = all(epochs_before[ch] == (after.meta[ch] or ("", 0))[0] for ch in CHANNELS)
        if aof:
            assert same_epoch, (before.meta, after.meta)
            assert client.log.unrecovered == 0
            assert client.log.snapshots == len(CHANNELS), "only the initial subscribe-then-snapshot"
        else:
            assert not same_epoch
            assert client.log.snapshots >= 1, "the client never re-read after losing its stream"
        print(f"aof={aof}: healed {healed:.2f}s, resyncs={client.log.snapshots}")
    finally:
        server.stop()


async def _lose_tail(url: str, prefix: str, channel: str, entries: int) -> None:
    """What an asynchronous replica promoted by a failover looks like: the last ``entries`` of the
    stream and the meta's top offset are gone, the epoch is the same (reliability-notes §1.2)."""
    keys = RedisKeys(prefix)
    admin = Redis.from_url(url)
    try:
        kept: list[Any] = list(await admin.xrange(keys.stream(channel)) or [])[:-entries]
        ttl = await admin.pttl(keys.stream(channel))
        # rebuilt, not XDEL'ed: the replica never saw those ids, so its last id is the kept top
        await admin.delete(keys.stream(channel))
        for entry_id, fields in kept:
            await admin.xadd(keys.stream(channel), fields, id=entry_id)
        await admin.pexpire(keys.stream(channel), ttl)
        await admin.hincrby(keys.meta(channel), "s", -entries)
    finally:
        await admin.aclose()


async def test_failover_that_lost_the_tail_is_never_a_silent_gap(
    gateways: Callable[..., GatewayProcess], redis_url: str
) -> None:
    prefix = unique_prefix()
    gw = gateways(**redis_engine(redis_url, prefix))
    pub = Publisher(gw)
    await pub.round(2)
    target = {"url": gw.ws_url}
    async with ConvergentClient(lambda: target["url"], SECRET, CHANNELS, snapshot=pub.snapshot) as client:
        await pub.round(1)
        await Checker().wait_converged([client.log], pub.expected(), within=HEAL_SECONDS)
        target["url"] = "ws://127.0.0.1:9/"  # the client is away (its reconnects fail) during the failover
        await client.drop()
        await wait_until(lambda: not client.connected.is_set(), 10, "client away")
        await _lose_tail(redis_url, prefix, CHANNELS[0], 2)
        target["url"] = gw.ws_url  # back, asking to recover from an offset past the stream's top
        await wait_until(client.connected.is_set, HEAL_SECONDS, "client back")
        await pub.round(1)
        healed = await Checker().wait_converged([client.log], pub.expected(), within=HEAL_SECONDS)
        _assert_converged(Checker(), [client.log], pub)
    assert client.log.unrecovered >= 1, "a position past the top in the same epoch must not recover"
    print(f"healed {healed:.2f}s, unrecovered={client.log.unrecovered}")


async def test_meta_key_evicted_gives_a_new_epoch_that_subscribers_are_told_about(
    gateways: Callable[..., GatewayProcess], redis_url: str
) -> None:
    prefix = unique_prefix()
    gw = gateways(**redis_engine(redis_url, prefix))
    pub = Publisher(gw)
    await pub.round(2)
    async with (
        ConvergentClient(gw.ws_url, SECRET, CHANNELS, snapshot=pub.snapshot, name="stayed") as stayed,
        ConvergentClient(gw.ws_url, SECRET, CHANNELS, snapshot=pub.snapshot, name="away") as away,
    ):
        await Checker().wait_converged([stayed.log, away.log], pub.expected(), within=HEAL_SECONDS)
        first_epoch = stayed.log.position[CHANNELS[0]][0]
        await away.drop()
        admin = Redis.from_url(redis_url)
        try:
            await admin.delete(RedisKeys(prefix).meta(CHANNELS[0]))  # maxmemory eviction
        finally:
            await admin.aclose()
        await pub.round(2)
        healed = await Checker().wait_converged([stayed.log, away.log], pub.expected(), within=HEAL_SECONDS)
        _assert_converged(Checker(streams=await _streams(redis_url, prefix)), [stayed.log, away.log], pub)
    for log in (stayed.log, away.log):
        assert log.position[CHANNELS[0]][0] != first_epoch
        assert log.snapshots >= 1, f"{log.name} was not told its stream is new"
    print(f"healed {healed:.2f}s")


async def test_stalled_redis_link_fails_publishes_fast_and_heals(
    gateways: Callable[..., GatewayProcess], redis_url: str
) -> None:
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    prefix = unique_prefix()
    async with FaultProxy(host, int(port)) as proxy:
        # started in a thread: its readiness wait blocks, and the proxy runs on this event loop
        gw = await asyncio.to_thread(gateways, **redis_engine(f"redis://{proxy.address}/0", prefix))
        pub = Publisher(gw)
        await pub.round(1)
        async with ConvergentClient(gw.ws_url, SECRET, CHANNELS, snapshot=pub.snapshot) as client:
            await Checker().wait_converged([client.log], pub.expected(), within=HEAL_SECONDS)
            proxy.stall()
            started = time.monotonic()
            reply = await pub.publish(CHANNELS[0], "a0")
            assert "error" in reply, reply  # an engine error, not a hang
            assert time.monotonic() - started < scaled(5)
            proxy.pass_through()
            await wait_until(gw.health_ok, HEAL_SECONDS, "gateway healthy again")
            await pub.round(2)
            healed = await Checker().wait_converged([client.log], pub.expected(), within=HEAL_SECONDS)
            _assert_converged(Checker(streams=await _streams(redis_url, prefix)), [client.log], pub)
    print(f"healed {healed:.2f}s")


async def test_redis_outage_is_logged_once_per_state_change_not_per_publish(
    gateways: Callable[..., GatewayProcess],
) -> None:
    """Issue 13, defect 6: every failed publish during an outage logged a traceback (~3,300 in
    3 s while the relay retried). Now the log tells the outage once, and its end with a count."""
    server = await RedisServer(None).start()
    try:
        gw = gateways(**redis_engine(server.url, unique_prefix()))
        pub = Publisher(gw)
        await pub.round(1)
        server.kill()
        await wait_until(lambda: not gw.health_ok(), 15, "gateway unhealthy")
        async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}, timeout=scaled(30)) as http:
            for n in range(200):  # a relay retrying through the outage
                body = {"channel": CHANNELS[0], "data": {"taskId": "a0", "version": 100 + n}}
                reply = (await http.post(f"{gw.api_url}/publish", json=body)).json()
                assert reply["error"]["code"] == 100, reply
        server.spawn()
        await server.wait_up()
        await wait_until(gw.health_ok, HEAL_SECONDS, "gateway healthy again")
        await pub.round(1)
    finally:
        server.stop()

    log = gw.log_text()
    engine_lines = [line for line in log.splitlines() if "gateway.engine" in line]
    assert "Traceback" not in log, log[-3000:]
    assert len(engine_lines) <= 8, "\n".join(engine_lines)
    assert any("(broker): failing" in line for line in engine_lines), engine_lines
    assert any("(broker): recovered after" in line for line in engine_lines), engine_lines


def test_history_ttl_longer_than_meta_ttl_is_refused_at_startup(tmp_path: Path) -> None:
    cfg = gateway_config()
    cfg["channel"]["history_meta_ttl"] = "60s"
    cfg["channel"]["namespaces"][0]["history_ttl"] = "600s"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    done = subprocess.run(
        [sys.executable, "-m", "taskcast", "gateway", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "history_ttl" in done.stderr + done.stdout and "history_meta_ttl" in done.stderr + done.stdout
