"""The ``nats_jetstream`` consumer against a real nats-server with JetStream
(tests/helpers/brokers.py): commands acknowledged once run, poison messages acknowledged and
counted, error 100 negatively acknowledged and redelivered until it passes, publication data
mode, a deleted consumer created again."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.js.client import JetStreamContext

from gateway.api.requests import ApiError
from gateway.config.sections.consumers import NatsJetStreamConsumerSettings
from gateway.consumers.dispatch import ConsumerMetrics, Dispatcher
from gateway.consumers.nats_jetstream import NatsJetStreamConsumer
from gateway.protocol import codes
from tests.gateway.consumers.support import history, processed, running, runtime, sample
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[tuple[NatsClient, JetStreamContext, str]]:
    nc = await nats.connect(nats_url)
    stream = f"S{uuid.uuid4().hex[:10]}"
    context = nc.jetstream()
    await context.add_stream(name=stream, subjects=[f"{stream}.>"])
    yield nc, context, stream
    await context.delete_stream(stream)
    await nc.close()


def consumer(url: str, stream: str, **options: Any) -> dict[str, Any]:
    return {
        "name": "c1",
        "enabled": True,
        "type": "nats_jetstream",
        "nats_jetstream": {
            "url": url,
            "stream_name": stream,
            "durable_consumer_name": "centrifugo",
            **options,
        },
    }


async def pending(context: JetStreamContext, stream: str) -> int:
    info = await context.consumer_info(stream, "centrifugo")
    return int(info.num_pending or 0) + int(info.num_ack_pending or 0)


async def test_commands_run_and_are_acknowledged(tmp_path: Path, nats_url: str, js: Any) -> None:
    _, context, stream = js
    rt = runtime(tmp_path, [consumer(nats_url, stream, subjects=[f"{stream}.api"])])
    async with running(*rt.consumers):
        await wait_until(lambda: _has_consumer(context, stream), what="the durable consumer")
        body = json.dumps({"channel": "news", "data": 1}).encode()
        await context.publish(f"{stream}.api", body, headers={"centrifugo-method": "publish"})
        document = {"method": "publish", "payload": {"channel": "news", "data": 2}}
        await context.publish(f"{stream}.api", json.dumps(document).encode())
        await wait_until(lambda: _len_is(history(rt, "news"), 2), what="two publications")
        await wait_until(lambda: _zero(pending(context, stream)), what="both acknowledged")
        await wait_until(lambda: processed(rt) >= 2, what="both counted")  # counted after the ack
    assert await history(rt, "news") == [1, 2]
    assert processed(rt) == 2
    await rt.close()


async def test_poison_messages_are_acknowledged_counted_and_the_consumer_goes_on(
    tmp_path: Path, nats_url: str, js: Any
) -> None:
    _, context, stream = js
    rt = runtime(tmp_path, [{**consumer(nats_url, stream, deliver_policy="all"), "max_message_size": 256}])
    subject = f"{stream}.api"
    for data, method in (
        (b"{not json", "publish"),
        (b"{}", "history"),  # a read: not run by consumers
        (json.dumps({"channel": "news", "data": "x" * 300}).encode(), "publish"),
        (json.dumps({"channel": "nope:x", "data": 1}).encode(), "publish"),  # 102
        (json.dumps({"channel": "news", "data": "good"}).encode(), "publish"),
    ):
        await context.publish(subject, data, headers={"centrifugo-method": method})
    async with running(*rt.consumers):  # deliver_policy all: the messages sent before it started
        await wait_until(lambda: history(rt, "news"), what="the good message after the poison")
        await wait_until(lambda: _zero(pending(context, stream)), what="all acknowledged")
    assert await history(rt, "news") == ["good"]
    skipped = "taskcast_gateway_consumer_messages_skipped_total"
    for reason in ("malformed", "unknown_method", "oversized", "rejected"):
        assert sample(rt, skipped, reason=reason) == 1, reason
    await rt.close()


async def test_error_100_is_redelivered_until_it_passes(tmp_path: Path, nats_url: str, js: Any) -> None:
    _, context, stream = js
    rt = runtime(tmp_path, [])
    failures = 2

    async def flaky(method: str, params: object) -> dict[str, Any]:
        nonlocal failures
        if failures:
            failures -= 1
            raise ApiError(codes.ERROR_INTERNAL)
        return await rt.api.call(method, params, protocol="consuming")

    settings = NatsJetStreamConsumerSettings(
        url=nats_url, stream_name=stream, durable_consumer_name="centrifugo"
    )
    dispatcher = Dispatcher("c1", flaky, ConsumerMetrics(rt.metrics.registry), 1 << 20)
    body = json.dumps({"channel": "news", "data": "eventually", "idempotency_key": "k"}).encode()
    async with running(NatsJetStreamConsumer("c1", settings, dispatcher)):
        await wait_until(lambda: _has_consumer(context, stream), what="the durable consumer")
        await context.publish(f"{stream}.api", body, headers={"centrifugo-method": "publish"})
        await wait_until(lambda: history(rt, "news"), what="the redelivered message")
        await wait_until(lambda: _zero(pending(context, stream)), what="acknowledged at last")
    assert await history(rt, "news") == ["eventually"]
    assert sample(rt, "centrifugo_consumers_errors_total") == 2
    await rt.close()


async def test_publication_data_mode_publishes_the_data_to_the_named_channels(
    tmp_path: Path, nats_url: str, js: Any
) -> None:
    _, context, stream = js
    rt = runtime(tmp_path, [consumer(nats_url, stream, publication_data_mode={"enabled": True})])
    async with running(*rt.consumers):
        await wait_until(lambda: _has_consumer(context, stream), what="the durable consumer")
        headers = {
            "centrifugo-channels": "a,b",
            "centrifugo-idempotency-key": "k1",
            "centrifugo-tag-kind": "task",
        }
        await context.publish(f"{stream}.data", b'{"status": "done"}', headers=headers)
        await wait_until(lambda: history(rt, "b"), what="the broadcast")
    assert await history(rt, "a") == await history(rt, "b") == [{"status": "done"}]
    await rt.close()


async def test_a_deleted_consumer_is_created_again(tmp_path: Path, nats_url: str, js: Any) -> None:
    _, context, stream = js
    rt = runtime(tmp_path, [consumer(nats_url, stream)])
    async with running(*rt.consumers):
        await wait_until(lambda: _has_consumer(context, stream), what="the durable consumer")
        await context.delete_consumer(stream, "centrifugo")
        await wait_until(lambda: _has_consumer(context, stream), within=60, what="the consumer created again")
        body = json.dumps({"channel": "news", "data": 1}).encode()
        await context.publish(f"{stream}.api", body, headers={"centrifugo-method": "publish"})
        await wait_until(lambda: history(rt, "news"), what="a publication after the recreation")
    await rt.close()


async def _has_consumer(context: JetStreamContext, stream: str) -> bool:
    try:
        await context.consumer_info(stream, "centrifugo")
    except nats.js.errors.NotFoundError:
        return False
    return True


async def _len_is(values: Any, n: int) -> bool:
    return bool(len(await values) == n)


async def _zero(count: Any) -> bool:
    return bool(await count == 0)
