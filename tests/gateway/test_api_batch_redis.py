"""The server API's sequential ``batch`` on the Redis engine (``ServerApi.execute_batch``,
``Node.publish_many``, gateway/engine/redis_batch.py): runs of publishes go to Redis as one
pipeline, with the replies, errors and order of one publish per command. Real Redis
(``TASKCAST_TEST_REDIS_URL``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.api.executor import ServerApi
from gateway.engine.redis import RedisShard
from tests.gateway.recording import Harness
from tests.helpers import redis_engine

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


def as_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[ServerApi]:
    config = redis_engine.settings(redis_url, prefix=redis_engine.unique_prefix())
    async with redis_engine.running(redis_engine.broker(config)) as broker:
        h = Harness(broker=broker)
        yield ServerApi(h.node, h.settings)


@pytest.fixture
def publish_round_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``op`` of every Redis call made for publishing."""
    calls: list[str] = []
    original = RedisShard.call

    async def counted(self: RedisShard, operation: Any, *, op: str = "command", proof: bool = True) -> Any:
        if op == "publish":
            calls.append(op)
        return await original(self, operation, op=op, proof=proof)

    monkeypatch.setattr(RedisShard, "call", counted)
    return calls


async def test_a_batch_of_publishes_is_one_round_trip_with_per_command_replies(api, publish_round_trips):
    commands: list[object] = [{"publish": {"channel": f"c{i % 10}", "data": {"n": i}}} for i in range(100)]
    replies = await api.batch(commands, parallel=False)
    assert len(publish_round_trips) == 1
    assert [r["publish"]["offset"] for r in replies] == [i // 10 + 1 for i in range(100)]
    history = as_json(await api.call("history", {"channel": "c3", "limit": -1}))
    assert [p["data"]["n"] for p in history["publications"]] == list(range(3, 100, 10))


async def test_errors_and_other_methods_keep_their_place(api, publish_round_trips):
    commands: list[object] = [
        {"publish": {"channel": "a", "data": 1}},
        {"publish": {"channel": "undefined:x", "data": 2}},
        {"publish": {"channel": "a"}},
        {"history": {"channel": "a", "limit": -1}},
        {"publish": {"channel": "a", "data": 3, "idempotency_key": "k"}},
        {"publish": {"channel": "a", "data": 3, "idempotency_key": "k"}},
        "not a command",
        {"publish": {"channel": "a", "data": 4, "skip_history": True}},
    ]
    replies = as_json(await api.batch(commands, parallel=False))
    assert replies[0]["publish"]["offset"] == 1
    assert replies[1] == {"error": {"code": 102, "message": "unknown channel"}}
    assert replies[2] == {"error": {"code": 107, "message": "bad request"}}
    # The history read ran after the first publish and before the later ones.
    assert [p["data"] for p in replies[3]["history"]["publications"]] == [1]
    assert replies[4] == replies[5] and replies[4]["publish"]["offset"] == 2
    assert replies[6] == {"error": {"code": 107, "message": "bad request"}}
    assert replies[7] == {"publish": {}}
    assert len(publish_round_trips) == 2  # the run before the history read, and the one after
