"""An asyncio TCP fault proxy for tests (no toxiproxy or netem on this machine: reliability-notes §4).

``FaultProxy(upstream_host, upstream_port)`` listens on 127.0.0.1 on a free port and forwards
every accepted connection to the upstream. Its fault mode is switchable at runtime and applies to
connections already open as well as new ones:

* ``pass_through()`` — forward bytes unchanged (the default);
* ``latency(seconds, direction)`` — delay every chunk going ``up`` (client → upstream),
  ``down`` (upstream → client) or ``both``, keeping the order;
* ``stall()`` — hold every byte in both directions (connections stay open, nothing moves) until
  ``pass_through()`` releases what was held, in order;
* ``blackhole()`` — accept and read, but forward nothing and answer nothing: bytes are dropped
  (a deaf peer, a half-open path);
* ``reset()`` — reset (TCP RST) every open connection and every new one (a killed server);
* ``drop_responses(n)`` — forward requests, but the next ``n`` chunks coming back from the
  upstream are swallowed and their client connection is reset: the upstream did the work, the
  client never learns the result (an *indefinite* result).

Counters (``accepted``, ``bytes_up``, ``bytes_down``, ``dropped_responses``) let a test wait for
the fault to have happened instead of sleeping. Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Literal

from tests.support.waiting import scaled

Direction = Literal["up", "down", "both"]
Mode = Literal["pass", "stall", "blackhole", "reset"]
CHUNK = 65536


@dataclass(eq=False)
class _Link:
    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    upstream_writer: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    closed: bool = False


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0, so the peer sees a reset, not a clean FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """A runtime-switchable TCP proxy in front of ``upstream_host:upstream_port``."""

    def __init__(self, upstream_host: str, upstream_port: int, *, port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listen_port = port
        self.mode: Mode = "pass"
        self.delay = {"up": 0.0, "down": 0.0}
        self.drop_down = 0
        self.accepted = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.dropped_responses = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            await self._drop(link, reset=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), scaled(5))
            self._server = None

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._links)

    # --- faults ------------------------------------------------------------------------------------

    def pass_through(self) -> None:
        """Back to normal: no delay, nothing dropped, held bytes released in order."""
        self.mode = "pass"
        self.delay = {"up": 0.0, "down": 0.0}
        self.drop_down = 0
        self._flowing.set()

    def latency(self, seconds: float, direction: Direction = "both") -> None:
        for side in ("up", "down"):
            if direction in (side, "both"):
                self.delay[side] = seconds

    def stall(self) -> None:
        self.mode = "stall"
        self._flowing.clear()

    def blackhole(self) -> None:
        self.mode = "blackhole"
        self._flowing.set()

    def reset(self) -> None:
        """Reset every open connection now; new ones are reset on accept until switched back."""
        self.mode = "reset"
        self._flowing.set()
        for link in list(self._links):
            self._abort(link)

    def drop_responses(self, n: int = 1) -> None:
        self.drop_down = n

    # --- plumbing ----------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(reader, writer)
        if self.mode == "reset":
            _rst(writer)
            return
        self._links.add(link)
        upstream: asyncio.StreamWriter | None = None
        if self.mode != "stall":  # eager, for protocols where the server speaks first (MySQL)
            try:
                upstream = await self._connect_upstream(link)
            except (OSError, TimeoutError):
                await self._drop(link, reset=True)
                return
        up = asyncio.create_task(self._pump(link, reader, upstream, "up"))
        link.tasks.insert(0, up)
        await asyncio.gather(up, return_exceptions=True)
        if len(link.tasks) > 1:
            await asyncio.gather(*link.tasks[1:], return_exceptions=True)
        await self._drop(link, reset=False)

    async def _connect_upstream(self, link: _Link) -> asyncio.StreamWriter:
        """Opened on accept; but a connection accepted while stalled opens its upstream only when
        its first bytes are released, so a held request reaches a fresh upstream connection
        (HTTP servers close connections idle for a few seconds). A link closed while the connect
        was in flight gets its new upstream connection reset here (ConnectionResetError)."""
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), scaled(5))
        if link.closed:  # reset or dropped while the connect was in flight: nobody else closes it
            _rst(up_writer)
            raise ConnectionResetError("link closed while connecting upstream")
        link.upstream_writer = up_writer
        link.tasks.append(asyncio.create_task(self._pump(link, up_reader, link.client_writer, "down")))
        return up_writer

    async def _pump(
        self,
        link: _Link,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter | None,
        side: Literal["up", "down"],
    ) -> None:
        try:
            while True:
                chunk = await src.read(CHUNK)
                if not chunk:
                    break
                await self._flowing.wait()
                if self.mode == "blackhole":
                    continue
                if self.mode == "reset" or link.closed:
                    return
                if side == "down" and self.drop_down > 0:
                    self.drop_down -= 1
                    self.dropped_responses += 1
                    self._abort(link)
                    return
                if self.delay[side] > 0:
                    await asyncio.sleep(self.delay[side])  # the injected latency itself
                if dst is None:
                    dst = await self._connect_upstream(link)
                dst.write(chunk)
                await dst.drain()
                if side == "up":
                    self.bytes_up += len(chunk)
                else:
                    self.bytes_down += len(chunk)
        except (ConnectionError, OSError, TimeoutError):
            self._abort(link)
            return
        if dst is not None:
            with contextlib.suppress(OSError, RuntimeError):
                if dst.can_write_eof():
                    dst.write_eof()

    def _abort(self, link: _Link) -> None:
        if link.closed:
            return
        link.closed = True
        _rst(link.client_writer)
        if link.upstream_writer is not None:
            _rst(link.upstream_writer)
        for task in link.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def _drop(self, link: _Link, *, reset: bool) -> None:
        self._links.discard(link)
        if reset:
            self._abort(link)
            return
        if not link.closed:
            link.closed = True
            for writer in (link.client_writer, link.upstream_writer):
                if writer is not None:
                    writer.close()
