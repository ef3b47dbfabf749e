"""The server API's map methods over HTTP and gRPC against one gateway process (memory engine;
the Redis engine's map semantics are the contract suite's, tests/contracts/test_map_broker.py):
Centrifugo's request and result shapes, and its codes for bad input, with nothing retained and
the node serving on."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gateway.api.grpc import api_pb2 as pb
from gateway.api.grpc import api_pb2_grpc
from tests.support import free_port, scaled
from tests.support.procs import GatewayProcess

KEY = "map-grpc-key"
AUTH = (("authorization", f"apikey {KEY}"),)
PAGES = {"default_page_size": 2, "min_page_size": 1, "max_page_size": 100}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, int]]:
    port = free_port()
    config = {
        "grpc_api": {"enabled": True, "port": port, "key": KEY},
        "prometheus": {"enabled": True},
        "channel": {
            "namespaces": [
                {
                    "name": "tasks",
                    "subscription_type": "map",
                    "map": {"mode": "persistent", "stream_size": 3, **PAGES},
                },
                {"name": "plain"},
            ]
        },
    }
    gw = GatewayProcess(config, tmp_path_factory.mktemp("map-api")).start()
    yield gw, port
    gw.terminate()


@pytest.fixture
async def http(gateway: tuple[GatewayProcess, int]) -> AsyncIterator[Any]:
    gw = gateway[0]
    async with httpx.AsyncClient(base_url=gw.api_url, headers={"X-API-Key": gw.api_key}) as client:

        async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
            r = await client.post(f"/{method}", json=params)
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            return body

        yield call


@pytest.fixture
async def stub(gateway: tuple[GatewayProcess, int]) -> AsyncIterator[api_pb2_grpc.CentrifugoApiStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway[1]}") as channel:
        await asyncio.wait_for(channel.channel_ready(), scaled(10))
        yield api_pb2_grpc.CentrifugoApiStub(channel)


def chan() -> str:
    return f"tasks:{uuid.uuid4().hex[:8]}"


async def test_http_map_methods(http: Any) -> None:
    ch = chan()
    first = (await http("map_publish", {"channel": ch, "key": "b", "data": {"n": 1}, "tags": {"t": "x"}}))[
        "result"
    ]
    assert first["offset"] == 1 and first["epoch"]
    await http("map_publish", {"channel": ch, "key": "a", "data": {"n": 2}})
    await http("map_publish", {"channel": ch, "key": "c", "b64data": "eyJuIjozfQ=="})
    dup = (await http("map_publish", {"channel": ch, "key": "a", "data": {}, "key_mode": "if_new"}))["result"]
    assert dup == {"offset": 3, "epoch": first["epoch"], "suppressed": True, "suppress_reason": "key_exists"}
    page = (await http("map_read_state", {"channel": ch, "limit": 2}))["result"]
    assert page["cursor"] == "b" and page["offset"] == 3
    assert page["entries"] == [
        {"key": "a", "data": {"n": 2}, "offset": 2, "time": page["entries"][0]["time"]},
        {"key": "b", "data": {"n": 1}, "tags": {"t": "x"}, "offset": 1, "time": page["entries"][1]["time"]},
    ]
    rest = (await http("map_read_state", {"channel": ch, "cursor": "b", "revision_offset": 3,
                                          "revision_epoch": first["epoch"]}))["result"]  # fmt: skip
    assert [e["key"] for e in rest["entries"]] == ["c"] and "cursor" not in rest
    assert (await http("map_remove", {"channel": ch, "key": "a"}))["result"]["offset"] == 4
    stream = (
        await http("map_read_stream", {"channel": ch, "since_offset": 2, "since_epoch": first["epoch"]})
    )["result"]
    assert [(e["key"], e.get("removed", False)) for e in stream["entries"]] == [("c", False), ("a", True)]
    assert (await http("map_stats", {"channel": ch}))["result"] == {"num_keys": 2}
    assert (await http("map_clear", {"channel": ch}))["result"] == {}
    cleared = (await http("map_read_state", {"channel": ch}))["result"]
    assert cleared["entries"] == [] and cleared["epoch"] != first["epoch"]


async def test_map_write_metrics(gateway: tuple[GatewayProcess, int], http: Any) -> None:
    ch = chan()
    await http("map_publish", {"channel": ch, "key": "a", "data": 1})
    await http("map_publish", {"channel": ch, "key": "a", "data": 2, "key_mode": "if_new"})
    await http("map_remove", {"channel": ch, "key": "zz"})
    async with httpx.AsyncClient() as client:
        lines = (await client.get(f"{gateway[0].internal_url}/metrics")).text.splitlines()
    suppressed = 'centrifugo_map_broker_publish_suppressed_count{channel_namespace="",reason="key_exists"}'
    removed = 'centrifugo_map_broker_remove_suppressed_count{channel_namespace="",reason="key_not_found"}'
    assert any(line.startswith(suppressed) for line in lines)
    assert any(line.startswith(removed) for line in lines)
    assert any(line.startswith('centrifugo_node_action_count{action="map_publish"') for line in lines)


async def test_http_bad_map_requests_get_centrifugo_codes(http: Any) -> None:
    ch = chan()
    await http("map_publish", {"channel": ch, "key": "a", "data": 1})
    epoch = (await http("map_read_state", {"channel": ch}))["result"]["epoch"]
    for method, params, code in [
        ("map_publish", {"channel": ch, "data": 1}, 107),  # no key
        ("map_publish", {"channel": ch, "key": "k"}, 107),  # no data
        ("map_publish", {"channel": ch, "key": "k", "data": 1, "key_mode": "sometimes"}, 107),
        ("map_publish", {"channel": ch, "key": "k" * 1025, "data": 1}, 107),  # key too long
        ("map_publish", {"channel": ch, "key": "k", "b64data": "!!"}, 107),
        ("map_publish", {"channel": "plain:x", "key": "k", "data": 1}, 107),  # not a map
        ("map_publish", {"channel": "nowhere:x", "key": "k", "data": 1}, 102),
        ("map_remove", {"channel": ch}, 107),
        (
            "map_read_state",
            {"channel": ch, "cursor": "a", "revision_offset": 1, "revision_epoch": "other"},
            112,
        ),
        ("map_read_stream", {"channel": ch, "since_offset": 1, "since_epoch": "other"}, 112),
        ("map_read_stream", {"channel": ch, "limit": "ten"}, 107),
        ("map_stats", {}, 107),
        ("map_clear", {"channel": "plain:x"}, 107),
        ("publish", {"channel": ch, "data": 1}, 107),  # a map takes map_publish
    ]:
        body = await http(method, params)
        assert body.get("error", {}).get("code") == code, (method, params, body)
    for i in range(5):  # the stream keeps 3: a position before them is lost
        await http("map_publish", {"channel": ch, "key": f"k{i}", "data": i})
    lost = await http("map_read_stream", {"channel": ch, "since_offset": 1, "since_epoch": epoch})
    assert lost["error"]["code"] == 112
    state = (await http("map_read_state", {"channel": ch, "limit": -1}))["result"]
    assert [e["key"] for e in state["entries"]] == [
        "a",
        "k0",
        "k1",
        "k2",
        "k3",
        "k4",
    ]  # nothing else retained
    batch = await http(
        "batch", {"commands": [{"map_stats": {"channel": ch}}, {"map_remove": {"channel": ch}}]}
    )
    assert batch["replies"] == [
        {"map_stats": {"num_keys": 6}},
        {"error": {"code": 107, "message": "bad request"}},
    ]


async def test_grpc_map_methods(stub: api_pb2_grpc.CentrifugoApiStub) -> None:
    ch = chan()
    pub = await stub.MapPublish(
        pb.MapPublishRequest(channel=ch, key="k", data=orjson.dumps({"n": 1}), tags={"a": "b"}), metadata=AUTH
    )
    assert not pub.HasField("error") and pub.result.offset == 1 and pub.result.epoch
    again = await stub.MapPublish(
        pb.MapPublishRequest(channel=ch, key="k", data=b"2", version=0, key_mode="if_new"), metadata=AUTH
    )
    assert again.result.suppressed and again.result.suppress_reason == "key_exists"
    state = await stub.MapReadState(pb.MapReadStateRequest(channel=ch), metadata=AUTH)
    (entry,) = state.result.entries
    assert (entry.key, orjson.loads(entry.data), dict(entry.tags), entry.offset) == (
        "k",
        {"n": 1},
        {"a": "b"},
        1,
    )
    removed = await stub.MapRemove(pb.MapRemoveRequest(channel=ch, key="k"), metadata=AUTH)
    assert removed.result.offset == 2
    stream = await stub.MapReadStream(pb.MapReadStreamRequest(channel=ch, limit=-1), metadata=AUTH)
    assert [(e.key, e.removed) for e in stream.result.entries] == [("k", False), ("k", True)]
    assert (await stub.MapStats(pb.MapStatsRequest(channel=ch), metadata=AUTH)).result.num_keys == 0
    assert not (await stub.MapClear(pb.MapClearRequest(channel=ch), metadata=AUTH)).HasField("error")
    bad = await stub.MapReadState(
        pb.MapReadStateRequest(channel=ch, revision_epoch="x", cursor="k"), metadata=AUTH
    )
    assert bad.error.code == 112
    missing = await stub.MapPublish(pb.MapPublishRequest(channel=ch, data=b"1"), metadata=AUTH)
    assert missing.error.code == 107
    batch = await stub.Batch(
        pb.BatchRequest(commands=[pb.Command(map_stats=pb.MapStatsRequest(channel=ch))]), metadata=AUTH
    )
    assert batch.replies[0].map_stats.num_keys == 0


async def test_an_oversized_map_write_is_refused_and_keeps_nothing(
    gateway: tuple[GatewayProcess, int],
) -> None:
    gw = gateway[0]
    ch = chan()
    async with httpx.AsyncClient(base_url=gw.api_url, headers={"X-API-Key": gw.api_key}) as client:
        big = {"channel": ch, "key": "big", "data": {"blob": "x" * (11 * 1024 * 1024)}}
        r = await client.post("/map_publish", content=orjson.dumps(big))
        assert r.status_code == 413
        stats = (await client.post("/map_stats", json={"channel": ch})).json()
        assert stats == {"result": {"num_keys": 0}}
