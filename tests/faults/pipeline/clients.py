"""A convergent test client for the fault scenarios: a raw protocol-v2 WebSocket client with
server-side subscriptions (the token's ``channels`` claim) that behaves as the seed (§8) asks a
real client to — and records everything in a ``ClientLog`` for the convergence checker.

* it keeps ``{epoch, offset}`` per channel and reconnects (bounded backoff) with
  ``connect.subs = {ch: {recover, epoch, offset}}`` whenever its connection drops;
* a subscribe reply with ``recovered=false`` (or a new epoch), an ``unsubscribe`` push (2500) or
  a 3010 disconnect makes it re-read the snapshot through ``snapshot(channel)`` (the test's window
  onto the database) — the "socket is a hint, the database is the truth" rule;
* publications go through the log's version gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from tests.helpers.convergence import ClientLog
from tests.support import mint_token, scaled

Snapshot = Callable[[str], Awaitable[Mapping[str, int]]]


class ConvergentClient:
    """Run with ``async with``; ``log`` holds what it saw; ``connects`` counts (re)connections."""

    def __init__(
        self,
        ws_url: str | Callable[[], str],
        secret: str,
        channels: list[str],
        *,
        name: str = "client",
        snapshot: Snapshot | None = None,
        user: str = "watcher",
    ) -> None:
        self.ws_url = ws_url
        self.secret = secret
        self.channels = channels
        self.user = user
        self.snapshot = snapshot
        self.log = ClientLog(name)
        self.connects = 0
        self.connected = asyncio.Event()
        self.close_codes: list[int | None] = []
        self._ws: Any = None
        self._task: asyncio.Task[None] | None = None
        self._resync: set[str] = set()

    async def __aenter__(self) -> ConvergentClient:
        self._task = asyncio.create_task(self._run())
        async with asyncio.timeout(scaled(15)):
            await self.connected.wait()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()

    async def drop(self) -> None:
        """Close the socket from the client side; the run loop reconnects with positions."""
        if self._ws is not None:
            await self._ws.close()

    def _url(self) -> str:
        return self.ws_url() if callable(self.ws_url) else self.ws_url

    async def _run(self) -> None:
        delay = 0.05
        while True:
            try:
                await self._session()
                delay = 0.05
            except (OSError, ConnectionClosed, InvalidHandshake, InvalidStatus, TimeoutError):
                pass
            self.connected.clear()
            await asyncio.sleep(delay)  # reconnect backoff, not synchronisation
            delay = min(delay * 2, 0.5)

    async def _session(self) -> None:
        token = mint_token(self.secret, self.user, exp_in=600, channels=self.channels)
        subs = {
            ch: {"recover": True, "epoch": epoch, "offset": offset}
            for ch, (epoch, offset) in self.log.position.items()
        }
        async with websockets.connect(self._url(), open_timeout=scaled(30), max_size=None) as ws:
            self._ws = ws
            await ws.send(json.dumps({"id": 1, "connect": {"token": token, "subs": subs}}))
            async with asyncio.timeout(scaled(10)):
                lines = [line for line in str(await ws.recv()).split("\n") if line.strip()]
            first = json.loads(lines[0])
            if "connect" not in first:
                return
            self.connects += 1
            for channel, reply in (first["connect"].get("subs") or {}).items():
                self._subscribed(channel, reply)
            self.connected.set()
            await self._resync_flagged()
            for line in lines[1:]:  # pushes batched into the reply's frame
                await self._on_message(ws, json.loads(line))
            try:
                async for frame in ws:
                    for line in str(frame).split("\n"):
                        if line.strip():
                            await self._on_message(ws, json.loads(line))
            finally:
                self.close_codes.append(ws.close_code)
                if ws.close_code == 3010:
                    for ch in self.channels:
                        self.log.flag(ch)
                        self._resync.add(ch)

    def _subscribed(self, channel: str, reply: Mapping[str, Any]) -> None:
        before = self.log.position.get(channel)
        was_recovering = bool(reply.get("was_recovering"))
        recovered = bool(reply.get("recovered"))
        self.log.subscribed(
            channel,
            epoch=str(reply.get("epoch", "")),
            offset=int(reply.get("offset") or 0),
            recovered=recovered,
            was_recovering=was_recovering,
            publications=reply.get("publications") or (),
        )
        if before is None or (was_recovering and not recovered) or before[0] != reply.get("epoch"):
            # subscribe-then-snapshot (seed §8): the first subscription, and every one that lost
            # its stream, is followed by a read of the authoritative state
            self._resync.add(channel)

    async def _resync_flagged(self) -> None:
        while self._resync and self.snapshot is not None:
            channel = self._resync.pop()
            self.log.snapshot(channel, await self.snapshot(channel))

    async def _on_message(self, ws: Any, msg: dict[str, Any]) -> None:
        if msg == {}:
            await ws.send("{}")  # pong
            return
        push = msg.get("push") or {}
        channel = push.get("channel", "")
        if "pub" in push:
            self.log.publication(channel, push["pub"])
        elif "unsubscribe" in push:
            self.log.flag(channel)
            self._resync.add(channel)
            await ws.close()  # reconnect: the server-side subscription comes back from the new stream
        elif "disconnect" in push:
            await ws.close()
