"""After its close frame the WebSocket transport reads a bounded amount from a peer that keeps
sending instead of answering (gateway/transports/websocket.py ``CLOSING_READ_LIMIT``, 64 KiB),
then drops the TCP connection; a peer that answers the close frame gets a clean close handshake.

Against a real gateway process with a byte-level client (``WireClient``: it never answers on its
own). The drop is measured in bytes, not time: the misbehaving peer offers ``OFFERED`` bytes of
frames after the server's close frame, and the connection must be reset before it could write
them all. Without the bound the server parses all of them (only its 5 s close timeout ends the
connection, after the peer has written everything) and the test fails."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway.transports.websocket import CLOSING_READ_LIMIT
from tests.helpers.raw_client import WireClient
from tests.support import GatewayProcess, scaled

OFFERED = 64 << 20
"""Bytes the misbehaving peer tries to write after the close frame: far above 64 KiB plus both
loopback socket buffers (a few MiB), so writing them all means the server kept reading."""
CHUNK = 16 << 10

TEXT, CLOSE = 0x1, 0x8


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess({"client": {"insecure": True}}, tmp_path_factory.mktemp("ws-closing")).start()
    try:
        yield gw
    finally:
        gw.terminate()


async def closed_by_server(gw: GatewayProcess) -> WireClient:
    """A connection the gateway has sent its close frame on (3501: a frame that is not a command)."""
    client = await WireClient.open("127.0.0.1", gw.port)
    await client.send(TEXT, b"not a command")
    code, _ = await client.close_frame()
    assert code == 3501
    client.sent = 0
    return client


async def test_a_peer_that_keeps_sending_after_the_close_frame_is_dropped(gw: GatewayProcess):
    client = await closed_by_server(gw)
    frame = b"x" * CHUNK
    dropped = False
    async with asyncio.timeout(scaled(60)):
        try:
            while client.sent < OFFERED:
                await client.send(TEXT, frame)
        except (ConnectionResetError, BrokenPipeError):
            dropped = True
        if not dropped:  # the server read everything: only its close timeout ends it
            try:
                await client.reader.read()
            except ConnectionResetError:
                pass
    client.abort()
    assert dropped, f"the peer wrote all {OFFERED} bytes after the close frame: the server kept reading"
    assert client.sent > CLOSING_READ_LIMIT  # not dropped before the bound


async def test_a_peer_that_answers_the_close_frame_gets_a_clean_close(gw: GatewayProcess):
    client = await closed_by_server(gw)
    # A few frames in flight before the peer read the close frame are fine (well under the bound).
    for _ in range(3):
        await client.send(TEXT, b"late")
    await client.send(CLOSE, (3501).to_bytes(2, "big"))
    async with asyncio.timeout(scaled(10)):
        rest = await client.reader.read()  # EOF: the server closes the TCP connection, no reset
    assert rest == b""
    client.abort()
