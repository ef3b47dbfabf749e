"""Several gateway processes on one Redis: cross-node delivery, moving clients that recover,
cluster-wide server API, and a Redis that restarts empty (a new epoch: recovered=false, never a
silent gap). Real processes, real Redis (issue 4)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.helpers.raw_client import Raw
from tests.helpers.redis_engine import RedisServer, unique_prefix
from tests.support import GatewayProcess, mint_token, scaled, wait_until

pytestmark = pytest.mark.redis

SECRET = "cluster-secret-0123456789abcdefghijklmn"


def _config(redis_address: str, prefix: str, **extra: Any) -> dict[str, Any]:
    return {
        "client": {"token": {"hmac_secret_key": SECRET}},
        "engine": {
            "type": "redis",
            "redis": {"address": redis_address, "prefix": prefix, "io_timeout": "1s"},
        },
        "channel": {
            "without_namespace": {
                "history_size": 100,
                "history_ttl": "300s",
                "force_recovery": True,
                "allow_subscribe_for_client": True,
            }
        },
        **extra,
    }


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., list[GatewayProcess]]]:
    started: list[GatewayProcess] = []

    def start(redis_address: str, count: int = 2) -> list[GatewayProcess]:
        prefix = unique_prefix()
        out = []
        for n in range(count):
            gw = GatewayProcess(_config(redis_address, prefix), tmp_path / f"node{n}").start()
            started.append(gw)
            out.append(gw)
        return out

    yield start
    for gw in started:
        gw.terminate()


async def _api(gw: GatewayProcess, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}, timeout=scaled(30)) as http:
        return (await http.post(f"{gw.api_url}/{method}", json=body)).json()


async def _client(ws: Any, user: str = "u") -> Raw:
    raw = Raw(ws)
    raw.task = asyncio.create_task(raw.pump())  # type: ignore[attr-defined]
    reply = await raw.call("connect", {"token": mint_token(SECRET, user)})
    assert "connect" in reply, reply
    return raw


async def _pub(raw: Raw) -> dict[str, Any]:
    msg = await raw.wait_for(lambda m: "pub" in m.get("push", {}))
    return msg["push"]["pub"]


async def test_publish_on_node_b_reaches_a_client_on_node_a(nodes, redis_url):
    a, b = nodes(redis_url)
    async with connect(a.ws_url) as ws:
        raw = await _client(ws)
        await raw.call("subscribe", {"channel": "x"})
        result = (await _api(b, "publish", {"channel": "x", "data": {"from": "b"}}))["result"]
        pub = await _pub(raw)
        assert pub["data"] == {"from": "b"} and pub["offset"] == result["offset"]


async def test_client_moving_from_a_to_b_recovers_what_it_missed(nodes, redis_url):
    a, b = nodes(redis_url)
    async with connect(a.ws_url) as ws:
        raw = await _client(ws)
        reply = (await raw.call("subscribe", {"channel": "move"}))["subscribe"]
        await _api(a, "publish", {"channel": "move", "data": 1})
        seen = await _pub(raw)
        epoch = reply["epoch"]
    for n in range(2, 5):  # published while the client is away
        await _api(a, "publish", {"channel": "move", "data": n})
    async with connect(b.ws_url) as ws:
        raw = await _client(ws)
        reply = (
            await raw.call(
                "subscribe", {"channel": "move", "recover": True, "offset": seen["offset"], "epoch": epoch}
            )
        )["subscribe"]
        assert reply["recovered"] is True
        assert [p["data"] for p in reply["publications"]] == [2, 3, 4]


async def test_server_api_actions_reach_connections_on_every_node(nodes, redis_url):
    a, b = nodes(redis_url)
    async with connect(a.ws_url) as ws:
        raw = await _client(ws, "alice")
        await raw.call("subscribe", {"channel": "seen"})

        async def two_nodes() -> bool:
            return len((await _api(b, "info", {}))["result"]["nodes"]) == 2

        await wait_until(two_nodes, within=10.0, what="both nodes registered")
        channels = (await _api(b, "channels", {}))["result"]["channels"]
        assert channels["seen"] == {"num_clients": 1}
        await _api(b, "disconnect", {"user": "alice", "disconnect": {"code": 4000, "reason": "moved"}})
        assert await raw.close_code() == 4000


async def test_redis_restart_without_persistence_gives_a_new_epoch_and_recovered_false(nodes, tmp_path):
    server = await RedisServer().start()
    try:
        (a,) = nodes(server.url, count=1)
        first = (await _api(a, "publish", {"channel": "e", "data": 1}))["result"]
        server.kill()

        async def unhealthy() -> bool:
            return not a.health_ok()

        await wait_until(unhealthy, within=10.0, what="health down")
        failed = await _api(a, "publish", {"channel": "e", "data": 2})
        assert failed["error"]["code"] == 100
        server.spawn()
        await server.wait_up()

        async def healthy() -> bool:
            return a.health_ok()

        await wait_until(healthy, within=20.0, what="health up")
        second = (await _api(a, "publish", {"channel": "e", "data": 3}))["result"]
        assert second["epoch"] != first["epoch"] and second["offset"] == 1
        async with connect(a.ws_url) as ws:
            raw = await _client(ws)
            reply = (
                await raw.call(
                    "subscribe",
                    {"channel": "e", "recover": True, "offset": first["offset"], "epoch": first["epoch"]},
                )
            )["subscribe"]
            assert reply.get("recovered", False) is False and reply["epoch"] == second["epoch"]
            await _api(a, "publish", {"channel": "e", "data": 4})
            assert (await _pub(raw))["data"] == 4
    finally:
        server.stop()


async def test_connections_survive_a_redis_outage_and_resubscribe_from_the_new_epoch(nodes, tmp_path):
    """The connection stays up; the subscription is told its stream is gone (2500: the SDK
    resubscribes with recovery, gets recovered=false from the new epoch) and receives again."""
    server = await RedisServer().start()
    try:
        (a,) = nodes(server.url, count=1)
        async with connect(a.ws_url) as ws:
            raw = await _client(ws)
            before = (await raw.call("subscribe", {"channel": "live"}))["subscribe"]
            server.kill()

            async def unhealthy() -> bool:
                return not a.health_ok()

            await wait_until(unhealthy, within=10.0, what="health down")
            server.spawn()
            await server.wait_up()
            push = await raw.wait_for(lambda m: "unsubscribe" in m.get("push", {}), within=20)
            assert push["push"]["unsubscribe"]["code"] == 2500
            again = (
                await raw.call(
                    "subscribe",
                    {
                        "channel": "live",
                        "recover": True,
                        "offset": before["offset"],
                        "epoch": before["epoch"],
                    },
                )
            )["subscribe"]
            assert again.get("recovered", False) is False and again["epoch"] != before["epoch"]
            await _api(a, "publish", {"channel": "live", "data": "back"})
            assert (await _pub(raw))["data"] == "back"
            assert not raw.closed.done()
    finally:
        server.stop()
