"""A protocol-level WebSocket test client: sends commands, collects replies and pushes, and
records the close code. No SDK logic: what the gateway sends is what the test sees."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import apply_mask

from tests.support import scaled


class Raw:
    """A protocol-level client: sends commands, collects replies and pushes.

    Like every SDK it answers the server's pings (``{}``) with a pong while it pumps, unless
    ``pong`` is false: a test outlives ``client.ping_interval + client.pong_timeout`` (33 s by
    default) on a loaded machine, and a client that never answers is rightly closed with 3012.
    Pings are still queued in ``messages``, so what the gateway sends is what the test sees."""

    def __init__(self, ws: ClientConnection, pong: bool = True) -> None:
        self.ws = ws
        self.pong = pong
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
                        message = json.loads(line)
                        if not message and self.pong:  # a ping (an empty reply, no id)
                            await self.ws.send("{}")
                        await self.messages.put(message)
        except ConnectionClosed as exc:
            self.closed.set_result(exc.rcvd.code if exc.rcvd else None)
        else:
            self.closed.set_result(self.ws.close_code)

    async def close_code(self, within: float = 10.0) -> int | None:
        async with asyncio.timeout(scaled(within)):
            return await self.closed

    async def wait_for(self, match: Callable[[dict[str, Any]], bool], within: float = 5.0) -> dict[str, Any]:
        """The first message ``match`` accepts. AssertionError at once when the connection closes
        first (with its close code: a wait for a reply on a closed connection is a refusal, not
        a slow server), or after ``within`` seconds (scaled)."""
        skipped: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(scaled(within)):
                while True:
                    if self.messages.empty() and self.closed.done():
                        raise AssertionError(
                            f"connection closed with {self.closed.result()} before the message; "
                            f"it sent {skipped[-5:]}"
                        )
                    get = asyncio.ensure_future(self.messages.get())
                    either: list[asyncio.Future[Any]] = [get, self.closed]
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                    if not get.done():
                        get.cancel()
                        continue
                    msg = get.result()
                    if match(msg):
                        return msg
                    skipped.append(msg)
        except TimeoutError:
            bound = scaled(within)
            raise AssertionError(f"no such message within {bound:g}s; it sent {skipped[-5:]}") from None

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        cmd_id = await self.send(method, params)
        return await self.wait_for(lambda m: m.get("id") == cmd_id)


class WireClient:
    """A WebSocket client at the byte level: it answers nothing on its own (no pong, no close
    reply), so a test decides what a peer does after the server's close frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.sent = 0
        """Bytes written after the handshake."""

    @classmethod
    async def open(cls, host: str, port: int, path: str = "/connection/websocket") -> WireClient:
        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    @staticmethod
    def frame(opcode: int, payload: bytes) -> bytes:
        """A masked client frame (RFC 6455 §5.2), FIN set."""
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        return head + mask + apply_mask(payload, mask)

    async def send(self, opcode: int, payload: bytes) -> None:
        data = self.frame(opcode, payload)
        self.writer.write(data)
        await self.writer.drain()
        self.sent += len(data)

    async def read_frame(self) -> tuple[int, bytes]:
        """The next server frame (opcode, payload); server frames are not masked."""
        b0, b1 = await self.reader.readexactly(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return b0 & 0x0F, await self.reader.readexactly(n)

    async def close_frame(self) -> tuple[int, bytes]:
        """Read up to the server's close frame: its (code, reason)."""
        while True:
            opcode, payload = await self.read_frame()
            if opcode == 0x8:
                return struct.unpack("!H", payload[:2])[0], payload[2:]

    def abort(self) -> None:
        self.writer.transport.abort()
