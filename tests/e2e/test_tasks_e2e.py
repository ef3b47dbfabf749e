"""Worker events in → clients on BOTH gateway nodes see every task reach its final state with
the database's version (issue 8). The whole production topology from local processes: the demo
coordinator/workers report through nginx to the Status API; relays publish the outbox to the
gateways; WebSocket clients connected through nginx (round robin over both gateways) receive the
summaries; the truth is read back from the Status API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import jwt
import pytest
from websockets.asyncio.client import connect

from taskcast.demo import run_demo
from taskcast.dev.topology import Topology, topology_nodes
from tests.helpers.raw_client import Raw
from tests.support import mint_token, scaled, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.mysql]

USERS = ("e2e/alice", "e2e/bob", "e2e/carol")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


class Watcher:
    """One WebSocket client; remembers the highest summary version seen per task."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw
        self.versions: dict[str, int] = {}
        self.final: dict[str, str] = {}
        self.task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        while True:
            msg = await self.raw.messages.get()
            pub = msg.get("push", {}).get("pub")
            if not pub or not isinstance(pub.get("data"), dict) or pub["data"].get("kind") != "task.summary":
                continue
            task = pub["data"]["task"]
            version = int(task["version"])
            if version > self.versions.get(task["id"], 0):
                self.versions[task["id"]] = version
                self.final[task["id"]] = task["lifecycleStatus"]


async def _watch(topology: Topology, user: str) -> tuple[Watcher, Any]:
    ws = await connect(topology.public_ws_url)
    raw = Raw(ws)
    raw.task = asyncio.create_task(raw.pump())  # type: ignore[attr-defined]
    token = mint_token(topology.hmac_secret, user, channels=[f"task_user:{user}"], exp_in=600)
    reply = await raw.call("connect", {"token": token})
    assert f"task_user:{user}" in reply["connect"]["subs"], reply
    return Watcher(raw), ws


def _user_token(topology: Topology, user: str) -> str:
    tenant, name = user.split("/")
    claims = {"sub": name, "tenant": tenant, "exp": int(time.time()) + 600}
    return jwt.encode(claims, topology.user_secret, algorithm="HS256")


async def _truth(topology: Topology, user: str) -> dict[str, tuple[int, str]]:
    headers = {"Authorization": f"Bearer {_user_token(topology, user)}"}
    async with httpx.AsyncClient(base_url=topology.public_url, headers=headers, timeout=scaled(30)) as http:
        body = (await http.get("/api/tasks", params={"limit": 100})).json()
    return {t["id"]: (int(t["version"]), t["lifecycleStatus"]) for t in body["items"]}


async def test_clients_on_both_gateways_see_every_final_state_with_the_database_version(topology: Topology):
    watchers: dict[str, list[Watcher]] = {}
    sockets: list[Any] = []
    for user in USERS:
        for _ in range(2):
            watcher, ws = await _watch(topology, user)
            watchers.setdefault(user, []).append(watcher)
            sockets.append(ws)
    try:
        nodes = await topology_nodes(topology)
        assert all(node["num_clients"] > 0 for node in nodes), nodes

        result = await run_demo(
            topology.internal_url,
            topology.service_secret,
            tasks=7,
            speed=20.0,
            stale_after=2.0,
            reconcile_interval=1.0,
            users=USERS,
            interval=0.2,
        )
        assert not result.failures, result.failures

        truth = {user: await _truth(topology, user) for user in USERS}
        started = {user: [o[2] for o in result.outcomes if o[1] == user] for user in USERS}
        for user in USERS:
            assert set(started[user]) <= truth[user].keys()
            assert all(truth[user][task_id][1] in TERMINAL for task_id in started[user])

        def converged() -> bool:
            return all(
                watcher.versions.get(task_id) == truth[user][task_id][0]
                and watcher.final.get(task_id) == truth[user][task_id][1]
                for user in USERS
                for watcher in watchers[user]
                for task_id in started[user]
            )

        await wait_until(converged, 30, "clients to converge on the database state", every=0.1)
        for user in USERS:  # nobody sees another user's tasks
            others = {t for u in USERS if u != user for t in started[u]}
            for watcher in watchers[user]:
                assert not (watcher.versions.keys() & others)
    finally:
        for user_watchers in watchers.values():
            for watcher in user_watchers:
                watcher.task.cancel()
                watcher.raw.task.cancel()  # type: ignore[attr-defined]
        for ws in sockets:
            await ws.close()
