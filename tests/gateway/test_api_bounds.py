"""The server API's batch bound on a real gateway process (issue 28): ``http_api.max_batch_commands``
and ``grpc_api.max_batch_commands`` (Taskcast extensions) refuse a larger batch whole, before any
command runs: HTTP error 107 (the legacy ``POST /api`` body: 400), gRPC ``INVALID_ARGUMENT``
(``BatchResponse`` has no error field). A batch at the bound runs. The per-field bounds
(broadcast channels, tags, whitelist, channels pattern) are answered 107 over both APIs. The
in-process tests (test_api_bounds_inprocess.py) cover every executor path and the loop yields."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gateway.api.grpc import api_pb2 as pb
from gateway.api.grpc import api_pb2_grpc
from gateway.api.requests import MAX_BROADCAST_CHANNELS, MAX_TAGS
from tests.support import GatewayProcess, free_port, scaled

KEY = "bounds-grpc-key"
AUTH = (("authorization", f"apikey {KEY}"),)
HTTP_LIMIT = 50
GRPC_LIMIT = 40


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, int]]:
    port = free_port()
    config: dict[str, Any] = {
        "client": {"insecure": True},
        "http_api": {"max_batch_commands": HTTP_LIMIT},
        "grpc_api": {"enabled": True, "port": port, "key": KEY, "max_batch_commands": GRPC_LIMIT},
        "channel": {"without_namespace": {"history_size": 10, "history_ttl": "300s"}},
    }
    gw = GatewayProcess(config, tmp_path_factory.mktemp("bounds")).start()
    try:
        yield gw, port
    finally:
        gw.terminate()


@pytest.fixture
async def stub(gateway: tuple[GatewayProcess, int]) -> AsyncIterator[api_pb2_grpc.CentrifugoApiStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway[1]}") as channel:
        await asyncio.wait_for(channel.channel_ready(), scaled(10))
        yield api_pb2_grpc.CentrifugoApiStub(channel)


async def post(gw: GatewayProcess, method: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        return await http.post(
            f"{gw.api_url}/{method}".rstrip("/"), content=content, headers={"X-API-Key": gw.api_key}
        )


async def top(gw: GatewayProcess, channel: str) -> int:
    answer = await post(gw, "history", {"channel": channel, "limit": 0})
    offset: int = answer.json()["result"].get("offset", 0)
    return offset


def commands(n: int, channel: str) -> list[dict[str, Any]]:
    return [{"publish": {"channel": channel, "data": {"n": i}}} for i in range(n)]


@pytest.mark.parametrize("parallel", [False, True])
async def test_http_batch_past_the_bound_is_107_and_nothing_runs(
    gateway: tuple[GatewayProcess, int], parallel: bool
):
    gw, _ = gateway
    channel = f"http-{parallel}"
    answer = await post(gw, "batch", {"commands": commands(HTTP_LIMIT + 1, channel), "parallel": parallel})
    assert answer.status_code == 200 and answer.json()["error"]["code"] == 107, answer.text
    assert await top(gw, channel) == 0
    answer = await post(gw, "batch", {"commands": commands(HTTP_LIMIT, channel), "parallel": parallel})
    assert len(answer.json()["replies"]) == HTTP_LIMIT
    assert await top(gw, channel) == HTTP_LIMIT


async def test_legacy_body_past_the_bound_is_400_and_nothing_runs(gateway: tuple[GatewayProcess, int]):
    gw, _ = gateway
    line = orjson.dumps({"method": "publish", "params": {"channel": "legacy", "data": {}}})
    answer = await post(gw, "", b"\n".join([line] * (HTTP_LIMIT + 1)))
    assert answer.status_code == 400
    assert await top(gw, "legacy") == 0


async def test_grpc_batch_past_the_bound_is_invalid_argument_and_nothing_runs(
    gateway: tuple[GatewayProcess, int], stub: api_pb2_grpc.CentrifugoApiStub
):
    gw, _ = gateway

    def batch(n: int) -> Any:
        return pb.BatchRequest(
            commands=[pb.Command(publish=pb.PublishRequest(channel="grpc", data=b"{}")) for _ in range(n)]
        )

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Batch(batch(GRPC_LIMIT + 1), metadata=AUTH)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await top(gw, "grpc") == 0
    answer = await stub.Batch(batch(GRPC_LIMIT), metadata=AUTH)
    assert len(answer.replies) == GRPC_LIMIT and await top(gw, "grpc") == GRPC_LIMIT
    # The HTTP bound (50) is not the gRPC one (40).
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Batch(batch(HTTP_LIMIT), metadata=AUTH)


async def test_field_bounds_over_both_apis(
    gateway: tuple[GatewayProcess, int], stub: api_pb2_grpc.CentrifugoApiStub
):
    gw, _ = gateway
    channels = [f"f{i}" for i in range(MAX_BROADCAST_CHANNELS + 1)]
    answer = await post(gw, "broadcast", {"channels": channels, "data": {}})
    assert answer.json()["error"]["code"] == 107
    reply = await stub.Broadcast(pb.BroadcastRequest(channels=channels, data=b"{}"), metadata=AUTH)
    assert reply.error.code == 107
    tags = {f"k{i}": "v" for i in range(MAX_TAGS + 1)}
    answer = await post(gw, "publish", {"channel": "f0", "data": {}, "tags": tags})
    assert answer.json()["error"]["code"] == 107
    published = await stub.Publish(pb.PublishRequest(channel="f0", data=b"{}", tags=tags), metadata=AUTH)
    assert published.error.code == 107
    assert await top(gw, "f0") == 0
