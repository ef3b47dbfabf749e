"""The TCP fault proxy against a real echo server on loopback: each mode, switched at runtime."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from tests.helpers.faultproxy import FaultProxy
from tests.support import scaled, wait_until

WITHIN = scaled(5.0)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass  # the proxy resets the upstream side too: that is the fault under test
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with FaultProxy("127.0.0.1", port) as p:
        yield p
    server.close()
    await server.wait_closed()


async def _open(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), WITHIN)


async def test_pass_through_forwards_both_ways(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    assert await _roundtrip(reader, writer, b"hello") == b"hello"
    assert proxy.bytes_up == 5 and proxy.bytes_down == 5
    writer.close()


async def test_latency_delays_each_direction(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    proxy.latency(0.2, "down")
    started = time.monotonic()
    assert await _roundtrip(reader, writer, b"x") == b"x"
    assert time.monotonic() - started >= 0.2  # a lower bound: load can only make it longer
    proxy.latency(3600, "down")
    proxy.pass_through()  # removes the hour of latency: the round trip completes within WITHIN
    assert await _roundtrip(reader, writer, b"y") == b"y"
    writer.close()


async def test_stall_holds_bytes_and_releases_them_in_order(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    proxy.stall()
    writer.write(b"abc")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(3), 0.3)  # the fault window, bounded
    writer.write(b"def")
    await writer.drain()
    proxy.pass_through()
    assert await asyncio.wait_for(reader.readexactly(6), WITHIN) == b"abcdef"
    writer.close()


async def test_blackhole_answers_nothing_on_open_and_new_connections(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    proxy.blackhole()
    writer.write(b"lost")
    await writer.drain()
    r2, w2 = await _open(proxy)
    w2.write(b"lost too")
    await w2.drain()
    for r in (reader, r2):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.read(1), 0.3)
    proxy.pass_through()
    assert await _roundtrip(reader, writer, b"back") == b"back"
    for w in (writer, w2):
        w.close()


async def test_reset_aborts_open_connections_and_refuses_new_ones(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    assert await _roundtrip(reader, writer, b"1") == b"1"
    proxy.reset()
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await _roundtrip(reader, writer, b"2")
    r2, w2 = await _open(proxy)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await _roundtrip(r2, w2, b"3")
    proxy.pass_through()
    r3, w3 = await _open(proxy)
    assert await _roundtrip(r3, w3, b"4") == b"4"
    w3.close()


async def test_drop_responses_lets_the_request_through_and_resets_the_reply(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    proxy.drop_responses(1)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await _roundtrip(reader, writer, b"req")
    assert proxy.bytes_up == 3 and proxy.dropped_responses == 1
    r2, w2 = await _open(proxy)
    assert await _roundtrip(r2, w2, b"again") == b"again"
    w2.close()


async def test_close_ends_every_link(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    assert await _roundtrip(reader, writer, b"z") == b"z"
    assert proxy.open_connections == 1
    await proxy.close()
    with pytest.raises(ConnectionError):
        await _roundtrip(reader, writer, b"after close")
    assert proxy.open_connections == 0


async def test_a_link_reset_while_its_upstream_connect_is_in_flight_closes_that_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The proxy's upstream connect is held until the link has been reset; the connection that
    # completes afterwards must be closed too, not left open with nobody to close it.
    arrived: list[asyncio.StreamWriter] = []
    closed = asyncio.Event()

    async def upstream_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        arrived.append(writer)
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the proxy closes or resets its side
        closed.set()
        writer.close()

    server = await asyncio.start_server(upstream_peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    release = asyncio.Event()
    real_open_connection = asyncio.open_connection

    async def held_open_connection(host: str, port_: int, **kwargs: object) -> object:
        if port_ == port:
            await release.wait()
        return await real_open_connection(host, port_, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio, "open_connection", held_open_connection)
    try:
        async with FaultProxy("127.0.0.1", port) as proxy:
            _, writer = await _open(proxy)
            await wait_until(lambda: proxy.accepted == 1, WITHIN, "the proxy accepted")
            proxy.reset()  # the link is gone before its upstream connect completes
            release.set()
            await wait_until(lambda: arrived, WITHIN, "the late upstream connection")
            await asyncio.wait_for(closed.wait(), WITHIN)
            writer.close()
    finally:
        server.close()
        await server.wait_closed()
