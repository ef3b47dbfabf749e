"""permessage-deflate on the bidirectional WebSocket (``websocket.compression``): against real
gateway processes, with the ``websockets`` client negotiating the extension, a client that does
not, and a byte-level client that reads RSV1 on the raw frames and sends a zip bomb.

What is proved: publications arrive intact through a real inflating client; messages of at most
``compression_min_size`` bytes go out uncompressed (RSV1 clear) and larger ones compressed (RSV1
set, inflating to the push); a client without the extension is served plain frames; a client
message that inflates past ``decompressed_message_size_limit`` closes that connection with 1009
(Centrifugo's code and reason) while the node keeps serving; compression off negotiates nothing.
The same holds on ``uni_websocket`` with its own ``compression`` options: each publication is
compressed once for every uni connection."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.frames import apply_mask

from tests.support import GatewayProcess, mint_token, scaled

SECRET = "deflate-secret-of-at-least-32-bytes-long"
MIN_SIZE = 256
WIRE_LIMIT = 8192
INFLATED_LIMIT = 65536
TEXT = 0x1
TAIL = b"\x00\x00\xff\xff"

CONFIG: dict[str, Any] = {
    "client": {"insecure": True, "token": {"hmac_secret_key": SECRET}},
    "channel": {"without_namespace": {"allow_subscribe_for_client": True}},
    "websocket": {
        "compression": True,
        "compression_min_size": MIN_SIZE,
        "message_size_limit": WIRE_LIMIT,
        "decompressed_message_size_limit": INFLATED_LIMIT,
    },
    "uni_websocket": {"enabled": True, "compression": True, "compression_min_size": MIN_SIZE},
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(CONFIG, tmp_path_factory.mktemp("ws-deflate")).start()
    try:
        yield gw
    finally:
        gw.terminate()


@pytest.fixture(scope="module")
def gw_off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {**CONFIG, "websocket": {**CONFIG["websocket"], "compression": False}}
    gw = GatewayProcess(config, tmp_path_factory.mktemp("ws-plain")).start()
    try:
        yield gw
    finally:
        gw.terminate()


@pytest.fixture(autouse=True)
async def abort_clients() -> AsyncIterator[None]:
    yield
    for client in FrameClient.opened:
        client.abort()
    FrameClient.opened.clear()


def inflate(payload: bytes) -> bytes:
    return zlib.decompressobj(wbits=-15).decompress(payload + TAIL)


def deflate(payload: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(payload) + c.flush(zlib.Z_SYNC_FLUSH)
    assert data.endswith(TAIL)
    return data[:-4]


async def publish(gw: GatewayProcess, channel: str, data: Any) -> None:
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        body = {"channel": channel, "data": data}
        resp = await http.post(f"{gw.api_url}/publish", headers={"X-API-Key": gw.api_key}, json=body)
    assert resp.status_code == 200 and "error" not in resp.json(), resp.text


class FrameClient:
    """A byte-level client that sees each frame's RSV1 bit, optionally offering permessage-deflate."""

    opened: ClassVar[list[FrameClient]] = []
    """Every client of the running test: aborted at its teardown, even when it fails."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str) -> None:
        self.reader, self.writer, self.head = reader, writer, head
        FrameClient.opened.append(self)

    @classmethod
    async def open(
        cls, gw: GatewayProcess, *, offer: str | None, path: str = "/connection/websocket"
    ) -> FrameClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        client = cls(reader, writer, "")  # registered: aborted at teardown even if the handshake fails
        key = base64.b64encode(os.urandom(16)).decode()
        extension = f"Sec-WebSocket-Extensions: {offer}\r\n" if offer else ""
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"{extension}\r\n".encode()
        )
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        assert head.startswith("HTTP/1.1 101"), head
        client.head = head.lower()
        return client

    async def send(self, payload: bytes, *, compressed: bool = False) -> None:
        data = deflate(payload) if compressed else payload
        n = len(data)
        first = 0x80 | TEXT | (0x40 if compressed else 0)
        if n < 126:
            head = struct.pack("!BB", first, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", first, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", first, 0x80 | 127, n)
        mask = os.urandom(4)
        self.writer.write(head + mask + apply_mask(data, mask))
        await self.writer.drain()

    async def frame(self) -> tuple[int, bool, bytes]:
        """(opcode, RSV1, payload as on the wire)."""
        async with asyncio.timeout(scaled(10)):
            b0, b1 = await self.reader.readexactly(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
            return b0 & 0x0F, bool(b0 & 0x40), await self.reader.readexactly(n)

    async def message(self) -> tuple[bool, dict[str, Any]]:
        """The next data message: (was it compressed, the decoded JSON)."""
        opcode, rsv1, payload = await self.frame()
        assert opcode == TEXT, (opcode, payload)
        return rsv1, json.loads(inflate(payload) if rsv1 else payload)

    async def subscribe(self, channel: str) -> None:
        await self.send(json.dumps({"id": 1, "connect": {}}).encode())
        _, reply = await self.message()
        assert "connect" in reply, reply
        await self.send(json.dumps({"id": 2, "subscribe": {"channel": channel}}).encode())
        _, reply = await self.message()
        assert reply.get("id") == 2 and "error" not in reply, reply

    def abort(self) -> None:
        self.writer.transport.abort()


def big(n: int) -> dict[str, Any]:
    return {"task": "t1", "status": "running", "log": "step done; " * n}


async def test_a_deflate_client_gets_large_messages_compressed_and_small_ones_plain(gw: GatewayProcess):
    client = await FrameClient.open(gw, offer="permessage-deflate; client_max_window_bits")
    assert "permessage-deflate" in client.head and "server_no_context_takeover" in client.head
    await client.subscribe("deflate-raw")
    await publish(gw, "deflate-raw", {"n": 1})
    rsv1, push = await client.message()
    assert not rsv1 and push["push"]["pub"]["data"] == {"n": 1}
    await publish(gw, "deflate-raw", big(100))
    _, rsv1, payload = await client.frame()
    assert rsv1 and len(payload) < 500  # ~1.1 kB of JSON, compressed
    assert json.loads(inflate(payload))["push"]["pub"]["data"] == big(100)
    client.abort()


@pytest.mark.parametrize("bits", [8, 10])
async def test_a_client_limiting_the_servers_window_gets_frames_it_can_inflate(gw: GatewayProcess, bits: int):
    client = await FrameClient.open(gw, offer=f"permessage-deflate; server_max_window_bits={bits}")
    # 8 bits (256 bytes): websockets declines the offer (zlib has no raw DEFLATE at that window).
    assert (f"server_max_window_bits={bits}" in client.head) == (bits > 8)
    await client.subscribe(f"deflate-window-{bits}")
    data = {"log": "".join(f"line {i} of the task log; " for i in range(200))}  # > 2 KiB, little repetition
    await publish(gw, f"deflate-window-{bits}", data)
    _, rsv1, payload = await client.frame()
    assert rsv1 == (bits > 8)
    raw = zlib.decompressobj(wbits=-bits).decompress(payload + TAIL) if rsv1 else payload
    assert json.loads(raw)["push"]["pub"]["data"] == data


async def test_every_connection_gets_the_same_compressed_frame(gw: GatewayProcess):
    clients = [await FrameClient.open(gw, offer="permessage-deflate") for _ in range(3)]
    for c in clients:
        await c.subscribe("deflate-shared")
    await publish(gw, "deflate-shared", big(50))
    frames = [await c.frame() for c in clients]
    assert all(rsv1 for _, rsv1, _ in frames)
    assert len({payload for _, _, payload in frames}) == 1
    for c in clients:
        c.abort()


async def test_the_websockets_client_with_deflate_receives_pushes_intact(gw: GatewayProcess):
    async with connect(gw.ws_url, compression="deflate", open_timeout=scaled(10)) as ws:
        assert ws.response is not None
        assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
        await ws.send(json.dumps({"id": 1, "connect": {}}))
        await ws.send(json.dumps({"id": 2, "subscribe": {"channel": "deflate-sdk"}}))
        replies: list[dict[str, Any]] = []
        async with asyncio.timeout(scaled(10)):
            while len(replies) < 2:
                replies += [json.loads(line) for line in str(await ws.recv()).splitlines()]
        assert [r["id"] for r in replies] == [1, 2]
        sent = [big(i) for i in (1, 200, 3, 400)]
        for data in sent:
            await publish(gw, "deflate-sdk", data)
        got: list[Any] = []
        async with asyncio.timeout(scaled(10)):
            while len(got) < len(sent):
                for line in str(await ws.recv()).splitlines():
                    got.append(json.loads(line)["push"]["pub"]["data"])
        assert got == sent
        # A compressed client message (the websockets client compresses what it sends) is served.
        await ws.send(json.dumps({"id": 3, "rpc": {"method": "nothing", "data": big(300)}}))
        async with asyncio.timeout(scaled(10)):
            reply = json.loads(str(await ws.recv()))
        assert reply["id"] == 3


async def test_a_client_without_the_extension_gets_plain_frames(gw: GatewayProcess):
    client = await FrameClient.open(gw, offer=None)
    assert "sec-websocket-extensions" not in client.head
    await client.subscribe("deflate-plain")
    await publish(gw, "deflate-plain", big(100))
    rsv1, push = await client.message()
    assert not rsv1 and push["push"]["pub"]["data"] == big(100)
    client.abort()
    async with connect(gw.ws_url, compression=None, open_timeout=scaled(10)) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {}}))
        async with asyncio.timeout(scaled(10)):
            assert json.loads(str(await ws.recv()))["id"] == 1


async def test_a_zip_bomb_is_refused_with_1009_and_the_node_keeps_serving(gw: GatewayProcess):
    watcher = await FrameClient.open(gw, offer="permessage-deflate")
    await watcher.subscribe("deflate-bomb")
    bomb = await FrameClient.open(gw, offer="permessage-deflate")
    await bomb.send(json.dumps({"id": 1, "connect": {}}).encode())
    await bomb.message()
    payload = b'{"id":2,"rpc":{"data":"' + b"0" * (4 << 20) + b'"}}'
    assert len(deflate(payload)) < WIRE_LIMIT  # 4 MiB inflated (64 times the limit) from a few kB
    await bomb.send(payload, compressed=True)
    opcode, _, close = await bomb.frame()
    assert opcode == 0x8
    assert struct.unpack("!H", close[:2])[0] == 1009
    assert close[2:] == b"message too big after decompression"
    bomb.abort()
    await publish(gw, "deflate-bomb", {"after": True})
    _, push = await watcher.message()
    assert push["push"]["pub"]["data"] == {"after": True}
    watcher.abort()


async def test_compressed_bytes_past_message_size_limit_close_with_1009(gw: GatewayProcess):
    client = await FrameClient.open(gw, offer="permessage-deflate")
    await client.send(json.dumps({"id": 1, "connect": {}}).encode())
    await client.message()
    incompressible = base64.b64encode(os.urandom(WIRE_LIMIT * 2))
    await client.send(b'{"id":2,"rpc":{"data":"' + incompressible + b'"}}', compressed=True)
    opcode, _, close = await client.frame()
    assert opcode == 0x8 and struct.unpack("!H", close[:2])[0] == 1009
    client.abort()


async def test_compression_off_negotiates_nothing(gw_off: GatewayProcess):
    client = await FrameClient.open(gw_off, offer="permessage-deflate; client_max_window_bits")
    assert "sec-websocket-extensions" not in client.head
    await client.subscribe("deflate-off")
    await publish(gw_off, "deflate-off", big(100))
    rsv1, push = await client.message()
    assert not rsv1 and push["push"]["pub"]["data"] == big(100)
    client.abort()


async def test_uni_websocket_compresses_large_pushes_once_for_every_connection(gw: GatewayProcess):
    path = "/connection/uni_websocket"
    uni = [await FrameClient.open(gw, offer="permessage-deflate", path=path) for _ in range(2)]
    plain = await FrameClient.open(gw, offer=None, path=path)
    assert all("permessage-deflate" in c.head for c in uni) and "sec-websocket-extensions" not in plain.head
    token = mint_token(SECRET, "u-uni", channels=["deflate-uni"])
    for c in (*uni, plain):
        await c.send(json.dumps({"token": token}).encode())
        rsv1, reply = await c.message()
        assert "deflate-uni" in reply["connect"]["subs"], reply
    await publish(gw, "deflate-uni", {"n": 1})
    for c in (*uni, plain):
        rsv1, push = await c.message()
        assert not rsv1 and push == {"channel": "deflate-uni", "pub": {"data": {"n": 1}}}
    await publish(gw, "deflate-uni", big(100))
    frames = [await c.frame() for c in uni]
    assert all(rsv1 for _, rsv1, _ in frames)
    assert len({payload for _, _, payload in frames}) == 1  # compressed once, shared
    assert json.loads(inflate(frames[0][2])) == {"channel": "deflate-uni", "pub": {"data": big(100)}}
    rsv1, push = await plain.message()
    assert not rsv1 and push["pub"]["data"] == big(100)
    for c in (*uni, plain):
        c.abort()
