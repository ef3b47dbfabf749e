"""``taskcast gateway --workers 2``: real processes on one port, on the memory engine (the
supervisor's shared engine) and on Redis. Connections are spread by the kernel; a scenario
connects enough clients that both workers hold some (checked in the server API ``info``, one
node per worker) and then asserts what every client saw, so at least one delivery or recovery
crossed workers. Also: a killed worker is restarted, SIGTERM stops them all."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.helpers.raw_client import Raw
from tests.support import GatewayProcess, mint_token, scaled, wait_until

SECRET = "workers-secret-0123456789abcdefghijklmn"
CLIENTS = 16
"""Clients per scenario: all on one of two workers has probability 2**-15 (and is retried)."""


def _config(engine: dict[str, Any]) -> dict[str, Any]:
    return {
        "client": {"token": {"hmac_secret_key": SECRET}},
        "channel": {
            "without_namespace": {
                "history_size": 100,
                "history_ttl": "300s",
                "force_recovery": True,
                "presence": True,
                "allow_subscribe_for_client": True,
                "allow_publish_for_client": True,
            }
        },
        **engine,
    }


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def engine(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {}
    from tests.helpers.redis_engine import unique_prefix

    url = request.getfixturevalue("redis_url")
    return {"engine": {"type": "redis", "redis": {"address": url, "prefix": unique_prefix()}}}


@pytest.fixture
def gateway(tmp_path: Path, engine: dict[str, Any]) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(_config(engine), tmp_path / "gw", workers=2).start()
    try:
        yield gw
    finally:
        gw.terminate()


async def _api(gw: GatewayProcess, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}, timeout=scaled(5)) as http:
        return dict((await http.post(f"{gw.api_url}/{method}", json=body)).json())


@contextlib.asynccontextmanager
async def _clients(gw: GatewayProcess, count: int) -> AsyncIterator[list[Raw]]:
    """``count`` connected clients (each pumping in a task owned here)."""
    async with contextlib.AsyncExitStack() as stack, asyncio.TaskGroup() as tg:
        raws: list[Raw] = []
        for n in range(count):
            ws = await stack.enter_async_context(connect(gw.ws_url))
            raw = Raw(ws)
            tg.create_task(raw.pump())
            reply = await raw.call("connect", {"token": mint_token(SECRET, f"u{n}")})
            assert "connect" in reply, reply
            raws.append(raw)
        try:
            yield raws
        finally:
            for raw in raws:
                await raw.ws.close()


async def _spread(gw: GatewayProcess, count: int) -> None:
    """Until every worker's node reports connected clients (heartbeats every few seconds)."""

    async def spread() -> bool:
        nodes = (await _api(gw, "info", {}))["result"]["nodes"]
        return (
            sum(1 for n in nodes if n["num_clients"] > 0) >= 2
            and sum(n["num_clients"] for n in nodes) >= count
        )

    await wait_until(spread, 30, "clients on both workers")


async def _pubs(raw: Raw, channel: str, count: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(count):
        msg = await raw.wait_for(
            lambda m: m.get("push", {}).get("channel") == channel and "pub" in m["push"], scaled(10)
        )
        out.append(msg["push"]["pub"])
    return out


async def test_a_publication_on_one_worker_reaches_subscribers_on_every_worker(
    gateway: GatewayProcess,
) -> None:
    async with _clients(gateway, CLIENTS + 1) as (publisher, *raws):
        for raw in raws:
            reply = await raw.call("subscribe", {"channel": "hot"})
            assert "subscribe" in reply, reply
        await _spread(gateway, CLIENTS)
        # A client publication (on the publisher's worker) and a server API one (any worker).
        assert "publish" in await publisher.call("publish", {"channel": "hot", "data": {"n": 1}})
        assert "result" in await _api(gateway, "publish", {"channel": "hot", "data": {"n": 2}})
        got = [await _pubs(raw, "hot", 2) for raw in raws]
    assert all([p["data"] for p in pubs] == [{"n": 1}, {"n": 2}] for pubs in got)
    assert len({tuple(p["offset"] for p in pubs) for pubs in got}) == 1  # one stream, one numbering


async def test_a_client_recovers_on_any_worker_with_the_same_offsets_and_epoch(
    gateway: GatewayProcess,
) -> None:
    async with _clients(gateway, 1) as (first,):
        sub = (await first.call("subscribe", {"channel": "rec", "recover": True}))["subscribe"]
    epoch, offset = sub["epoch"], sub.get("offset", 0)
    for n in range(3):
        await _api(gateway, "publish", {"channel": "rec", "data": {"n": n}})
    async with _clients(gateway, CLIENTS) as raws:
        replies = [
            (
                await raw.call(
                    "subscribe", {"channel": "rec", "recover": True, "epoch": epoch, "offset": offset}
                )
            )["subscribe"]
            for raw in raws
        ]
        await _spread(gateway, CLIENTS)
        presence = (await _api(gateway, "presence", {"channel": "rec"}))["result"]["presence"]
    for reply in replies:
        assert reply["recovered"] is True, reply
        assert reply["epoch"] == epoch
        assert [p["data"]["n"] for p in reply["publications"]] == [0, 1, 2]
        assert [p["offset"] for p in reply["publications"]] == [offset + 1, offset + 2, offset + 3]
    assert len(presence) == CLIENTS  # presence is the whole machine's, not one worker's


def _worker_pids(gw: GatewayProcess) -> dict[int, int]:
    """Latest pid of each worker index, from the supervisor's log."""
    pids: dict[int, int] = {}
    for index, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", gw.log_text()):
        pids[int(index)] = int(pid)
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_killed_worker_is_restarted_and_sigterm_stops_every_worker(gateway: GatewayProcess) -> None:
    before = _worker_pids(gateway)
    assert len(before) == 2
    uids = {n["uid"] for n in (await _api(gateway, "info", {}))["result"]["nodes"]}
    os.kill(before[0], 9)
    await wait_until(lambda: _worker_pids(gateway)[0] != before[0], 30, "worker 0 restarted")

    async def restarted_node() -> bool:
        nodes = (await _api(gateway, "info", {}))["result"]["nodes"]
        return any(n["name"].endswith(".w0") and n["uid"] not in uids for n in nodes)

    await wait_until(restarted_node, 30, "the restarted worker in info")
    gateway.send_sigterm()
    assert await gateway.wait_exit(30) == 0
    pids = [*before.values(), *_worker_pids(gateway).values()]
    await wait_until(lambda: not any(_alive(pid) for pid in pids), 30, "every worker exited")
