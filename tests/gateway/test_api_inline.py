"""Server API requests answered inline by the HTTP protocol (httpwire/inline.py): a real
uvicorn server of the whole gateway (memory engine) on a free loopback port, over raw sockets.
Every request here is also answerable by the ASGI app; these tests pin that the inline path
answers the same bytes, keeps pipelined responses in order, and hands over what it must."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.app import build
from gateway.config.loading import load_settings
from gateway.http.server import Served
from httpwire.inline import INLINE_BODY_BYTES
from tests.support import scaled
from tests.support.in_process import serving

pytestmark = pytest.mark.timeout(60)

KEY = b"inline-key"


class CountingApp:
    """The gateway's ASGI app, counting the HTTP requests that reach it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.http_calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.http_calls += 1
        await self.app(scope, receive, send)


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[CountingApp, int]]:
    settings, _ = load_settings(
        None,
        {
            "TASKCAST_HTTP_API_KEY": KEY.decode(),
            "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_SIZE": "10",
            "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_TTL": "300s",
        },
    )
    served = build(settings)
    app = CountingApp(served.app)
    async with serving(
        settings, Served(app=app, inline=served.inline, on_shutdown=served.on_shutdown)
    ) as port:
        yield app, port


def request(
    path: bytes, body: bytes, *, method: bytes = b"POST", version: bytes = b"1.1", extra: bytes = b""
) -> bytes:
    return (
        method + b" " + path + b" HTTP/" + version + b"\r\nHost: gw\r\nX-API-Key: " + KEY + b"\r\n" + extra
        + b"Content-Length: %d\r\n\r\n" % len(body) + body
    )  # fmt: skip


async def read_responses(
    reader: asyncio.StreamReader, n: int
) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """``n`` responses: (status line, headers, body)."""
    out = []
    async with asyncio.timeout(scaled(20)):
        for _ in range(n):
            head = await reader.readuntil(b"\r\n\r\n")
            status, *lines = head[:-4].split(b"\r\n")
            headers = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines)}
            if status.startswith(b"HTTP/1.1 100"):
                head = await reader.readuntil(b"\r\n\r\n")
                status, *lines = head[:-4].split(b"\r\n")
                headers = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines)}
            out.append((status, headers, await reader.readexactly(int(headers[b"content-length"]))))
    return out


@contextlib.asynccontextmanager
async def connection(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def exchange(port: int, data: bytes, n: int = 1) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    async with connection(port) as (reader, writer):
        writer.write(data)
        return await read_responses(reader, n)


async def test_publish_is_answered_without_the_asgi_app(gateway):
    app, port = gateway
    [(status, headers, body)] = await exchange(
        port, request(b"/api/publish", b'{"channel":"a","data":{"n":1}}')
    )
    assert status == b"HTTP/1.1 200 OK"
    assert headers[b"content-type"] == b"application/json" and b"date" in headers
    assert orjson.loads(body)["result"]["offset"] == 1
    batch = b'{"commands":[{"publish":{"channel":"a","data":2}},{"publish":{"channel":"b","data":3}}]}'
    [(_, _, body)] = await exchange(port, request(b"/api/batch", batch))
    assert [r["publish"]["offset"] for r in orjson.loads(body)["replies"]] == [2, 1]
    assert app.http_calls == 0


async def test_pipelined_requests_are_answered_in_order_across_suspending_methods(gateway):
    _, port = gateway
    publish = [request(b"/api/publish", b'{"channel":"p","data":%d}' % i) for i in range(3)]
    # ``channels`` suspends (a cluster survey): the publishes after it must wait for its answer.
    data = (
        publish[0] + request(b"/api/channels", b"{}") + publish[1] + request(b"/api/info", b"{}") + publish[2]
    )
    replies = [orjson.loads(body) for _, _, body in await exchange(port, data, 5)]
    assert [r["result"].get("offset") for r in replies[::2]] == [1, 2, 3]
    assert "channels" in replies[1]["result"] and "nodes" in replies[3]["result"]


async def test_http_1_0_gets_connection_close(gateway):
    _, port = gateway
    async with connection(port) as (reader, writer):
        writer.write(request(b"/api/publish", b'{"channel":"a","data":1}', version=b"1.0"))
        [(status, headers, _)] = await read_responses(reader, 1)
        assert status == b"HTTP/1.1 200 OK" and headers[b"connection"] == b"close"
        async with asyncio.timeout(scaled(10)):
            assert await reader.read() == b""


async def test_every_refusal_is_kept(gateway):
    app, port = gateway
    wrong_key = b"POST /api/info HTTP/1.1\r\nHost: gw\r\nX-API-Key: nope\r\nContent-Length: 2\r\n\r\n{}"
    answers = await exchange(
        port,
        wrong_key
        + request(b"/api/publish", b"not json")
        + request(b"/api/publish", b'{"channel":"a"}')
        + request(
            b"/api/publish",
            b'{"channel":"undefined:x","data":1}',
            extra=b"X-Centrifugo-Error-Mode: transport\r\n",
        )
        + request(b"/api/nope", b"{}"),
        5,
    )
    assert [(status.split(b" ")[1], body) for status, _, body in answers] == [
        (b"401", b""),
        (b"400", b"bad request"),
        (b"200", b'{"error":{"code":107,"message":"bad request"}}'),
        (b"404", b'{"code":102,"message":"unknown channel"}'),
        (b"200", b'{"error":{"code":104,"message":"not found"}}'),
    ]
    assert app.http_calls == 0
    [(status, _, body)] = await exchange(port, request(b"/api/publish", b"{}", method=b"GET"))
    assert (status, body) == (b"HTTP/1.1 405 Method Not Allowed", b"")  # not inline: the app answers it
    assert app.http_calls == 1


async def test_expect_continue_and_large_bodies_go_through_the_asgi_app(gateway):
    app, port = gateway
    [(status, _, body)] = await exchange(
        port, request(b"/api/publish", b'{"channel":"a","data":1}', extra=b"Expect: 100-continue\r\n")
    )
    assert status == b"HTTP/1.1 200 OK" and orjson.loads(body)["result"]["offset"] == 1
    large = b'{"channel":"a","data":"' + b"x" * INLINE_BODY_BYTES + b'"}'
    [(status, _, body)] = await exchange(port, request(b"/api/publish", large))
    assert status == b"HTTP/1.1 200 OK" and orjson.loads(body)["result"]["offset"] == 2
    assert app.http_calls == 2


async def test_a_chunked_body_is_read_inline(gateway):
    app, port = gateway
    parts = [b'{"channel":"a",', b'"data":[1,2,3]}']
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    head = (
        b"POST /api/publish HTTP/1.1\r\nHost: gw\r\nX-API-Key: "
        + KEY
        + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    [(_, _, body)] = await exchange(port, head + chunked)
    assert orjson.loads(body)["result"]["offset"] == 1
    assert app.http_calls == 0


async def test_an_idle_keep_alive_connection_is_closed_after_inline_responses(gateway):
    """The inline path keeps uvicorn's keep-alive timeout with one idle check per connection
    (not a timer per response): a connection idle after inline answers is closed by the server,
    and answers every request it sends before that."""
    _, port = gateway
    async with connection(port) as (reader, writer):
        for i in range(3):
            writer.write(request(b"/api/publish", b'{"channel":"k","data":%d}' % i))
            [(status, _, _)] = await read_responses(reader, 1)
            assert status == b"HTTP/1.1 200 OK"
        async with asyncio.timeout(scaled(30)):  # uvicorn's timeout_keep_alive is 5 s
            assert await reader.read() == b""
