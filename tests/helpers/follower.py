"""What a browser tab does, over the raw protocol: connect to the gateway, take the user channel
from the connection token, read the snapshot from the Status API, keep the highest version per
task from both; on a lost connection (or a failed snapshot) start over after a short pause."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

import httpx
import jwt
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.support import mint_token, scaled

RECONNECT_PAUSE_SECONDS = 0.2  # client-js reconnects with backoff and jitter; a fixed pause here


@dataclass
class Endpoints:
    ws_url: str
    api_url: str
    hmac_secret: str
    user_secret: str


def user_token(user: str, secret: str) -> str:
    """A user JWT (``sub``, ``tenant``, 10 min ``exp``) for ``tenant/user``."""
    tenant, _, sub = user.partition("/")
    return jwt.encode({"sub": sub, "tenant": tenant, "exp": int(time.time()) + 600}, secret, "HS256")


class Follower:
    def __init__(self, endpoints: Endpoints, user: str) -> None:
        self.endpoints = endpoints
        self.user = user
        self.versions: dict[str, int] = {}
        self.connects = 0
        self.task = asyncio.create_task(self._run())

    def _merge(self, task_id: str, version: int) -> None:
        self.versions[task_id] = max(version, self.versions.get(task_id, 0))

    async def _run(self) -> None:
        channel = f"task_user:{self.user}"
        while True:
            with contextlib.suppress(ConnectionClosed, OSError, TimeoutError, httpx.HTTPError, ValueError):
                async with connect(self.endpoints.ws_url, open_timeout=scaled(10)) as ws:
                    token = mint_token(self.endpoints.hmac_secret, self.user, channels=[channel], exp_in=600)
                    await ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
                    self.connects += 1
                    snapshot = asyncio.create_task(self.snapshot())
                    async for frame in ws:
                        for line in str(frame).split("\n"):
                            msg = json.loads(line) if line.strip() else {}
                            data = msg.get("push", {}).get("pub", {}).get("data")
                            if isinstance(data, dict) and data.get("kind") == "task.summary":
                                self._merge(data["task"]["id"], int(data["task"]["version"]))
                    await snapshot
            await asyncio.sleep(RECONNECT_PAUSE_SECONDS)

    async def truth(self) -> dict[str, int]:
        """The user's tasks as the Status API has them now, ``{taskId: version}`` (not merged)."""
        headers = {"Authorization": f"Bearer {user_token(self.user, self.endpoints.user_secret)}"}
        async with httpx.AsyncClient(timeout=scaled(10), headers=headers) as http:
            reply = await http.get(f"{self.endpoints.api_url}/api/tasks", params={"limit": 100})
            reply.raise_for_status()
        return {t["id"]: int(t["version"]) for t in reply.json()["items"]}

    async def snapshot(self) -> None:
        """What the client does after (re)connecting: read the snapshot and merge it."""
        for task_id, version in (await self.truth()).items():
            self._merge(task_id, version)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
