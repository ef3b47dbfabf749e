"""Server API fields that Centrifugo honours and Taskcast once accepted and ignored (issue 19's
"silent drift"): publish ``version``/``version_epoch``, ``subscribe`` ``expire_at``/``info``/
``b64info``/``data``/``b64data``, ``refresh`` ``info``, ``batch`` ``parallel``. In-process: a real
Node on the memory engine, the real ``ServerApi``, recording transports for the connections."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import orjson
import pytest

from gateway.api.executor import ServerApi
from gateway.api.http import ApiEndpoint
from gateway.api.requests import ApiError
from gateway.engine.base import HistoryOptions, PublishResult
from gateway.engine.memory import MemoryBroker
from gateway.protocol.messages import Publication
from tests.gateway.recording import INSECURE, WAIT_SECONDS, Harness


async def test_publish_version_drops_older_and_equal_versions():
    h = Harness()
    api = ServerApi(h.node, h.settings)
    first = await api.call("publish", {"channel": "v", "data": {"n": 1}, "version": 2})
    stale = await api.call("publish", {"channel": "v", "data": {"n": 0}, "version": 1})
    newer = await api.call(
        "broadcast", {"channels": ["v"], "data": {"n": 3}, "version": 3, "version_epoch": ""}
    )
    assert stale == first  # Centrifugo answers the current top for a suppressed publication
    assert newer["responses"][0]["result"]["offset"] == 2
    history = await api.call("history", {"channel": "v", "limit": -1})
    assert [p["data"] for p in orjson.loads(orjson.dumps(history))["publications"]] == [{"n": 1}, {"n": 3}]


PRESENCE = {**INSECURE, "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_PRESENCE": "true"}


def b64(obj: object) -> str:
    return base64.b64encode(orjson.dumps(obj)).decode()


def plain(obj: object) -> Any:
    """A result as a client would read it (``orjson.Fragment`` values parsed)."""
    return orjson.loads(orjson.dumps(obj))


async def test_subscribe_honours_expire_at_b64info_and_b64data():
    h = Harness(PRESENCE)
    api = ServerApi(h.node, h.settings)
    client, transport = await h.connected()
    expire_at = int(time.time()) + 600
    await api.call(
        "subscribe",
        {
            "client": client.client_id,
            "channel": "srv",
            "expire_at": expire_at,
            "b64info": b64({"role": "viewer"}),
            "info": {"ignored": True},
            "b64data": b64({"hello": 1}),
        },
    )
    push = (await transport.push("subscribe"))["subscribe"]
    assert push["data"] == {"hello": 1}
    assert push["expires"] is True and 0 < push["ttl"] <= 600
    presence = plain(await api.call("presence", {"channel": "srv"}))["presence"]
    assert presence[client.client_id]["chan_info"] == {"role": "viewer"}


async def test_subscribe_info_and_data_as_json():
    h = Harness(PRESENCE)
    api = ServerApi(h.node, h.settings)
    client, transport = await h.connected()
    await api.call("subscribe", {"client": client.client_id, "channel": "srv", "info": {"a": 1}, "data": [1]})
    push = (await transport.push("subscribe"))["subscribe"]
    assert push["data"] == [1] and "expires" not in push
    presence = plain(await api.call("presence", {"channel": "srv"}))["presence"]
    assert presence[client.client_id]["chan_info"] == {"a": 1}


@pytest.mark.parametrize("field", ["b64info", "b64data"])
@pytest.mark.parametrize("value", ["***", "YWJj=x"])
async def test_bad_b64_fields_are_107(field, value):
    # Not base64: 107. Binary (non-JSON) bytes are valid: Protobuf connections carry them as they
    # are (docs/transports.md, tests/transports/test_protobuf_ws.py).
    h = Harness()
    api = ServerApi(h.node, h.settings)
    with pytest.raises(ApiError) as err:
        await api.call("subscribe", {"user": "u", "channel": "srv", field: value})
    assert err.value.code == 107


async def test_publish_b64data_without_data():
    h = Harness()
    api = ServerApi(h.node, h.settings)
    await api.call("publish", {"channel": "p", "b64data": b64({"x": 1})})
    history = plain(await api.call("history", {"channel": "p", "limit": -1}))
    assert [p["data"] for p in history["publications"]] == [{"x": 1}]
    with pytest.raises(ApiError) as err:
        await api.call("publish", {"channel": "p"})
    assert err.value.code == 107


async def test_refresh_info_becomes_the_connection_info():
    h = Harness(PRESENCE)
    api = ServerApi(h.node, h.settings)
    client, transport = await h.connected()
    await api.call("refresh", {"client": client.client_id, "info": {"name": "new"}})
    client.feed(b'{"id":2,"subscribe":{"channel":"room"}}')
    await transport.reply(2)
    presence = plain(await api.call("presence", {"channel": "room"}))["presence"]
    assert presence[client.client_id]["conn_info"] == {"name": "new"}


class GatedBroker(MemoryBroker):
    """Publishing to ``gate`` waits until something is published to ``release``: a sequential
    batch of [gate, release] can never finish, a parallel one finishes."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    async def publish(
        self, channel: str, pub: Publication, history: HistoryOptions, **kw: Any
    ) -> PublishResult:
        if channel == "gate":
            await self.released.wait()
        elif channel == "release":
            self.released.set()
        return await super().publish(channel, pub, history, **kw)


async def test_batch_parallel_runs_concurrently_and_replies_in_order():
    h = Harness(broker=GatedBroker())
    endpoint = ApiEndpoint(ServerApi(h.node, h.settings), h.settings.http_api)
    commands = [
        {"publish": {"channel": "gate", "data": 1}},
        {"publish": {"channel": "undefined:x", "data": 2}},
        {"publish": {"channel": "release", "data": 3}},
    ]
    body = await asyncio.wait_for(endpoint.batch_body({"commands": commands, "parallel": True}), WAIT_SECONDS)
    replies = orjson.loads(body)["replies"]
    assert replies[0] == {"publish": {"offset": 1, "epoch": replies[0]["publish"]["epoch"]}}
    assert replies[1]["error"]["code"] == 102
    assert replies[2]["publish"]["offset"] == 1


async def test_batch_parallel_must_be_a_boolean():
    h = Harness()
    endpoint = ApiEndpoint(ServerApi(h.node, h.settings), h.settings.http_api)
    body = await endpoint.batch_body({"commands": [], "parallel": "yes"})
    assert orjson.loads(body)["error"]["code"] == 107
