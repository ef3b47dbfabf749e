"""Shared pieces of the end-to-end and storm benchmarks (``bench_e2e.py``, ``bench_storm.py``).

* :class:`WSConn` — a minimal Centrifugo-protocol WebSocket client on a raw asyncio protocol (no
  library: handshake, unmasked-server / zero-masked-client text frames, close, ping/pong). Costs a
  few µs per message, so one uvloop process holds thousands of clients without becoming the
  bottleneck on a 2-core machine. Answers the protocol ping (``{}``) and remembers, per channel, the
  last offset/epoch seen (for recovery).
* :class:`HTTPPool` — keep-alive HTTP/1.1 requests over a fixed number of raw connections.
* :func:`connect_with_backoff` — the SDK's reconnect policy: an initial jitter, then on 503 the
  server's ``Retry-After`` with jitter, else exponential backoff with full jitter.
* token minting (HS256 with PyJWT), percentiles, markdown section writer.

Everything targets 127.0.0.1 and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import jwt
import orjson

HOST = "127.0.0.1"
Push = Callable[["WSConn", str, dict[str, Any]], None]


def now_ms() -> float:
    return time.time() * 1000.0


def mint(secret: str, sub: str, ttl: float = 3600, **claims: Any) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time() + ttl), **claims}, secret, algorithm="HS256")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Refused(Exception):
    """The handshake was answered with a non-101 status (503 carries ``retry_after``)."""

    def __init__(self, status: int, retry_after: float) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


class WSConn(asyncio.Protocol):
    """One Centrifugo JSON-protocol WebSocket connection."""

    def __init__(self, on_push: Push | None = None) -> None:
        self.on_push = on_push
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.handshake: asyncio.Future[tuple[int, float]] = asyncio.get_running_loop().create_future()
        self.upgraded = False
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.positions: dict[str, tuple[int, str]] = {}
        self.received = 0
        self.user = ""

    # --- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(ConnectionError("closed during handshake"))
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection lost"))
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.upgraded:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            del self.buf[: end + 4]
            status = int(head[9:12])
            retry = 0.0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "retry-after":
                    with contextlib.suppress(ValueError):
                        retry = float(value.strip())
            if status == 101:
                self.upgraded = True
            if not self.handshake.done():
                self.handshake.set_result((status, retry))
            if status != 101:
                self.abort()
                return
        self._frames()

    def _frames(self) -> None:
        buf = self.buf
        while len(buf) >= 2:
            opcode = buf[0] & 0x0F
            length = buf[1] & 0x7F
            pos = 2
            if length == 126:
                if len(buf) < 4:
                    return
                length = int.from_bytes(buf[2:4], "big")
                pos = 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length = int.from_bytes(buf[2:10], "big")
                pos = 10
            if len(buf) < pos + length:
                return
            payload = bytes(buf[pos : pos + length])
            del buf[: pos + length]
            if opcode == 1:
                self._text(payload)
            elif opcode == 9:
                self._write_frame(0xA, payload)
            elif opcode == 8:
                self.abort()
                return

    def _text(self, payload: bytes) -> None:
        for line in payload.split(b"\n"):
            if not line:
                continue
            msg = orjson.loads(line)
            if not msg:  # protocol ping
                self.send_raw(b"{}")
                continue
            cmd_id = msg.get("id")
            if cmd_id:
                fut = self.pending.pop(cmd_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                continue
            push = msg.get("push")
            if push is None:
                continue
            pub = push.get("pub")
            if pub is not None:
                channel = push.get("channel", "")
                self.received += 1
                offset = pub.get("offset")
                if offset is not None and channel in self.positions:
                    self.positions[channel] = (int(offset), self.positions[channel][1])
                if self.on_push is not None:
                    self.on_push(self, channel, pub)

    # --- sending ----------------------------------------------------------------------------------
    def _write_frame(self, opcode: int, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        n = len(data)
        if n < 126:
            head = bytes((0x80 | opcode, 0x80 | n))
        elif n < 65536:
            head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
        else:
            head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
        self.transport.write(head + b"\0\0\0\0" + data)  # a zero mask key leaves the payload as is

    def send_raw(self, data: bytes) -> None:
        self._write_frame(1, data)

    async def call(self, commands: list[tuple[str, dict[str, Any]]], wait_s: float) -> list[dict[str, Any]]:
        """Sends the commands in ONE frame (as centrifuge-js does) and waits for every reply."""
        loop = asyncio.get_running_loop()
        futs, lines = [], []
        for method, params in commands:
            self.next_id += 1
            fut: asyncio.Future[dict[str, Any]] = loop.create_future()
            self.pending[self.next_id] = fut
            futs.append(fut)
            lines.append(orjson.dumps({"id": self.next_id, method: params}))
        self.send_raw(b"\n".join(lines))
        async with asyncio.timeout(wait_s):
            return list(await asyncio.gather(*futs))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def ws_open(port: int, on_push: Push | None, wait_s: float = 10.0) -> WSConn:
    """TCP connect + WebSocket handshake; :class:`Refused` on a non-101 answer."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(wait_s):
        _, conn = await loop.create_connection(lambda: WSConn(on_push), HOST, port)
        key = base64.b64encode(os.urandom(16)).decode()
        assert conn.transport is not None
        conn.transport.write(
            f"GET /connection/websocket HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        status, retry = await conn.handshake
    if status != 101:
        raise Refused(status, retry)
    return conn


class Stats:
    """Counters of one client fleet's connect attempts."""

    def __init__(self) -> None:
        self.refused_503 = 0
        self.errors = 0
        self.attempts = 0


async def connect_with_backoff(
    port_of: Callable[[int], int],
    connect_params: dict[str, Any],
    on_push: Push | None,
    deadline: float,
    stats: Stats,
    *,
    initial_jitter: float = 0.0,
    min_delay: float = 0.2,
    max_delay: float = 5.0,
) -> tuple[WSConn, dict[str, Any]]:
    """Connects (handshake + ``connect`` command) until it works or ``deadline`` (monotonic) passes.

    The SDK's policy: wait ``uniform(0, initial_jitter)`` first; after a 503 wait the server's
    ``Retry-After`` scaled by ``uniform(0.5, 1.5)``; after other failures exponential backoff with full
    jitter. ``port_of(attempt)`` picks the node (round robin, as a load balancer would)."""
    if initial_jitter > 0:
        await asyncio.sleep(random.uniform(0, initial_jitter))
    attempt = 0
    while True:
        stats.attempts += 1
        try:
            conn = await ws_open(port_of(attempt), on_push, wait_s=max(0.5, deadline - time.monotonic()))
            reply = (await conn.call([("connect", connect_params)], wait_s=10.0))[0]
            if "error" in reply:
                conn.abort()
                raise RuntimeError(f"connect error {reply['error']}")
            return conn, reply["connect"]
        except Refused as exc:
            stats.refused_503 += exc.status == 503
            delay = (exc.retry_after or 1.0) * random.uniform(0.5, 1.5)
        except (OSError, TimeoutError, RuntimeError):
            stats.errors += 1
            delay = random.uniform(0, min(max_delay, min_delay * 2**attempt))
        attempt += 1
        if time.monotonic() + delay > deadline:
            raise TimeoutError("could not connect before the deadline")
        await asyncio.sleep(delay)


class HTTPPool:
    """Keep-alive HTTP/1.1 request/response over ``size`` raw connections (one request each at a
    time). ``request`` returns (status, body)."""

    def __init__(self, port: int, size: int) -> None:
        self.port, self.size = port, size
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def open(self) -> None:
        for _ in range(self.size):
            self.idle.put_nowait(await self._connect())

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 5)

    async def request(
        self, path: str, body: Any, headers: dict[str, str], wait_s: float = 10.0
    ) -> tuple[int, bytes]:
        data = orjson.dumps(body)
        head = f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nContent-Type: application/json\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        message = head.encode() + b"Content-Length: %d\r\n\r\n" % len(data) + data
        conn = await asyncio.wait_for(self.idle.get(), wait_s)
        try:
            for attempt in range(2):  # a kept-alive connection the server closed meanwhile: once more
                r, w = conn
                try:
                    w.write(message)
                    async with asyncio.timeout(wait_s):
                        raw = await r.readuntil(b"\r\n\r\n")
                        length = 0
                        for ln in raw.split(b"\r\n"):
                            if ln[:15].lower() == b"content-length:":
                                length = int(ln[15:])
                        payload = await r.readexactly(length) if length else b""
                    return int(raw[9:12]), payload
                except (asyncio.IncompleteReadError, ConnectionError):
                    w.close()
                    conn = await self._connect()
                    if attempt:
                        raise
                except BaseException:
                    w.close()
                    conn = await self._connect()
                    raise
            raise AssertionError("unreachable")
        finally:
            self.idle.put_nowait(conn)

    async def close(self) -> None:
        while not self.idle.empty():
            _, w = self.idle.get_nowait()
            w.close()


def write_section(out: Path, name: str, section: str) -> None:
    """Replaces the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` (or appends)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    replace_block(out, start, end, f"{start}\n{section.strip()}\n{end}")


def replace_block(out: Path, start: str, end: str, block: str) -> None:
    """Puts ``block`` (it begins with ``start`` and ends with ``end``) in place of the text from
    ``start`` to ``end`` in ``out``, or appends it; the rest of the file is kept."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# Performance\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    out.write_text(text, encoding="utf-8")


def git_commit(root: Path) -> str:
    """The short commit of the tree at ``root`` ("?" outside git)."""
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    return "?"


def machine_note() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average at start {load}"
