"""gateway/http/server.py in-process: a real uvicorn server on a free loopback port, driven over raw
sockets. The head bound (431) and the request deadline (408) are checked on a tiny ASGI app that
records whether it was called; the whole gateway is covered by tests/faults/security."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.http.server import MAX_HEAD_BYTES, Served, build_server
from tests.support import scaled

pytestmark = pytest.mark.timeout(60)


class App:
    """Answers 200 ``ok`` and counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.calls += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, int]]:
    settings, _ = load_settings(None, {"TASKCAST_HTTP_SERVER_REQUEST_TIMEOUT": "1s"})
    app = App()
    server = build_server(settings, Served(app=app), host="127.0.0.1", port=0, handle_signals=False)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(scaled(10)):
        while not server.started:
            assert not task.done(), "server did not start"
            await asyncio.sleep(0.01)  # polling a flag uvicorn sets, not timing
    port = server.servers[0].sockets[0].getsockname()[1]
    yield app, port
    server.should_exit = True
    await task


async def _exchange(port: int, head: bytes, padding: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        chunk = b"a" * 65536
        sent = 0
        try:
            while sent < padding:
                writer.write(chunk[: padding - sent])
                sent += len(chunk[: padding - sent])
                await writer.drain()
            writer.write(b"\r\n\r\n")
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass
        async with asyncio.timeout(scaled(10)):
            return await reader.read(65536)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_head_over_the_bound_is_431_and_never_reaches_the_app(served):
    app, port = served
    answer = await _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ", 8 * MAX_HEAD_BYTES)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert app.calls == 0


async def test_many_small_headers_over_the_bound_are_431(served):
    app, port = served
    headers = b"".join(b"X-H%d: %s\r\n" % (n, b"v" * 1000) for n in range(1100))
    answer = await _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n" + headers, 0)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert app.calls == 0


async def test_head_under_the_bound_is_served(served):
    app, port = served
    answer = await _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ", MAX_HEAD_BYTES - 4096)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    assert app.calls == 1


async def test_an_unfinished_head_after_served_requests_gets_408(served):
    """One deadline timer serves a keep-alive connection's requests: a head left unfinished
    after complete requests still gets its own deadline (the timer, armed for an earlier
    request, is moved to what is left of this one's)."""
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(3):
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(scaled(10)):
                assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        async with asyncio.timeout(scaled(10)):
            answer = await reader.read(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert app.calls == 3
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_unfinished_head_gets_408_at_the_request_deadline(served):
    _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        async with asyncio.timeout(scaled(10)):
            answer = await reader.read(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
