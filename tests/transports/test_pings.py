"""Server pings on every transport of a real gateway process, as Centrifugo sends them: every
``client.ping_interval`` whatever else the connection does; a bidirectional client that does not
answer within ``client.pong_timeout`` is disconnected with 3012 "no pong" (its other commands are
no pong); unidirectional clients get pings and are never asked for a pong.

One gateway for the module (1 s pings, 0.9 s pong timeout); waits are bounded by the suite's
factor (``scaled``), never asserted as durations."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.framing import delimited, split_frame
from tests.support import GatewayProcess, mint_token, scaled
from tests.transports.conftest import SECRET, stream_config, uid
from tests.transports.test_streaming import bidi, uni

PINGS = {"ping_interval": "1s", "pong_timeout": "900ms"}
WAIT = 10.0
NO_PONG = {"code": 3012, "reason": "no pong"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = stream_config(client=PINGS, uni_websocket={"enabled": True})
    proc = GatewayProcess(config, tmp_path_factory.mktemp("pings-gw")).start()
    yield proc
    proc.terminate()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as client:
        yield client


def token() -> str:
    return mint_token(SECRET, "u", channels=[f"feed:{uid()}"])


async def ws_connect(gw: GatewayProcess) -> ClientConnection:
    ws = await connect(gw.ws_url)
    await ws.send(json.dumps({"id": 1, "connect": {"token": token()}}))
    reply = json.loads(await ws.recv())
    assert reply["connect"]["ping"] == 1 and reply["connect"]["pong"] is True, reply
    return ws


def messages(frame: str | bytes) -> list[dict[str, Any]]:
    """The JSON messages of one frame (a reply and a ping written in one tick share a frame)."""
    return [json.loads(line) for line in (frame.encode() if isinstance(frame, str) else frame).splitlines()]


async def test_websocket_json_pings_answered_keep_coming(gw: GatewayProcess):
    ws = await ws_connect(gw)
    try:
        pings = 0
        async with asyncio.timeout(scaled(WAIT)):
            while pings < 3:
                for message in messages(await ws.recv()):
                    if message == {}:
                        pings += 1
                        await ws.send("{}")
    finally:
        await ws.close()


async def test_websocket_protobuf_pings_answered_keep_coming(gw: GatewayProcess):
    async with connect(gw.ws_url, subprotocols=["centrifuge-protobuf"]) as ws:  # type: ignore[list-item]
        await ws.send(delimited(pb.Command(id=1, connect=pb.ConnectRequest(token=token()))))
        pings = 0
        async with asyncio.timeout(scaled(WAIT)):
            while pings < 3:
                frame = await ws.recv()
                assert isinstance(frame, bytes)
                for body in split_frame(frame):
                    reply = pb.Reply()
                    reply.ParseFromString(body)
                    if reply.id == 1:
                        assert reply.connect.ping == 1 and reply.connect.pong, reply
                    elif not reply.id and not reply.HasField("push"):
                        pings += 1
                        await ws.send(delimited(pb.Command()))


async def test_websocket_without_pong_is_3012_though_it_sends_commands(gw: GatewayProcess):
    """A client's own commands are no pong and do not postpone the server's pings."""
    ws = await ws_connect(gw)
    pings, replies, n = 0, 0, 1

    async def busy() -> None:
        nonlocal n
        while True:
            n += 1
            await ws.send(json.dumps({"id": n, "presence_stats": {"channel": "nope"}}))
            await asyncio.sleep(0.05)  # pacing of the client's traffic, not a sync point

    sender = asyncio.create_task(busy())
    try:
        async with asyncio.timeout(scaled(WAIT)):
            try:
                while True:
                    for message in messages(await ws.recv()):
                        if message == {}:
                            pings += 1
                        else:
                            replies += 1
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd else None
    finally:
        sender.cancel()
    assert code == 3012 and pings >= 1 and replies > 0


async def test_websocket_answering_pongs_gets_pings_while_busy(gw: GatewayProcess):
    """Pings arrive between the replies of a client that keeps sending commands."""
    ws = await ws_connect(gw)
    pings, n = 0, 1
    try:
        async with asyncio.timeout(scaled(WAIT)):
            while pings < 3:
                n += 1
                await ws.send(json.dumps({"id": n, "presence_stats": {"channel": "nope"}}))
                replied = False
                while not replied:
                    for message in messages(await ws.recv()):
                        if message == {}:
                            pings += 1
                            await ws.send("{}")
                        else:
                            assert message["id"] == n, message
                            replied = True
                await asyncio.sleep(0.05)  # pacing of the client's traffic, not a sync point
    finally:
        await ws.close()


@pytest.mark.parametrize("transport", ["sse", "http_stream"])
async def test_bidirectional_streams_get_pings_and_3012_without_pong(
    http: httpx.AsyncClient, gw: GatewayProcess, transport: str
):
    async with bidi(http, gw, transport, token()) as stream:
        connect_reply = await stream.next(scaled(WAIT))
        assert connect_reply["connect"]["ping"] == 1 and connect_reply["connect"]["pong"] is True
        assert await stream.next(scaled(WAIT)) == {}
        assert await stream.wait_end(scaled(WAIT)) == [{"push": {"disconnect": NO_PONG}}]


@pytest.mark.parametrize("transport", ["uni_sse", "uni_http_stream"])
async def test_uni_streams_get_pings_and_owe_no_pong(
    http: httpx.AsyncClient, gw: GatewayProcess, transport: str
):
    async with uni(http, gw, transport, {"token": token()}) as stream:
        connect_reply = (await stream.next(scaled(WAIT)))["connect"]
        assert connect_reply["ping"] == 1 and not connect_reply.get("pong")
        assert [await stream.next(scaled(WAIT)) for _ in range(3)] == [{}, {}, {}]


async def test_uni_websocket_gets_pings_and_owes_no_pong(gw: GatewayProcess):
    async with connect(gw.ws_url.replace("/connection/websocket", "/connection/uni_websocket")) as ws:
        await ws.send(json.dumps({"token": token()}))
        connect_reply: dict[str, Any] = json.loads(await ws.recv())["connect"]
        assert connect_reply["ping"] == 1 and not connect_reply.get("pong")
        async with asyncio.timeout(scaled(WAIT)):
            assert [json.loads(await ws.recv()) for _ in range(3)] == [{}, {}, {}]
