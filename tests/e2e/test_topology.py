"""The local production topology works as one system behind nginx."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect

from taskcast.dev.topology import Topology, topology_nodes
from tests.helpers.raw_client import Raw
from tests.support import mint_token, scaled

pytestmark = [pytest.mark.redis, pytest.mark.mysql]


async def _connected(topology: Topology, user: str) -> tuple[Raw, object]:
    ws = await connect(topology.public_ws_url)
    raw = Raw(ws)
    task = asyncio.create_task(raw.pump())
    reply = await raw.call("connect", {"token": mint_token(topology.hmac_secret, user)})
    assert "connect" in reply, reply
    return raw, (ws, task)


async def test_every_process_is_healthy_and_reachable_through_nginx(topology: Topology):
    assert all(proc.running for proc in topology.procs.values())
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        assert (await http.get(f"{topology.internal_url}/readyz")).status_code == 200
        info = await http.post(
            f"{topology.internal_api_url}/info", json={}, headers={"X-API-Key": topology.api_key}
        )
        assert info.status_code == 200


async def test_publications_reach_clients_on_both_gateways_through_the_balancer(topology: Topology):
    clients = [await _connected(topology, f"user{n}") for n in range(6)]
    try:
        for raw, _ in clients:
            await raw.call("subscribe", {"channel": "task_system:public"})
        async with httpx.AsyncClient(timeout=scaled(30), headers={"X-API-Key": topology.api_key}) as http:
            nodes = await topology_nodes(topology)
            assert {n["name"] for n in nodes} == {"gateway1", "gateway2"}
            result = await http.post(
                f"{topology.internal_api_url}/publish",
                json={"channel": "task_system:public", "data": {"hi": 1}},
            )
            assert "result" in result.json(), result.text
        for raw, _ in clients:
            msg = await raw.wait_for(lambda m: "pub" in m.get("push", {}))
            assert msg["push"]["pub"]["data"] == {"hi": 1}
        channels = None
        async with httpx.AsyncClient(timeout=scaled(30), headers={"X-API-Key": topology.api_key}) as http:
            channels = (await http.post(f"{topology.internal_api_url}/channels", json={})).json()["result"]
        assert channels["channels"]["task_system:public"]["num_clients"] == 6
    finally:
        for _, (ws, task) in clients:
            task.cancel()  # type: ignore[attr-defined]
            await ws.close()  # type: ignore[attr-defined]
    assert json.dumps(channels)
