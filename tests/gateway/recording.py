"""In-process harness for the connection core: a recording transport and a real Node on the
memory engine (no sockets, no processes). Waits are on conditions, bounded by ``WAIT_SECONDS``
(scaled by TASKCAST_TEST_TIME_SCALE on a loaded machine)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.config.loading import load_settings
from gateway.config.schema import Settings
from gateway.connection.client import Client
from gateway.connection.factory import ClientFactory
from gateway.connection.tokens import TokenVerifier
from gateway.engine.base import Broker
from gateway.engine.memory import MemoryBroker, MemoryPresence
from gateway.hub import SharedPush
from gateway.metrics import Metrics
from gateway.node import VERSION, Node
from gateway.protocol import codes
from gateway.protocol.codec import JSON, Codec

WAIT_SECONDS = 5.0 * float(os.environ.get("TASKCAST_TEST_TIME_SCALE", "1"))

INSECURE = {
    "TASKCAST_CLIENT_INSECURE": "true",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_SIZE": "10",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_TTL": "60s",
}


class RecordingTransport:
    """A ``gateway.connection.client.Transport`` that records every write and the close."""

    def __init__(
        self, name: str = "websocket", *, unidirectional: bool = False, emulation: bool = False
    ) -> None:
        self.name = name
        self.unidirectional = unidirectional
        self.emulation = emulation
        self.writes: list[tuple[list[bytes], SharedPush | None]] = []
        self.closed: codes.Disconnect | None = None
        self.buffered = 0
        self._seen = 0
        self._changed = asyncio.Event()

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        self.writes.append((list(payloads), shared))
        self._changed.set()

    def buffered_bytes(self) -> int:
        return self.buffered

    def close(self, disconnect: codes.Disconnect) -> None:
        assert self.closed is None, "close called twice"
        self.closed = disconnect
        self._changed.set()

    def clear(self) -> None:
        """Forget what was written so far."""
        self.writes.clear()
        self._seen = 0

    def messages(self) -> list[dict[str, Any]]:
        return [orjson.loads(p) for payloads, _ in self.writes for p in payloads]

    async def next(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next message (after those already returned) that ``match`` accepts."""
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                msgs = self.messages()
                while self._seen < len(msgs):
                    msg = msgs[self._seen]
                    self._seen += 1
                    if match(msg):
                        return msg
                self._changed.clear()
                await self._changed.wait()

    async def reply(self, cmd_id: int) -> dict[str, Any]:
        return await self.next(lambda m: m.get("id") == cmd_id)

    async def push(self, key: str) -> dict[str, Any]:
        return (await self.next(lambda m: key in m.get("push", {})))["push"]

    async def closed_with(self) -> codes.Disconnect:
        async with asyncio.timeout(WAIT_SECONDS):
            while self.closed is None:
                self._changed.clear()
                await self._changed.wait()
        return self.closed


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition()`` holds (bounded)."""
    async with asyncio.timeout(WAIT_SECONDS):
        while not condition():  # noqa: ASYNC110  # polls in-process state that has no event
            await asyncio.sleep(0)


class Harness:
    """A node with its client factory."""

    def __init__(
        self, env: Mapping[str, str] | None = None, *, broker: Broker | None = None, codec: Codec = JSON
    ) -> None:
        settings, _ = load_settings(None, dict(env if env is not None else INSECURE))
        self.settings: Settings = settings
        self.broker = broker or MemoryBroker()
        self.node = Node(settings, self.broker, MemoryPresence(), Metrics(VERSION), name="test", codec=codec)
        verifier = TokenVerifier(settings.client.token)
        self.factory = ClientFactory(self.node, verifier=verifier, sub_verifier=verifier)

    def connect(self, transport: RecordingTransport | None = None) -> tuple[Client, RecordingTransport]:
        transport = transport or RecordingTransport()
        return self.factory.connect(transport), transport

    async def connected(self, frame: bytes = b'{"id":1,"connect":{}}') -> tuple[Client, RecordingTransport]:
        client, transport = self.connect()
        client.feed(frame)
        reply = await transport.reply(1)
        assert "connect" in reply, reply
        return client, transport

    async def subscribed(self, channel: str, **params: Any) -> tuple[Client, RecordingTransport]:
        client, transport = await self.connected()
        client.feed(orjson.dumps({"id": 2, "subscribe": {"channel": channel, **params}}))
        reply = await transport.reply(2)
        assert "subscribe" in reply, reply
        return client, transport
