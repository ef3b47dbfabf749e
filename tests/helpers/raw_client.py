"""A protocol-level WebSocket test client: sends commands, collects replies and pushes, and
records the close code. No SDK logic: what the gateway sends is what the test sees."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from tests.support import scaled


class Raw:
    """A protocol-level client: sends commands, collects replies and pushes."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()

    async def send(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        await self.ws.send(json.dumps({"id": self.next_id, method: params}))
        return self.next_id

    async def pump(self) -> None:
        try:
            async for frame in self.ws:
                for line in str(frame).split("\n"):
                    if line.strip():
                        await self.messages.put(json.loads(line))
        except ConnectionClosed as exc:
            self.closed.set_result(exc.rcvd.code if exc.rcvd else None)
        else:
            self.closed.set_result(self.ws.close_code)

    async def close_code(self, within: float = 10.0) -> int | None:
        async with asyncio.timeout(scaled(within)):
            return await self.closed

    async def wait_for(self, match: Callable[[dict[str, Any]], bool], within: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(scaled(within)):
            while True:
                msg = await self.messages.get()
                if match(msg):
                    return msg

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        cmd_id = await self.send(method, params)
        return await self.wait_for(lambda m: m.get("id") == cmd_id)
