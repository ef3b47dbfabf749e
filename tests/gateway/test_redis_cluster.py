"""The gateway on a real Redis Cluster (three masters started here on free ports): publications,
history and recovery across channels whose keys live on different masters; two nodes share it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from websockets.asyncio.client import connect

from tests.helpers.raw_client import Raw
from tests.support import GatewayProcess, wait_until_blocking

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if not server or not cli:
        pytest.fail("redis-server/redis-cli missing: scripts/services.sh installs them")
    root = tmp_path_factory.mktemp("redis-cluster")
    ports = _cluster_ports(3)
    procs = []
    for port in ports:
        d = root / str(port)
        d.mkdir()
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes"]
        argv += ["--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no", "--dir", str(d)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for port in ports:
            _wait(lambda p=port: _client(p).ping())
        addresses = [f"127.0.0.1:{p}" for p in ports]
        create = [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=30)
        _wait(lambda: all(_cluster_ok(p) for p in ports))
        yield addresses
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def _cluster_ports(count: int) -> list[int]:
    """Ports whose cluster-bus port (port + 10000) is valid and free too."""
    import random
    import socket

    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(20000, 45000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        if port not in ports:
            ports.append(port)
    return ports


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)


def _cluster_ok(port: int) -> bool:
    info = _client(port).execute_command("CLUSTER INFO")
    if isinstance(info, dict):
        return bool(info.get("cluster_state") == "ok")
    return b"cluster_state:ok" in info


def _wait(check: Any, within: float = 15.0) -> None:
    """A redis-cluster node answering ``check`` (errors while it boots count as not yet)."""

    def ok() -> bool:
        try:
            return bool(check())
        except redis.RedisError:
            return False

    wait_until_blocking(ok, within=within, what="redis cluster ready")


def _gateway(tmp_path: Path, addresses: list[str], prefix: str) -> GatewayProcess:
    config = {
        "client": {"insecure": True},
        "engine": {"type": "redis", "redis": {"cluster_address": addresses, "prefix": prefix}},
        "channel": {
            "without_namespace": {
                "allow_subscribe_for_client": True,
                "history_size": 10,
                "history_ttl": "60s",
                "force_recovery": True,
            }
        },
    }
    return GatewayProcess(config, tmp_path).start()


async def test_publish_history_and_recovery_on_a_redis_cluster(cluster: list[str], tmp_path: Path) -> None:
    prefix = f"cl{time.monotonic_ns()}"
    a = _gateway(tmp_path / "a", cluster, prefix)
    b = _gateway(tmp_path / "b", cluster, prefix)
    channels = [f"ch{n}" for n in range(6)]  # spread over the masters' hash slots
    try:
        slots = {redis.RedisCluster(host="127.0.0.1", port=int(cluster[0].split(":")[1])).keyslot(f"{{{c}}}")
                 for c in channels}  # fmt: skip
        assert len(slots) > 1
        async with connect(a.ws_url) as ws, httpx.AsyncClient(headers={"X-API-Key": b.api_key}) as http:
            raw = Raw(ws)
            pump = asyncio.create_task(raw.pump())
            await raw.call("connect", {})
            positions = {}
            for channel in channels:
                positions[channel] = (await raw.call("subscribe", {"channel": channel}))["subscribe"]
            for channel in channels:
                reply = (
                    await http.post(f"{b.api_url}/publish", json={"channel": channel, "data": channel})
                ).json()
                assert reply["result"]["offset"] == 1
            got = set()
            for _ in channels:
                msg = await raw.wait_for(lambda m: "pub" in m.get("push", {}))
                got.add(msg["push"]["channel"])
            assert got == set(channels)
            pump.cancel()
        for channel in channels:  # missed while away, recovered on the other node
            await http_publish(b, channel, f"{channel}-2")
        async with connect(b.ws_url) as ws:
            raw = Raw(ws)
            pump = asyncio.create_task(raw.pump())
            await raw.call("connect", {})
            for channel in channels:
                sub = (
                    await raw.call(
                        "subscribe",
                        {
                            "channel": channel,
                            "recover": True,
                            "offset": 1,
                            "epoch": positions[channel]["epoch"],
                        },
                    )
                )["subscribe"]
                assert sub["recovered"] is True
                assert [p["data"] for p in sub["publications"]] == [f"{channel}-2"]
            pump.cancel()
    finally:
        a.terminate()
        b.terminate()


async def http_publish(gw: GatewayProcess, channel: str, data: Any) -> None:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
        reply = (await http.post(f"{gw.api_url}/publish", json={"channel": channel, "data": data})).json()
        assert "result" in reply, reply


@pytest.mark.parametrize("form", ["plain", "redis+cluster"])
async def test_a_cluster_node_address_is_used_as_a_cluster(
    cluster: list[str], tmp_path: Path, form: str
) -> None:
    """``engine.redis.address`` of ONE cluster node (``redis://host:port``, detected as Centrifugo's
    client does) or ``redis+cluster://host:port?addr=...``: keys in every master's slots work
    (a standalone client would get MOVED for most channels)."""
    first, *rest = cluster
    if form == "plain":
        address = f"redis://{first}"
    else:
        address = f"redis+cluster://{first}?" + "&".join(f"addr={a}" for a in rest)
    config = {
        "engine": {"type": "redis", "redis": {"address": [address], "prefix": f"cd{time.monotonic_ns()}"}},
        "channel": {"without_namespace": {"history_size": 10, "history_ttl": "60s"}},
    }
    gw = GatewayProcess(config, tmp_path / form).start()
    channels = [f"detect{n}" for n in range(8)]
    try:
        for channel in channels:
            await http_publish(gw, channel, channel)
        async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
            for channel in channels:
                reply = (
                    await http.post(f"{gw.api_url}/history", json={"channel": channel, "limit": -1})
                ).json()
                assert [p["data"] for p in reply["result"]["publications"]] == [channel]
    finally:
        gw.terminate()
