"""The Protobuf protocol against a real gateway process, on both engines, with raw clients:
subprotocol negotiation, several commands per binary frame, malformed and oversized frames
closing with Centrifugo's codes (the process stays up), JSON and Protobuf subscribers of one
channel getting the same publications in the same order with the same offsets, ``b64data``
arriving as the same bytes (live, history, recovery), and HTTP-streaming + /emulation bodies."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.framing import delimited, split_frame
from tests.support.procs import GatewayProcess, mint_token
from tests.support.waiting import scaled, wait_until

SECRET = "protobuf-ws-secret-of-at-least-32-bytes"
SIZE_LIMIT = 4096
CONFIG: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}},
    "websocket": {"message_size_limit": SIZE_LIMIT},
    "http_stream": {"enabled": True},
    "channel": {
        "without_namespace": {
            "history_size": 100,
            "history_ttl": "300s",
            "force_recovery": True,
            "allow_subscribe_for_client": True,
            "allow_publish_for_subscriber": True,
            "allow_history_for_subscriber": True,
            "presence": True,
            "allow_presence_for_subscriber": True,
        }
    },
}
WAIT = 10.0


@pytest.fixture(scope="module", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def gw(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = dict(CONFIG)
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        config["engine"] = {
            "type": "redis",
            "redis": {"address": url, "prefix": f"pbws-{uuid.uuid4().hex[:8]}"},
        }
    proc = GatewayProcess(config, Path(tmp_path_factory.mktemp("gw"))).start()
    yield proc
    proc.terminate()


def chan() -> str:
    return f"ch-{uuid.uuid4().hex[:8]}"


class PbClient:
    """A raw Protobuf client: sends delimited Commands in binary frames, reads Replies."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.replies: asyncio.Queue[pb.Reply] = asyncio.Queue()
        self.next_id = 0

    async def pump(self) -> None:
        try:
            async for frame in self.ws:
                assert isinstance(frame, bytes), "text frame on a Protobuf connection"
                for body in split_frame(frame):
                    reply = pb.Reply()
                    reply.ParseFromString(body)
                    if reply.id or reply.HasField("push") or reply.HasField("error"):
                        self.replies.put_nowait(reply)
                    else:  # server ping: answer with an empty command (pong)
                        await self.ws.send(delimited(pb.Command()))
        except ConnectionClosed:
            pass

    def command(self, **request: Any) -> pb.Command:
        self.next_id += 1
        return pb.Command(id=self.next_id, **request)

    async def send(self, *commands: pb.Command) -> None:
        await self.ws.send(b"".join(delimited(c) for c in commands))

    async def get(self) -> pb.Reply:
        return await asyncio.wait_for(self.replies.get(), scaled(WAIT))

    async def call(self, **request: Any) -> pb.Reply:
        cmd = self.command(**request)
        await self.send(cmd)
        reply = await self.get()
        assert reply.id == cmd.id, reply
        return reply

    async def pub(self) -> pb.Publication:
        reply = await self.get()
        assert reply.push.HasField("pub"), reply
        return reply.push.pub


async def pb_client(gw: GatewayProcess, user: str = "u1") -> AsyncIterator[PbClient]:
    async with connect(gw.ws_url, subprotocols=["centrifuge-protobuf"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "centrifuge-protobuf"
        client = PbClient(ws)
        task = asyncio.create_task(client.pump())
        reply = await client.call(connect=pb.ConnectRequest(token=mint_token(SECRET, user)))
        assert reply.connect.client, reply
        try:
            yield client
        finally:
            task.cancel()


async def api(gw: GatewayProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
        resp = await http.post(f"{gw.api_url}/{method}", json=params, timeout=scaled(WAIT))
    body: dict[str, Any] = resp.json()
    assert "error" not in body, body
    return body.get("result", {})


async def test_negotiation_and_several_commands_per_frame(gw: GatewayProcess):
    ch = chan()
    async for c in pb_client(gw):
        sub, pub, hist = (
            c.command(subscribe=pb.SubscribeRequest(channel=ch)),
            c.command(publish=pb.PublishRequest(channel=ch, data=b'{"n":1}')),
            c.command(history=pb.HistoryRequest(channel=ch, limit=-1)),
        )
        await c.send(sub, pub, hist)
        got = [await c.get() for _ in range(4)]
        ids = [r.id for r in got if r.id]
        assert ids == [sub.id, pub.id, hist.id]
        sub_reply = next(r for r in got if r.id == sub.id).subscribe
        assert sub_reply.recoverable and sub_reply.positioned and sub_reply.epoch
        pushes = [r.push.pub for r in got if r.HasField("push")]
        assert [(p.data, p.offset, p.info.user) for p in pushes] == [(b'{"n":1}', 1, "u1")]
        history = next(r for r in got if r.id == hist.id).history
        assert [(p.data, p.offset) for p in history.publications] == [(b'{"n":1}', 1)]
        assert (
            await c.call(presence_stats=pb.PresenceStatsRequest(channel=ch))
        ).presence_stats.num_clients == 1
        bad = await c.call(subscribe=pb.SubscribeRequest(channel=ch))
        assert bad.error.code == 105  # already subscribed: same catalogue as JSON


async def test_json_subprotocol_and_no_subprotocol_stay_json(gw: GatewayProcess):
    async with connect(gw.ws_url, subprotocols=["centrifuge-json"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "centrifuge-json"
        await ws.send(orjson.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "u")}}).decode())
        assert orjson.loads(await asyncio.wait_for(ws.recv(), scaled(WAIT)))["id"] == 1
    async with connect(gw.ws_url) as ws:
        assert ws.subprotocol is None


async def _closed_with(gw: GatewayProcess, frame: bytes | str, after_connect: bool = True) -> int | None:
    async with connect(gw.ws_url, subprotocols=["centrifuge-protobuf"], max_size=None) as ws:  # type: ignore[list-item]
        if after_connect:
            await ws.send(
                delimited(pb.Command(id=1, connect=pb.ConnectRequest(token=mint_token(SECRET, "u"))))
            )
            await asyncio.wait_for(ws.recv(), scaled(WAIT))
        await ws.send(frame)
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), scaled(WAIT))
        return ws.close_code


@pytest.mark.parametrize(
    "frame",
    [
        b"\x80",  # truncated varint
        b"\x09\x08\x01",  # length beyond the frame
        b"\x02\x0f\x00",  # corrupt wire format
        b"\x02\x0a\x00",  # Command.id with a wrong wire type
        b"",  # empty frame
    ],
    ids=["truncated-varint", "length-beyond-frame", "corrupt", "wrong-wire-type", "empty"],
)
async def test_malformed_frames_close_3501_and_the_process_stays_up(gw: GatewayProcess, frame: bytes):
    assert await _closed_with(gw, frame) == 3501
    assert await _closed_with(gw, frame, after_connect=False) == 3501
    assert gw.health_ok()
    async for c in pb_client(gw):
        assert (await c.call(subscribe=pb.SubscribeRequest(channel=chan()))).HasField("subscribe")


async def test_text_frame_on_a_protobuf_connection_closes_3506(gw: GatewayProcess):
    assert await _closed_with(gw, "{}") == 3506


async def test_oversized_frame_closes_1009(gw: GatewayProcess):
    big = pb.Command(id=2, publish=pb.PublishRequest(channel="x", data=b"\x00" * (SIZE_LIMIT + 1)))
    assert await _closed_with(gw, delimited(big)) == 1009
    assert gw.health_ok()


async def test_fragmented_binary_message_is_reassembled(gw: GatewayProcess):
    ch = chan()
    async for c in pb_client(gw):
        sub = c.command(subscribe=pb.SubscribeRequest(channel=ch))
        data = delimited(sub)
        await c.ws.send([data[:2], data[2:]])  # one message in two frames (RFC 6455 §5.4)
        assert (await c.get()).id == sub.id


async def test_mixed_channel_same_publications_same_order_same_offsets(gw: GatewayProcess):
    ch = chan()
    async with connect(gw.ws_url) as jws:
        await jws.send(
            orjson.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "j")}}).decode()
            + "\n"
            + orjson.dumps({"id": 2, "subscribe": {"channel": ch}}).decode()
        )
        json_msgs: list[dict[str, Any]] = []

        async def read_json() -> None:
            """Reads all along and answers pings, as SDKs do: a loaded machine stretches the 30
            publications past ping + pong timeout, and an unanswered ping is a 3012."""
            async for frame in jws:
                for line in str(frame).split("\n"):
                    if line:
                        message = orjson.loads(line)
                        if not message:
                            await jws.send("{}")
                        json_msgs.append(message)

        def json_pubs() -> list[dict[str, Any]]:
            return [m["push"]["pub"] for m in json_msgs if "push" in m]

        reader = asyncio.create_task(read_json())
        count = 30
        try:
            async for c in pb_client(gw, "p"):
                assert (await c.call(subscribe=pb.SubscribeRequest(channel=ch))).HasField("subscribe")
                payloads = [orjson.dumps({"i": i}) for i in range(count)]
                for data in payloads:
                    await api(gw, "publish", {"channel": ch, "data": orjson.loads(data)})
                pb_pubs = [await c.pub() for _ in payloads]
                await wait_until(lambda: len(json_pubs()) >= count, WAIT, "the JSON pushes")
                assert not reader.done(), reader
                assert [(p.data, p.offset) for p in pb_pubs] == [(d, i + 1) for i, d in enumerate(payloads)]
                assert [(orjson.dumps(p["data"]), p["offset"]) for p in json_pubs()] == [
                    (d, i + 1) for i, d in enumerate(payloads)
                ]
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def test_b64data_same_bytes_live_history_recovery_and_verbatim_for_json(gw: GatewayProcess):
    ch = chan()
    binary = b"\x00\x01\xfe\xffbinary\n"
    json_bytes = b'{"from":"b64"}'
    async with connect(gw.ws_url) as jws:
        await jws.send(
            orjson.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "j")}}).decode()
            + "\n"
            + orjson.dumps({"id": 2, "subscribe": {"channel": ch}}).decode()
        )
        while "subscribe" not in str(await asyncio.wait_for(jws.recv(), scaled(WAIT))):
            pass
        async for c in pb_client(gw):
            sub = (await c.call(subscribe=pb.SubscribeRequest(channel=ch))).subscribe
            await api(gw, "publish", {"channel": ch, "b64data": base64.b64encode(json_bytes).decode()})
            # A JSON subscriber gets the decoded bytes embedded as they are (Centrifugo's Raw).
            assert orjson.loads(await asyncio.wait_for(jws.recv(), scaled(WAIT)))["push"]["pub"]["data"] == {
                "from": "b64"
            }
            await api(gw, "broadcast", {"channels": [ch], "b64data": base64.b64encode(binary).decode()})
            assert [(await c.pub()).data, (await c.pub()).data] == [json_bytes, binary]
        async for c in pb_client(gw):
            rec = (
                await c.call(
                    subscribe=pb.SubscribeRequest(channel=ch, recover=True, epoch=sub.epoch, offset=0)
                )
            ).subscribe
            assert rec.recovered and [p.data for p in rec.publications] == [json_bytes, binary]
            hist = (await c.call(history=pb.HistoryRequest(channel=ch, limit=-1))).history
            assert [p.data for p in hist.publications] == [json_bytes, binary]
            # Client publish of binary data: the same bytes come back.
            publish = c.command(publish=pb.PublishRequest(channel=ch, data=b"\xff\x00"))
            await c.send(publish)
            got = [await c.get(), await c.get()]  # the reply and the push, in either order
            assert sorted(r.id for r in got) == [0, publish.id]
            assert next(r for r in got if not r.id).push.pub.data == b"\xff\x00"


async def test_b64data_invalid_is_107(gw: GatewayProcess):
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
        resp = await http.post(f"{gw.api_url}/publish", json={"channel": "c", "b64data": "***"})
    assert resp.json()["error"]["code"] == 107


async def test_http_stream_and_emulation_with_protobuf_bodies(gw: GatewayProcess):
    ch = chan()
    headers = {"Content-Type": "application/octet-stream", "Accept": "application/octet-stream"}
    connect_cmd = delimited(pb.Command(id=1, connect=pb.ConnectRequest(token=mint_token(SECRET, "h"))))
    async with (
        httpx.AsyncClient(timeout=scaled(WAIT)) as http,
        http.stream("POST", f"{gw.url}/connection/http_stream", content=connect_cmd, headers=headers) as resp,
    ):
        assert resp.headers["content-type"] == "application/octet-stream"
        buffer = b""
        chunks = resp.aiter_raw()

        async def next_reply() -> pb.Reply:
            nonlocal buffer
            while True:
                try:
                    bodies = split_frame(buffer) if buffer else []
                except Exception:
                    bodies = []
                if bodies:
                    first = bodies[0]
                    reply = pb.Reply()
                    reply.ParseFromString(first)
                    buffer = buffer[len(delimited(reply)) :] if reply.SerializeToString() == first else buffer
                    return reply
                buffer += await asyncio.wait_for(chunks.__anext__(), scaled(WAIT))

        connected = (await next_reply()).connect
        assert connected.session and connected.node
        body = pb.EmulationRequest(
            session=connected.session,
            node=connected.node,
            data=delimited(pb.Command(id=2, subscribe=pb.SubscribeRequest(channel=ch))),
        ).SerializeToString()
        emu = await http.post(
            f"{gw.url}/emulation", content=body, headers={"Content-Type": "application/octet-stream"}
        )
        assert emu.status_code == 204
        assert (await next_reply()).id == 2
        await api(gw, "publish", {"channel": ch, "b64data": base64.b64encode(b"\x00z").decode()})
        assert (await next_reply()).push.pub.data == b"\x00z"
        bad = await http.post(
            f"{gw.url}/emulation", content=b"\x0a\xff", headers={"Content-Type": "application/octet-stream"}
        )
        assert bad.status_code == 400
