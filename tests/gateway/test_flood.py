"""Command floods on a real gateway process (issue 28, defect 1): a hostile client's frames are
refused while they are decoded, so it is cut after a bounded number of commands, and a bystander
on the same node still gets its publications.

Each attack reads ``taskcast_gateway_client_commands_decoded_total`` before and after, so "cut
after at most N commands decoded" is a count, not a timing. Before the fix the gateway decoded
every command of a frame (65,536 for a 64 KiB Protobuf frame of zero bytes) before applying any
bound, tolerated a frame of 65,536 pongs, and decoded (and ran) the commands pipelined after a
connect that then failed."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.helpers.raw_client import Raw
from tests.support import GatewayProcess, mint_token, scaled

SECRET = "flood-secret-0123456789abcdefghijklmnop"
MAX_FRAME = 4 << 20
"""``websocket.message_size_limit`` raised to 4 MiB, as in the issue's report."""
BOUND = 1024
"""Commands per frame and pending per connection (gateway/protocol/codec.py)."""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config: dict[str, Any] = {
        # No ping within a test's (scaled) time limit: a bystander's pong would be one more
        # decoded command in the counts below, however late a loaded machine runs the test.
        "client": {"token": {"hmac_secret_key": SECRET}, "ping_interval": f"{scaled(600):g}s"},
        "websocket": {"message_size_limit": MAX_FRAME},
        "http_stream": {"enabled": True},
        "uni_websocket": {"enabled": True},
        "prometheus": {"enabled": True},
        "channel": {"without_namespace": {"allow_subscribe_for_client": True}},
    }
    gw = GatewayProcess(config, tmp_path_factory.mktemp("flood")).start()
    try:
        yield gw
    finally:
        gw.terminate()


def decoded(gw: GatewayProcess) -> dict[str, float]:
    text = httpx.get(f"{gw.internal_url}/metrics").text
    pattern = r'^taskcast_gateway_client_commands_decoded_total\{transport="([a-z_]+)"\} (\S+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}


@pytest.fixture
async def bystander(gw: GatewayProcess) -> AsyncIterator[Raw]:
    async with connect(gw.ws_url) as ws:
        raw = Raw(ws)
        pump = asyncio.ensure_future(raw.pump())
        assert "connect" in await raw.call("connect", {"token": mint_token(SECRET, "bystander")})
        assert "subscribe" in await raw.call("subscribe", {"channel": "news"})
        yield raw
        pump.cancel()


async def still_served(gw: GatewayProcess, bystander: Raw, n: int) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{gw.api_url}/publish",
            headers={"X-API-Key": gw.api_key},
            json={"channel": "news", "data": {"n": n}},
            timeout=scaled(10),
        )
    assert answer.status_code == 200, answer.text
    await bystander.wait_for(lambda m: m.get("push", {}).get("pub", {}).get("data") == {"n": n}, within=10)


async def close_code(ws: Any) -> int | None:
    """Read until the gateway closes (within a scaled bound); the close code it sent."""
    try:
        async with asyncio.timeout(scaled(20)):
            while True:
                await ws.recv()
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else None


async def test_protobuf_zero_bytes_before_connect_decode_one_command(gw: GatewayProcess, bystander: Raw):
    before = decoded(gw).get("websocket", 0)
    async with connect(gw.ws_url, subprotocols=["centrifuge-protobuf"]) as ws:  # type: ignore[list-item]
        await ws.send(bytes(65536))  # 65,536 empty commands (pongs), no connect
        assert await close_code(ws) == 3501
    # Only the first command was decoded: a pong before connect is refused at once.
    assert decoded(gw).get("websocket", 0) - before == 1
    await still_served(gw, bystander, 1)


async def test_protobuf_zero_bytes_after_connect_are_cut_within_the_stray_pong_bound(
    gw: GatewayProcess, bystander: Raw
):
    from gateway.protocol.protobuf import client_pb2 as pb
    from gateway.protocol.protobuf.framing import delimited

    async with connect(gw.ws_url, subprotocols=["centrifuge-protobuf"]) as ws:  # type: ignore[list-item]
        cmd = pb.Command(id=1)
        cmd.connect.token = mint_token(SECRET, "hostile")
        await ws.send(delimited(cmd))
        await ws.recv()  # the connect reply
        before = decoded(gw).get("websocket", 0)
        await ws.send(bytes(65536))
        await ws.send(bytes(65536))
        assert await close_code(ws) == 3501
    # A pong that answers no ping is tolerated a few times (16), not 65,536 times.
    assert decoded(gw).get("websocket", 0) - before <= 32
    await still_served(gw, bystander, 2)


async def test_json_flood_is_refused_at_the_first_surplus_command(gw: GatewayProcess, bystander: Raw):
    async with connect(gw.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "hostile")}}))
        await ws.recv()
        before = decoded(gw).get("websocket", 0)
        line = '{"id":7,"presence_stats":{"channel":"news"}}\n'
        await ws.send(line * (MAX_FRAME // len(line) - 1))  # ~90,000 commands in one frame
        assert await close_code(ws) == 3013
    # 1,024 queued, the next one decoded and refused, the other ~89,000 never parsed.
    assert BOUND < decoded(gw).get("websocket", 0) - before <= BOUND + 1
    await still_served(gw, bystander, 3)


async def test_nothing_after_a_refused_connect_is_decoded(gw: GatewayProcess, bystander: Raw):
    async with connect(gw.ws_url) as ws:
        raw = Raw(ws)
        pump = asyncio.ensure_future(raw.pump())
        before = decoded(gw).get("websocket", 0)
        frame = [{"id": 1, "connect": {"token": mint_token(SECRET, "late", exp_in=-60)}}]
        frame += [{"id": 2 + i, "subscribe": {"channel": f"c{i}"}} for i in range(500)]
        await ws.send("\n".join(json.dumps(c) for c in frame))
        reply = await raw.wait_for(lambda m: m.get("id") == 1)
        assert reply["error"]["code"] == 109  # token expired: the connect is refused
        # Centrifugo reads nothing past a connect until it succeeds: the 500 subscribes were held
        # undecoded and dropped with the refusal.
        assert decoded(gw).get("websocket", 0) - before == 1
        pump.cancel()
    await still_served(gw, bystander, 4)


async def test_http_stream_protobuf_zero_bytes_decode_one_command(gw: GatewayProcess, bystander: Raw):
    before = decoded(gw).get("http_stream", 0)
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{gw.url}/connection/http_stream",
            content=bytes(65536),
            headers={"Content-Type": "application/octet-stream"},
            timeout=scaled(10),
        )
    assert answer.status_code == 200
    assert decoded(gw).get("http_stream", 0) - before == 1
    await still_served(gw, bystander, 5)


async def test_uni_websocket_client_that_keeps_sending_is_closed(gw: GatewayProcess, bystander: Raw):
    url = gw.ws_url.replace("/connection/websocket", "/connection/uni_websocket")
    async with connect(url) as ws:
        await ws.send(json.dumps({"token": mint_token(SECRET, "uni")}))
        assert "connect" in json.loads(await ws.recv())
        for _ in range(17):  # a uni client does not send: the first 16 are ignored
            await ws.send("{}")
        assert await close_code(ws) == 3501
    await still_served(gw, bystander, 6)
