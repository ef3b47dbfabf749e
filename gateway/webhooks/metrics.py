"""The webhook metrics, on the gateway's registry (docs/webhooks.md): events sent and dropped,
requests by result, request latency, events waiting. Taskcast names (no Centrifugo counterpart)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WebhookMetrics:
    """Every metric labelled by ``webhook`` (the ``webhooks[].name``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        ns = "taskcast_gateway_webhook"
        self.sent = Counter(
            f"{ns}_events_sent", "Lifecycle events delivered (2xx).", ["webhook"], registry=registry
        )
        self.dropped = Counter(
            f"{ns}_events_dropped",
            "Lifecycle events dropped: the queue was full, the receiver refused the batch, or shutdown.",
            ["webhook"],
            registry=registry,
        )
        self.requests = Counter(
            f"{ns}_requests",
            "Webhook POSTs by result: ok, retry (timeout, connection failure, 408/425/429/5xx), refused.",
            ["webhook", "result"],
            registry=registry,
        )
        self.duration = Histogram(
            f"{ns}_request_duration_seconds",
            "Webhook POST latency, to the response headers.",
            ["webhook"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self._queued = Gauge(
            f"{ns}_queued_events", "Lifecycle events waiting for delivery.", ["webhook"], registry=registry
        )
        self.occupancy_errors = Counter(
            f"{ns}_occupancy_errors",
            "Failed occupancy updates (the node resyncs its membership).",
            registry=registry,
        )

    def watch_queue(self, webhook: str, size: Callable[[], int]) -> None:
        self._queued.labels(webhook).set_function(size)


__all__ = ["WebhookMetrics"]
