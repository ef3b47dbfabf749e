"""What the consumer tests share: an in-process gateway runtime (memory engine, history on every
channel) built from a ``consumers`` list, its history read through the server API, and a
consumer task that is always cancelled and awaited."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from gateway.app import Runtime
from gateway.config.loading import load_settings
from gateway.consumers import Consumer


def runtime(tmp_path: Path, consumers: list[dict[str, Any]], **extra: Any) -> Runtime:
    config = {
        "channel": {
            "without_namespace": {"history_size": 1000, "history_ttl": "300s"},
            "namespaces": [{"name": "ns", "history_size": 1000, "history_ttl": "300s"}],
        },
        "consumers": consumers,
        **extra,
    }
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(config))
    settings, _ = load_settings(str(path), {})
    return Runtime(settings)


async def history(rt: Runtime, channel: str) -> list[Any]:
    """The data of ``channel``'s publications, oldest first."""
    result = await rt.api.call("history", {"channel": channel, "limit": 1000})
    return [pub["data"] for pub in orjson.loads(orjson.dumps(result))["publications"]]


def sample(rt: Runtime, name: str, consumer: str = "c1", **labels: str) -> float:
    value = rt.metrics.registry.get_sample_value(name, {"consumer_name": consumer, **labels})
    return value or 0.0


def processed(rt: Runtime, consumer: str = "c1") -> float:
    """``centrifugo_consumers_messages_processed_total``: a consumer counts a message after its
    acknowledgement (XACK, the ack, the round's COMMIT), so the broker can show it done a moment
    before it is counted; a test waits for the count before it stops the consumer."""
    return sample(rt, "centrifugo_consumers_messages_processed_total", consumer)


@contextlib.asynccontextmanager
async def running(*consumers: Consumer) -> AsyncIterator[None]:
    """The consumers run as tasks for the block; cancelled and awaited after it."""
    tasks = [asyncio.create_task(consumer.run()) for consumer in consumers]
    try:
        yield
        for task in tasks:
            assert not task.done(), task  # a consumer never stops on its own
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
