"""A closed connection frees itself by reference counting: no reference cycle of its objects is
left for the garbage collector (gateway/gc_pauses.py freezes established connections, and a
frozen cycle is never collected).

A real gateway (memory engine) served in this process on a loopback port; each case runs N
connect → server-side subscription → publication delivered → close cycles through real sockets
(a blocking socket on a worker thread: an asyncio client would bring cycles of its own), with the
collector disabled, and then counts what ``gc.collect()`` finds unreachable (``DEBUG_SAVEALL``
keeps it for the failure message). Closes: the client's close handshake, a bare FIN, a reset,
the server's disconnect (server API), a slow reader dropped with 3008; transports: WebSocket
JSON and Protobuf, unidirectional WebSocket, SSE, unidirectional HTTP-streaming.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import socket
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from gateway.api.requests import DisconnectReason, DisconnectRequest
from gateway.app import build
from gateway.config.loading import load_settings
from gateway.node import Node
from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.framing import delimited
from tests.support.in_process import serving
from tests.support.procs import mint_token
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

SECRET = "cycles-secret-0123456789abcdef0123456789"
CYCLES = 20
MASK = b"\x01\x02\x03\x04"


class Gateway:
    def __init__(self, port: int, node: Node) -> None:
        self.port = port
        self.node = node


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    config = {
        "client": {"token": {"hmac_secret_key": SECRET}, "queue_max_size": 4096},
        "http_api": {"key": "cycles-key"},
        "sse": {"enabled": True},
        "uni_http_stream": {"enabled": True},
        "uni_websocket": {"enabled": True},
        "channel": {"without_namespace": {"history_size": 10, "history_ttl": "60s"}},
    }
    (tmp_path / "gw.json").write_text(json.dumps(config))
    settings, _ = load_settings(str(tmp_path / "gw.json"), {})
    served = build(settings)
    async with serving(settings, served) as port:
        yield Gateway(port, served.app.state.runtime.node)


# --- a blocking client (worker thread) ---------------------------------------------------------


def _exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("closed")
        data += chunk
    return data


def _frame(payload: bytes, opcode: int = 1) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode]) + (
        bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    )
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    b0, b1 = _exact(sock, 2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(_exact(sock, 2), "big")
    elif n == 127:
        n = int.from_bytes(_exact(sock, 8), "big")
    return b0 & 0x0F, _exact(sock, n)


def _head(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        head += _exact(sock, 1)
    return head


def _ws_open(port: int, path: str, protocol: str = "") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    extra = f"Sec-WebSocket-Protocol: {protocol}\r\n" if protocol else ""
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n".encode()
    )
    assert _head(sock).startswith(b"HTTP/1.1 101")
    return sock


def _read_until(sock: socket.socket, marker: bytes) -> None:
    seen = b""
    while marker not in seen:
        seen += sock.recv(65536) or b"<closed>"
        assert not seen.endswith(b"<closed>"), seen[-200:]


def _open(port: int, transport: str, token: str) -> socket.socket:
    """A connection whose server-side subscription is established."""
    if transport == "ws":
        sock = _ws_open(port, "/connection/websocket")
        sock.sendall(_frame(orjson.dumps({"id": 1, "connect": {"token": token}})))
        _read_until(sock, b'"subs"')
    elif transport == "protobuf":
        sock = _ws_open(port, "/connection/websocket", "centrifuge-protobuf")
        sock.sendall(_frame(delimited(pb.Command(id=1, connect=pb.ConnectRequest(token=token))), opcode=2))
        _read_until(sock, b"ch-")
    elif transport == "uni_ws":
        sock = _ws_open(port, "/connection/uni_websocket")
        sock.sendall(_frame(orjson.dumps({"token": token})))
        _read_until(sock, b"ch-")
    else:
        path, query = {
            "sse": ("/connection/sse", {"id": 1, "connect": {"token": token}}),
            "uni_http_stream": ("/connection/uni_http_stream", None),
        }[transport]
        sock = socket.create_connection(("127.0.0.1", port))
        if query is not None:
            request = f"GET {path}?cf_connect={quote(orjson.dumps(query).decode(), safe='')} HTTP/1.1\r\n"
            sock.sendall(f"{request}Host: gw\r\nAccept: text/event-stream\r\n\r\n".encode())
        else:
            body = orjson.dumps({"token": token})
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            )
        _read_until(sock, b"ch-")
    return sock


def _close(sock: socket.socket, transport: str, how: str) -> None:
    websocket = transport in ("ws", "protobuf", "uni_ws")
    if how == "close":  # the WebSocket close handshake
        sock.sendall(_frame(struct.pack("!H", 1000), opcode=8))
        while _read_frame(sock)[0] != 8:
            pass
    elif websocket and how in ("server", "slow"):  # the server's close frame, answered
        while _read_frame(sock)[0] != 8:
            pass
        sock.sendall(_frame(struct.pack("!H", 1000), opcode=8))
        while sock.recv(65536):
            pass
    elif how == "reset":  # SO_LINGER 0 turns close() into an RST
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif how == "server":  # a stream: the disconnect push ends the response (keep-alive follows)
        _read_until(sock, b"4000")
    sock.close()  # "fin": a bare FIN


# --- the cycles ---------------------------------------------------------------------------------


async def _cycle(gw: Gateway, transport: str, how: str, n: int) -> None:
    user, channel = f"u-{n}", f"ch-{n}"
    token = mint_token(SECRET, user, channels=[channel])
    sock = await asyncio.to_thread(_open, gw.port, transport, token)
    opts = gw.node.settings.channel_options(channel)
    assert opts is not None
    try:
        if how == "slow":  # a reader that stopped reading: pushes past queue_max_size drop it
            while gw.node.hub.clients:
                await gw.node.publish(channel, opts, orjson.dumps({"pad": "x" * 60_000}))
                await asyncio.sleep(0)
        else:
            await gw.node.publish(channel, opts, b'{"delivered":1}')
            await asyncio.to_thread(_read_until, sock, b"delivered")
            if how == "server":
                await gw.node.cluster.user_op(
                    DisconnectRequest(user=user, disconnect=DisconnectReason(code=4000, reason="bye"))
                )
        await asyncio.to_thread(_close, sock, transport, how)
    finally:
        sock.close()
    # The release steps run in the background.
    await wait_until(lambda: not gw.node.hub.clients and not gw.node.hub.channels, 10, "released")
    await gw.node.drain()
    for _ in range(3):
        await asyncio.sleep(0)  # the connection drops its parts one callback later


async def _unreachable(gw: Gateway, run: Callable[[int], Any], cycles: int) -> collections.Counter[str]:
    """What the collector finds unreachable after ``cycles`` runs: type name → count."""
    await run(-1)  # lazy imports, caches and pools settle first
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        gc.garbage.clear()
        for n in range(cycles):
            await run(n)
        gc.collect()
        return collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


CASES = [
    ("ws", "close"),
    ("ws", "fin"),
    ("ws", "reset"),
    ("ws", "server"),
    ("ws", "slow"),
    ("protobuf", "close"),
    ("uni_ws", "fin"),
    ("sse", "fin"),
    ("sse", "server"),
    ("uni_http_stream", "reset"),
]


@pytest.mark.parametrize(("transport", "how"), CASES)
async def test_a_closed_connection_leaves_no_reference_cycle(
    gateway: Gateway, transport: str, how: str
) -> None:
    left = await _unreachable(gateway, lambda n: _cycle(gateway, transport, how, n), CYCLES)
    total = sum(left.values())
    # ~0: an unrelated object of the loop may land in a cycle now and then, never one per close.
    assert total < CYCLES // 2, f"{total / CYCLES:.1f} objects per closed connection: {left.most_common(12)}"
