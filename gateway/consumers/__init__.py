"""Async consumers (Centrifugo's ``consumers``): server API commands read from a PostgreSQL
outbox table, a Redis Stream or NATS JetStream and run through the server API executor, at
least once (docs/consumers.md).

``build_consumers`` makes one runner per enabled consumer; the composition root runs each
``run()`` as a lifespan task (it returns only when cancelled: failures are logged, counted and
retried). ``dispatch`` is the part every type shares: decoding, bounds, Centrifugo's verdict.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry

from gateway.config.sections.consumers import ConsumerSettings
from gateway.consumers.dispatch import ConsumerMetrics, Dispatcher, Execute


class Consumer(Protocol):
    name: str

    async def run(self) -> None:
        """Consume until cancelled; never returns otherwise."""


def build_consumers(
    consumers: tuple[ConsumerSettings, ...], execute: Execute, registry: CollectorRegistry, node_id: str
) -> list[Consumer]:
    """One runner per enabled consumer of the (validated) settings, its metrics on
    ``registry``; ``node_id`` names this node in Redis consumer groups. Nothing connects yet."""
    enabled = [c for c in consumers if c.enabled]
    if not enabled:
        return []
    metrics = ConsumerMetrics(registry)
    runners: list[Consumer] = []
    for c in enabled:
        metrics.init(c.name)
        dispatcher = Dispatcher(c.name, execute, metrics, c.max_message_size)
        if c.type == "postgresql":
            from gateway.consumers.postgresql import PostgresConsumer

            runners.append(PostgresConsumer(c.name, c.postgresql, dispatcher))
        elif c.type == "redis_stream":
            from gateway.consumers.redis_stream import RedisStreamConsumer

            runners.append(RedisStreamConsumer(c.name, c.redis_stream, dispatcher, node_id))
        elif c.type == "nats_jetstream":
            from gateway.consumers.nats_jetstream import NatsJetStreamConsumer

            runners.append(NatsJetStreamConsumer(c.name, c.nats_jetstream, dispatcher))
        else:  # consumer_checks refuses every other enabled type at load
            raise ValueError(f"consumers[{c.name}].type: {c.type!r} cannot run")
    return runners


__all__ = ["Consumer", "build_consumers"]
