"""httpwire/protocol.py and cycle.py in-process: a real uvicorn server (the gateway's
``build_server``) on a free loopback port with a small ASGI app, driven over raw sockets. What
uvicorn's own HTTP protocol did for the app must still hold: keep-alive, pipelined responses in
the requests' order, ``Content-Length`` and chunked bodies both ways, ``Expect: 100-continue``,
HEAD, HTTP/1.0, a 500 for an app error, the idle keep-alive timeout and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.http.server import GatewayServer, Served, build_server
from tests.support import scaled

pytestmark = pytest.mark.timeout(60)


class App:
    """``/echo`` answers the body it read (with its length); ``/slow?<ms>`` waits, then answers
    the path; ``/stream`` answers without a length (chunked); ``/fail`` raises; ``/hold``
    answers once ``release`` is set. Records each request's scope."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.scopes.append(scope)
        path = scope["path"]
        if path == "/fail":
            raise RuntimeError("app failure (expected by the test)")
        if path == "/slow":
            await asyncio.sleep(int(scope["query_string"] or b"0") / 1000)  # the app's own pace
        if path == "/hold":
            self.holding.set()
            await self.release.wait()
        body = b""
        if path == "/echo":
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
        else:
            body = (path + "?" + scope["query_string"].decode()).encode()
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for part in (b"one ", b"two"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"text/plain")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, int, GatewayServer]]:
    settings, _ = load_settings(None, {"TASKCAST_HTTP_SERVER_REQUEST_TIMEOUT": "5s"})
    app = App()
    server = build_server(
        settings,
        Served(app=app),
        host="127.0.0.1",
        port=0,
        handle_signals=False,
        timeout_graceful_shutdown=10,
    )
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(scaled(10)):
        while not server.started:
            assert not task.done(), "server did not start"
            await asyncio.sleep(0.01)  # polling a flag uvicorn sets, not timing
    yield app, server.servers[0].sockets[0].getsockname()[1], server
    server.should_exit = True
    app.release.set()
    await task


@contextlib.asynccontextmanager
async def connection(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def response(
    reader: asyncio.StreamReader, *, head_only: bool = False
) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One response: (status line, headers, body), the body by length or chunked."""
    async with asyncio.timeout(scaled(10)):
        head = await reader.readuntil(b"\r\n\r\n")
        status, *lines = head[:-4].split(b"\r\n")
        headers = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines)}
        if head_only:
            return status, headers, b""
        if headers.get(b"transfer-encoding") == b"chunked":
            body = b""
            while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
                body += (await reader.readexactly(size + 2))[:-2]
            await reader.readexactly(2)
            return status, headers, body
        return status, headers, await reader.readexactly(int(headers.get(b"content-length", b"0")))


def get(path: bytes, extra: bytes = b"", method: bytes = b"GET", version: bytes = b"1.1") -> bytes:
    return method + b" " + path + b" HTTP/" + version + b"\r\nHost: t\r\n" + extra + b"\r\n"


async def test_keep_alive_and_pipelined_responses_keep_the_requests_order(served):
    app, port, _ = served
    async with connection(port) as (reader, writer):
        writer.write(get(b"/slow?300") + get(b"/slow?0") + get(b"/plain?x=1"))
        answers = [await response(reader) for _ in range(3)]
        assert [body for _, _, body in answers] == [b"/slow?300", b"/slow?0", b"/plain?x=1"]
        assert all(status == b"HTTP/1.1 200 OK" and b"date" in h for status, h, _ in answers)
        writer.write(get(b"/again"))  # the connection stays open between requests
        assert (await response(reader))[2] == b"/again?"
    assert [s["http_version"] for s in app.scopes] == ["1.1"] * 4
    assert app.scopes[2]["query_string"] == b"x=1" and app.scopes[2]["client"][0] == "127.0.0.1"


async def test_request_bodies_by_length_and_chunked_reach_the_app_whole(served):
    _, port, _ = served
    big = bytes(range(256)) * 1024  # past the 64 KiB read pause
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"ab", b"cd")) + b"0\r\n\r\n"
    async with connection(port) as (reader, writer):
        writer.write(get(b"/echo", b"Content-Length: %d\r\n" % len(big), b"POST") + big)
        assert (await response(reader))[2] == big
        writer.write(get(b"/echo", b"Transfer-Encoding: chunked\r\n", b"POST") + chunked)
        assert (await response(reader))[2] == b"abcd"


async def test_expect_100_continue_is_answered_when_the_app_reads(served):
    _, port, _ = served
    async with connection(port) as (reader, writer):
        writer.write(get(b"/echo", b"Content-Length: 5\r\nExpect: 100-continue\r\n", b"POST"))
        async with asyncio.timeout(scaled(10)):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hello")
        assert (await response(reader))[2] == b"hello"


async def test_a_response_without_length_is_chunked_and_head_has_no_body(served):
    _, port, _ = served
    async with connection(port) as (reader, writer):
        writer.write(get(b"/stream"))
        status, headers, body = await response(reader)
        assert headers[b"transfer-encoding"] == b"chunked" and body == b"one two"
        writer.write(get(b"/plain", method=b"HEAD") + get(b"/after"))
        status, headers, _ = await response(reader, head_only=True)
        assert status == b"HTTP/1.1 200 OK" and headers[b"content-length"] == b"7"
        assert (await response(reader))[2] == b"/after?"  # nothing was sent for the HEAD


async def test_http_1_0_is_answered_and_closed(served):
    _, port, _ = served
    async with connection(port) as (reader, writer):
        writer.write(get(b"/old", version=b"1.0"))
        _status, headers, body = await response(reader)
        assert headers[b"connection"] == b"close" and body == b"/old?"
        async with asyncio.timeout(scaled(10)):
            assert await reader.read() == b""


async def test_an_app_error_is_a_500_and_a_close(served):
    _, port, _ = served
    async with connection(port) as (reader, writer):
        writer.write(get(b"/fail"))
        status, headers, _body = await response(reader)
        assert status == b"HTTP/1.1 500 Internal Server Error" and headers[b"connection"] == b"close"
        async with asyncio.timeout(scaled(10)):
            assert await reader.read() == b""


async def test_an_idle_keep_alive_connection_is_closed(served):
    _, port, _ = served
    async with connection(port) as (reader, writer):
        writer.write(get(b"/one"))
        assert (await response(reader))[2] == b"/one?"
        async with asyncio.timeout(scaled(30)):  # uvicorn's timeout_keep_alive is 5 s
            assert await reader.read() == b""


async def test_graceful_shutdown_finishes_the_request_in_progress_and_closes(served):
    app, port, server = served
    async with connection(port) as (idle_reader, _), connection(port) as (reader, writer):
        writer.write(get(b"/hold"))
        async with asyncio.timeout(scaled(10)):
            await app.holding.wait()
        server.should_exit = True
        async with asyncio.timeout(scaled(10)):
            assert await idle_reader.read() == b""  # an idle connection closes at once
        app.release.set()
        _status, headers, body = await response(reader)
        assert body == b"/hold?" and headers[b"connection"] == b"close"
        async with asyncio.timeout(scaled(10)):
            assert await reader.read() == b""
