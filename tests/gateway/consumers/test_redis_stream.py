"""The ``redis_stream`` consumer against the suite's real Redis: commands acknowledged once run,
a crashed node's pending message claimed by a live one after ``visibility_timeout`` (at least
once) with the idempotency key making a repeat harmless, poison messages acknowledged and counted
while the consumer goes on, publication data mode, a deleted stream recreated."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.gateway.consumers.support import history, processed, running, runtime, sample
from tests.helpers.otlp import KIND_CONSUMER, STATUS_ERROR, Receiver, Span
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.Redis.from_url(redis_url)
    yield r
    await r.aclose()


@pytest.fixture
def names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"tc:consumers:{tag}:stream", f"group_{tag}"


def consumer(redis_url: str, stream: str, group: str, **options: Any) -> dict[str, Any]:
    return {
        "name": "c1",
        "enabled": True,
        "type": "redis_stream",
        "redis_stream": {"address": [redis_url], "streams": [stream], "consumer_group": group, **options},
    }


async def pending(client: aioredis.Redis, stream: str, group: str) -> int:
    return int((await client.xpending(stream, group))["pending"])


async def test_commands_run_and_are_acknowledged(
    tmp_path: Path, redis_url: str, client: aioredis.Redis, names: tuple[str, str]
) -> None:
    stream, group = names
    rt = runtime(tmp_path, [consumer(redis_url, stream, group, num_workers=2)])
    async with running(*rt.consumers):
        await wait_until(lambda: _group_exists(client, stream, group), what="the consumer group")
        await client.xadd(
            stream, {"method": "publish", "payload": json.dumps({"channel": "news", "data": 1})}
        )
        document = {"method": "publish", "payload": {"channel": "news", "data": 2}}
        await client.xadd(stream, {"payload": json.dumps(document)})  # method inside the document
        await wait_until(lambda: _len_is(history(rt, "news"), 2), what="two publications")
        await wait_until(lambda: _zero(pending(client, stream, group)), what="both acknowledged")
        await wait_until(lambda: processed(rt) >= 2, what="both counted")  # counted after XACK
    assert sorted(await history(rt, "news")) == [1, 2]
    assert processed(rt) == 2
    await rt.close()
    await client.delete(stream)


async def test_a_crashed_nodes_pending_message_is_claimed_and_published_once(
    tmp_path: Path, redis_url: str, client: aioredis.Redis, names: tuple[str, str]
) -> None:
    stream, group = names
    await client.xgroup_create(stream, group, id="$", mkstream=True)
    body = json.dumps({"channel": "news", "data": "once", "idempotency_key": "task-1:v1:news"})
    await client.xadd(stream, {"method": "publish", "payload": body})
    # A node read it into its pending list and died before XACK (kill -9 leaves exactly this).
    claimed = await client.xreadgroup(group, "crashed-node", {stream: ">"}, count=1)
    assert claimed and await pending(client, stream, group) == 1
    # The producer's own retry of the same publication (at least once upstream too).
    await client.xadd(stream, {"method": "publish", "payload": body})
    rt = runtime(tmp_path, [consumer(redis_url, stream, group, visibility_timeout="300ms")])
    async with running(*rt.consumers):
        await wait_until(
            lambda: _zero(pending(client, stream, group)), what="the crashed node's message claimed"
        )
        await wait_until(lambda: history(rt, "news"), what="the publication")
        await wait_until(lambda: processed(rt) >= 2, what="both deliveries counted")  # after XACK
    assert await history(rt, "news") == ["once"]  # two deliveries, one publication: the idempotency key
    assert processed(rt) == 2
    await rt.close()
    await client.delete(stream)


async def test_poison_messages_are_acknowledged_counted_and_the_consumer_goes_on(
    tmp_path: Path, redis_url: str, client: aioredis.Redis, names: tuple[str, str]
) -> None:
    stream, group = names
    rt = runtime(tmp_path, [{**consumer(redis_url, stream, group), "max_message_size": 256}])
    async with running(*rt.consumers):
        await wait_until(lambda: _group_exists(client, stream, group), what="the consumer group")
        for fields in (
            {"method": "publish", "payload": "{not json"},
            {"method": "info", "payload": "{}"},  # a read: not run by consumers
            {"method": "publish", "payload": json.dumps({"channel": "news", "data": "x" * 300})},
            {"method": "publish"},  # no payload field
            {"method": "publish", "payload": json.dumps({"channel": "news"})},  # refused: 107
            {"method": "publish", "payload": json.dumps({"channel": "news", "data": "good"})},
        ):
            await client.xadd(stream, fields)  # type: ignore[arg-type]
        await wait_until(lambda: history(rt, "news"), what="the good message after the poison")
        await wait_until(lambda: _zero(pending(client, stream, group)), what="all acknowledged")
    assert await history(rt, "news") == ["good"]
    skipped = "taskcast_gateway_consumer_messages_skipped_total"
    for reason in ("malformed", "unknown_method", "oversized", "no_payload", "rejected"):
        assert sample(rt, skipped, reason=reason) == 1, reason
    await rt.close()
    await client.delete(stream)


async def test_publication_data_mode_publishes_the_payload_to_the_named_channels(
    tmp_path: Path, redis_url: str, client: aioredis.Redis, names: tuple[str, str]
) -> None:
    stream, group = names
    rt = runtime(tmp_path, [consumer(redis_url, stream, group, publication_data_mode={"enabled": True})])
    async with running(*rt.consumers):
        await wait_until(lambda: _group_exists(client, stream, group), what="the consumer group")
        await client.xadd(
            stream,
            {
                "payload": json.dumps({"status": "done"}),
                "centrifugo-channels": "a,b",
                "centrifugo-idempotency-key": "k1",
                "centrifugo-tag-kind": "task",
            },
        )
        await wait_until(lambda: history(rt, "b"), what="the broadcast")
    assert await history(rt, "a") == await history(rt, "b") == [{"status": "done"}]
    raw = await rt.api.call("history", {"channel": "a", "limit": 1})
    assert raw["publications"][0]["tags"] == {"kind": "task"}
    await rt.close()
    await client.delete(stream)


async def test_a_deleted_stream_and_group_are_created_again(
    tmp_path: Path, redis_url: str, client: aioredis.Redis, names: tuple[str, str]
) -> None:
    stream, group = names
    rt = runtime(tmp_path, [consumer(redis_url, stream, group)])
    async with running(*rt.consumers):
        await wait_until(lambda: _group_exists(client, stream, group), what="the consumer group")
        await client.delete(stream)
        await wait_until(lambda: _group_exists(client, stream, group), what="the group created again")
        await client.xadd(
            stream, {"method": "publish", "payload": json.dumps({"channel": "news", "data": 1})}
        )
        await wait_until(lambda: history(rt, "news"), what="a publication after the recreation")
    await rt.close()
    await client.delete(stream)


async def _group_exists(client: aioredis.Redis, stream: str, group: str) -> bool:
    try:
        groups = await client.xinfo_groups(stream)
    except aioredis.ResponseError:
        return False
    return any(g["name"].decode() == group for g in groups)


async def _len_is(values: Any, n: int) -> bool:
    return bool(len(await values) == n)


async def _zero(count: Any) -> bool:
    return bool(await count == 0)


async def test_opentelemetry_consuming_traces_each_command(
    tmp_path: Path,
    redis_url: str,
    client: aioredis.Redis,
    names: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``opentelemetry.consuming``: a consumer span per command, exported over OTLP (a receiver in
    the test); a command the API refuses marks its span as an error."""
    pytest.importorskip("opentelemetry.sdk.trace")
    receiver = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    stream, group = names
    otel = {"opentelemetry": {"enabled": True, "consuming": True}}
    rt = runtime(tmp_path, [consumer(redis_url, stream, group)], **otel)
    try:
        async with running(*rt.consumers):
            await wait_until(lambda: _group_exists(client, stream, group), what="the consumer group")
            await client.xadd(
                stream, {"method": "publish", "payload": json.dumps({"channel": "news", "data": 1})}
            )
            await client.xadd(
                stream, {"method": "publish", "payload": json.dumps({"channel": "news"})}
            )  # 107

            def consumed() -> list[Span] | None:
                spans = [s for s in receiver.spans if s.name == "consuming.publish"]
                return spans if len(spans) == 2 else None

            spans = await wait_until(consumed, what="two consumer spans")
        assert {s.kind for s in spans} == {KIND_CONSUMER} and {s.service for s in spans} == {"centrifugo"}
        assert sorted(s.status for s in spans) == [0, STATUS_ERROR]
    finally:
        await rt.close()
        receiver.close()
        await client.delete(stream)
