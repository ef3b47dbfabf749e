"""Every multi-item input of the server API is bounded, and a large request never holds the loop
(issue 28: "a large batch never holds the loop for long"). In-process: a real Node on the memory
engine and the HTTP adapter (``ApiEndpoint``), request bytes in, response bytes out.

The loop tests are deterministic: the request runs as a task next to a probe task that takes
every turn of the loop and samples how many publications were prepared; without the periodic
yield every command runs between two turns of the probe, with it at most ``YIELD_EVERY``."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine, Sequence
from typing import Any

import orjson
import pytest

from gateway.api.executor import YIELD_EVERY, ServerApi
from gateway.api.http import ApiEndpoint
from gateway.api.requests import MAX_BROADCAST_CHANNELS, MAX_PATTERN_LENGTH, MAX_TAGS, MAX_WHITELIST
from gateway.engine.base import EngineError, PublishItem, PublishResult
from gateway.engine.memory import MemoryBroker
from gateway.node import Node
from httpwire.inline import Deferred
from tests.gateway.recording import INSECURE, Harness
from tests.gateway.test_api_inline_fast import completed_inline

KEY = b"bounds-key"
ENV = {**INSECURE, "TASKCAST_HTTP_API_KEY": KEY.decode()}
HEADERS = [(b"host", b"gw"), (b"x-api-key", KEY)]
LIMIT = 1000
"""``http_api.max_batch_commands``'s default."""


class ReferenceBroker(MemoryBroker):
    """The memory engine through the general (coroutine) path of ``ServerApi``."""

    publishes_inline = False


class RunsBroker(MemoryBroker):
    """A ``BatchBroker`` (as the Redis engine): each run of publishes is one ``publish_many``."""

    publishes_inline = False

    async def publish_many(self, items: Sequence[PublishItem]) -> list[PublishResult | EngineError]:
        return [self.publish_now(item) for item in items]


BROKERS = {"inline": MemoryBroker, "general": ReferenceBroker, "runs": RunsBroker}


class Counted:
    """Counts the publications a node prepares (``Node.publish_item``: every publish path)."""

    def __init__(self, node: Node) -> None:
        self.n = 0
        prepare = node.publish_item

        def counted(*args: Any, **kwargs: Any) -> PublishItem:
            self.n += 1
            return prepare(*args, **kwargs)

        node.publish_item = counted  # type: ignore[method-assign]


def gateway(
    broker: str = "inline", env: dict[str, str] | None = None
) -> tuple[Harness, ApiEndpoint, Counted]:
    h = Harness({**ENV, **(env or {})}, broker=BROKERS[broker]())
    endpoint = ApiEndpoint(ServerApi(h.node, h.settings), h.settings.http_api)
    return h, endpoint, Counted(h.node)


async def answer(endpoint: ApiEndpoint, method: str, params: object) -> tuple[int, Any]:
    body = params if isinstance(params, bytes) else orjson.dumps(params)
    response = endpoint.respond_inline(method, "POST", HEADERS, b"", body)
    if isinstance(response, Deferred):
        response = await response.coro
    status, data, _ = response
    return status, orjson.loads(data) if status == 200 and method else data


async def most_between_probes(counted: Counted, request: Coroutine[Any, Any, Any]) -> tuple[int, Any]:
    """(the most publications prepared between two turns of a probe task that takes every turn
    of the loop while ``request`` runs, ``request``'s result)."""
    samples: list[int] = []
    task = asyncio.ensure_future(request)

    async def probe() -> None:
        while not task.done():
            samples.append(counted.n)
            await asyncio.sleep(0)
        samples.append(counted.n)

    probing = asyncio.ensure_future(probe())
    result = await task
    await probing
    return max(b - a for a, b in itertools.pairwise(samples)), result


def publishes(n: int, channel: str = "c") -> list[dict[str, Any]]:
    return [{"publish": {"channel": channel, "data": {"n": i}}} for i in range(n)]


# --- the batch bound ---------------------------------------------------------------------------


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("broker", sorted(BROKERS))
async def test_a_batch_past_the_bound_is_refused_whole_with_107(broker: str, parallel: bool):
    h, endpoint, counted = gateway(broker)
    status, body = await answer(endpoint, "batch", {"commands": publishes(LIMIT + 1), "parallel": parallel})
    assert status == 200 and body["error"]["code"] == 107, body
    assert counted.n == 0  # nothing ran
    assert 'method="batch"' in h.node.metrics.render().decode()  # counted in api_errors
    status, body = await answer(endpoint, "batch", {"commands": publishes(LIMIT), "parallel": parallel})
    assert status == 200 and len(body["replies"]) == LIMIT and counted.n == LIMIT
    assert all("publish" in reply for reply in body["replies"])


@pytest.mark.parametrize("limit", [1, 5])
async def test_the_batch_bound_is_the_option(limit: int):
    _, endpoint, counted = gateway(env={"TASKCAST_HTTP_API_MAX_BATCH_COMMANDS": str(limit)})
    _status, body = await answer(endpoint, "batch", {"commands": publishes(limit + 1)})
    assert body["error"]["code"] == 107 and counted.n == 0
    _status, body = await answer(endpoint, "batch", {"commands": publishes(limit)})
    assert len(body["replies"]) == limit == counted.n


async def test_a_legacy_body_past_the_bound_is_refused_whole():
    _, endpoint, counted = gateway(env={"TASKCAST_HTTP_API_MAX_BATCH_COMMANDS": "3"})
    line = orjson.dumps({"method": "publish", "params": {"channel": "c", "data": {}}})
    status, _ = await answer(endpoint, "", b"\n".join([line] * 4))
    assert status == 400 and counted.n == 0
    status, body = await answer(endpoint, "", b"\n".join([line] * 3) + b"\n\n")
    assert status == 200 and len(body.split(b"\n")) == 3 and counted.n == 3


# --- bounds inside one command -----------------------------------------------------------------


def broadcast(channels: int) -> dict[str, Any]:
    return {"channels": [f"b{i}" for i in range(channels)], "data": {}}


def tagged(tags: int) -> dict[str, Any]:
    return {"channel": "t", "data": {}, "tags": {f"k{i}": "v" for i in range(tags)}}


def whitelist(n: int) -> dict[str, Any]:
    return {"user": "u", "whitelist": [f"client-{i}" for i in range(n)]}


CASES = {
    "broadcast channels": ("broadcast", broadcast, MAX_BROADCAST_CHANNELS),
    "publish tags": ("publish", tagged, MAX_TAGS),
    "broadcast tags": ("broadcast", lambda n: {**broadcast(1), "tags": tagged(n)["tags"]}, MAX_TAGS),
    "disconnect whitelist": ("disconnect", whitelist, MAX_WHITELIST),
    "channels pattern": ("channels", lambda n: {"pattern": "*" * n}, MAX_PATTERN_LENGTH),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_multi_item_field_is_bounded(case: str):
    method, params, bound = CASES[case]
    _, endpoint, counted = gateway()
    status, body = await answer(endpoint, method, params(bound + 1))
    assert status == 200 and body["error"]["code"] == 107, body
    assert counted.n == 0
    status, body = await answer(endpoint, method, params(bound))
    assert status == 200 and "result" in body, body


@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_bound_holds_inside_a_batch(case: str):
    method, params, bound = CASES[case]
    _, endpoint, _ = gateway("general")
    _status, body = await answer(
        endpoint, "batch", {"commands": [{method: params(bound + 1)}, {method: params(1)}]}
    )
    refused, ok = body["replies"]
    assert refused["error"]["code"] == 107 and method in ok, body


# --- the loop is served during a large request -------------------------------------------------


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("broker", sorted(BROKERS))
async def test_a_large_batch_lets_the_loop_serve_others(broker: str, parallel: bool):
    _, endpoint, counted = gateway(broker)
    request = endpoint.batch_body({"commands": publishes(LIMIT), "parallel": parallel})
    ran, body = await most_between_probes(counted, request)
    assert 0 < ran <= YIELD_EVERY, ran
    assert len(orjson.loads(body)["replies"]) == LIMIT == counted.n


async def test_a_large_batch_through_the_inline_http_path_lets_the_loop_serve_others():
    """The path driven outside any task takes at most ``YIELD_EVERY`` publishes; a larger
    batch runs in a task and yields."""
    _, endpoint, counted = gateway()
    small = endpoint.respond_inline(
        "batch", "POST", HEADERS, b"", orjson.dumps({"commands": publishes(YIELD_EVERY)})
    )
    assert completed_inline(small) is not None and counted.n == YIELD_EVERY
    counted.n = 0
    large = endpoint.respond_inline(
        "batch", "POST", HEADERS, b"", orjson.dumps({"commands": publishes(LIMIT)})
    )
    assert isinstance(large, Deferred) and not large.inline and counted.n == 0
    ran, (_, body, _) = await most_between_probes(counted, large.coro)
    assert 0 < ran <= YIELD_EVERY and len(orjson.loads(body)["replies"]) == LIMIT


async def test_a_large_broadcast_lets_the_loop_serve_others():
    _, endpoint, counted = gateway()
    request = endpoint.api.call("broadcast", broadcast(MAX_BROADCAST_CHANNELS))
    ran, result = await most_between_probes(counted, request)
    assert 0 < ran <= YIELD_EVERY, ran
    assert len(result["responses"]) == MAX_BROADCAST_CHANNELS == counted.n


async def test_a_large_legacy_body_lets_the_loop_serve_others():
    _, endpoint, counted = gateway()
    line = orjson.dumps({"method": "publish", "params": {"channel": "c", "data": {}}})
    deferred = endpoint.respond_inline("", "POST", HEADERS, b"", b"\n".join([line] * LIMIT))
    assert isinstance(deferred, Deferred)
    ran, (status, body, _) = await most_between_probes(counted, deferred.coro)
    assert 0 < ran <= YIELD_EVERY and status == 200 and len(body.split(b"\n")) == LIMIT


def test_a_huge_batch_is_refused_without_a_garbage_collection():
    """A 10 MiB batch of tiny commands (~260,000) is parsed with the cyclic collector paused and
    refused (107) and freed inside that window: no collection runs for it (before: the
    allocations triggered collections that cost twice the parse)."""
    import gc

    _, endpoint, counted = gateway()
    command = b'{"publish":{"channel":"c","data":1}}'
    body = b'{"commands":[' + b",".join([command] * ((10 << 20) // (len(command) + 1) - 1)) + b"]}"
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        status, data, _ = endpoint.respond_inline("batch", "POST", HEADERS, b"", body)  # type: ignore[misc]
    finally:
        gc.callbacks.remove(seen)
    assert status == 200 and orjson.loads(data)["error"]["code"] == 107
    assert counted.n == 0 and collections == []
    assert gc.isenabled()
