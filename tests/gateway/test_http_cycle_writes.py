"""httpwire/cycle.py's socket writes, on a transport that records them: a response whose body the
app sends in the same step as its start is ONE write (head and body together); a head whose app
waits before its first body message is written alone as soon as the app's task yields (a stream
is never held back); an app that fails after starting its response gets its head out before the
close, as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from httpwire.cycle import Cycle, Writable

pytestmark = pytest.mark.timeout(30)

DEFAULT_HEADERS = [(b"date", b"Wed, 02 Dec 2026 10:00:00 GMT")]


class RecordingTransport:
    """The transport calls a Cycle makes, recorded in order."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def _cycle(transport: RecordingTransport) -> Cycle:
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"", "client": None}
    cycle = Cycle(
        scope,
        transport,  # type: ignore[arg-type]
        Writable(),
        DEFAULT_HEADERS,
        keep_alive=True,
        expect_100=False,
        on_response=lambda: None,
        resume_reading=lambda: None,
    )
    cycle.more_body = False
    return cycle


START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}
HEAD = b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 10:00:00 GMT\r\ncontent-length: 5\r\n\r\n"


async def test_a_small_response_is_one_write() -> None:
    transport = RecordingTransport()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(START)
        await send({"type": "http.response.body", "body": b"hello"})

    await _cycle(transport).run(app)
    await asyncio.sleep(0)  # the head's flush (a no-op now) has run
    assert transport.writes == [HEAD + b"hello"]


async def test_a_chunked_response_sent_at_once_is_one_write() -> None:
    transport = RecordingTransport()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    await _cycle(transport).run(app)
    await asyncio.sleep(0)
    assert len(transport.writes) == 1
    assert transport.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")


async def test_a_head_whose_body_waits_is_written_when_the_app_yields() -> None:
    transport = RecordingTransport()
    release = asyncio.Event()
    head_seen: list[list[bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(START)
        await release.wait()
        await send({"type": "http.response.body", "body": b"hello"})

    task = asyncio.create_task(_cycle(transport).run(app))
    while not transport.writes:  # the app started its response and now waits: the head goes out
        assert not task.done()
        await asyncio.sleep(0)
    head_seen.append(list(transport.writes))
    release.set()
    await task
    assert head_seen == [[HEAD]]
    assert transport.writes == [HEAD, b"hello"]


async def test_an_app_failing_after_its_start_gets_its_head_out_then_the_close() -> None:
    transport = RecordingTransport()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(START)
        raise RuntimeError("app failure (expected by the test)")

    await _cycle(transport).run(app)
    assert transport.writes == [HEAD] and transport.closed
