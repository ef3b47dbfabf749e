"""Prometheus metrics under Centrifugo's names (PROTOCOL.md §8), on a registry owned by the app.

Only the metrics Taskcast produces are registered; label sets follow Centrifugo's so existing
dashboards keep working. ``channel_namespace`` labels are always "" (Centrifugo's default with
namespace labels off), which keeps cardinality bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

NS = "centrifugo"

NodeCounts = Callable[[], tuple[int, int, int, int, int, bool]]
"""Returns (clients, users, subscriptions, channels, live nodes, engine healthy) of this node."""


class Metrics:
    """Counters and histograms the gateway updates on its paths."""

    def __init__(self, version: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        build = Gauge("node_build", "Node build info.", ["version"], namespace=NS, registry=r)
        build.labels(version).set(1)
        self.action_count = _ActionCounts()
        r.register(self.action_count)
        self.messages_sent_count = Counter(
            "node_messages_sent_count",
            "Number of messages sent to clients.",
            ["type", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.pub_sub_lag = Histogram(
            "node_pub_sub_lag_seconds",
            "Lag from publish to delivery to local subscribers.",
            namespace=NS,
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.connections_accepted = Counter(
            "client_connections_accepted",
            "Accepted client connections.",
            ["transport", "accept_protocol", "client_name", "client_version"],
            namespace=NS,
            registry=r,
        )
        self.subscriptions_accepted = Counter(
            "client_subscriptions_accepted",
            "Accepted subscriptions.",
            ["client_name", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.command_duration = Histogram(
            "client_command_duration_seconds_histogram",
            "Client command duration.",
            ["method", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.reply_errors = Counter(
            "client_num_reply_errors",
            "Client command error replies.",
            ["method", "code", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.server_disconnects = Counter(
            "client_num_server_disconnects",
            "Server-initiated disconnects.",
            ["code"],
            namespace=NS,
            registry=r,
        )
        self.server_unsubscribes = Counter(
            "client_num_server_unsubscribes",
            "Server-initiated unsubscribes.",
            ["code", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.recover = Counter(
            "client_recover",
            "Recovery attempts.",
            ["recovered", "channel_namespace", "has_recovered_publications"],
            namespace=NS,
            registry=r,
        )
        self.transport_messages_sent = Counter(
            "transport_messages_sent",
            "Frames written to transports.",
            ["transport", "frame_type", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.api_duration = Histogram(
            "api_command_duration_seconds_histogram",
            "Server API command duration.",
            ["protocol", "method"],
            namespace=NS,
            registry=r,
        )
        self.api_errors = Counter(
            "api_command_errors_total",
            "Server API errors.",
            ["protocol", "method", "error"],
            namespace=NS,
            registry=r,
        )
        self.engine_errors = Counter(
            "node_engine_errors",
            "Failed engine (Redis) commands, by operation: one per failure (the log line is once "
            "per state change).",
            ["operation"],
            namespace=NS,
            registry=r,
        )
        # Centrifugo's proxy metrics (internal/proxy/metrics.go), labels protocol/type/name.
        self.proxy_duration = Histogram(
            "proxy_duration_seconds_histogram",
            "Duration of proxy call.",
            ["protocol", "type", "name"],
            namespace=NS,
            registry=r,
        )
        self.proxy_errors = Counter(
            "proxy_errors", "Proxy call error count.", ["protocol", "type", "name"], namespace=NS, registry=r
        )
        self.proxy_inflight = Gauge(
            "proxy_inflight_requests",
            "Proxy calls in flight.",
            ["protocol", "type", "name"],
            namespace=NS,
            registry=r,
        )
        self._sent_pub = self.messages_sent_count.labels("publication", "")
        self._api_timers: dict[tuple[str, str], Histogram] = {}
        self.registry.register(_AsyncioTasks())

    def register_node_gauges(self, collector: Collector) -> None:
        self.registry.register(collector)

    def action(self, action: str, channel: str) -> None:
        counts = self.action_count.counts
        n = counts.get(action)
        if n is None:
            self.action_count.created[action] = time.time()
            n = 0
        counts[action] = n + 1

    def api_timer(self, protocol: str, method: str) -> Histogram:
        """The ``api_command_duration`` child of (protocol, method), bound once: a labels()
        lookup per call costs more than the observation itself."""
        key = (protocol, method)
        child = self._api_timers.get(key)
        if child is None:
            child = self._api_timers[key] = self.api_duration.labels(protocol, method)
        return child

    def messages_sent(self, channel: str, n: int) -> None:
        if n:
            self._sent_pub.inc(n)

    def observe_pub_lag(self, seconds: float) -> None:
        self.pub_sub_lag.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class NodeGauges(Collector):
    """Gauges read from the hub at scrape time (no bookkeeping on the hot path)."""

    def __init__(self, read: NodeCounts) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        clients, users, subs, channels, nodes, healthy = self.read()
        for name, value, doc in (
            ("node_num_clients", clients, "Number of clients connected."),
            ("node_num_users", users, "Number of unique users connected."),
            ("node_num_subscriptions", subs, "Number of subscriptions."),
            ("node_num_channels", channels, "Number of channels with one or more subscribers."),
            ("node_num_nodes", nodes, "Number of nodes in the cluster."),
        ):
            yield GaugeMetricFamily(f"{NS}_{name}", doc, value=value)
        yield GaugeMetricFamily(
            "taskcast_gateway_engine_healthy",
            "1 while the engine (Redis) answers, else 0.",
            value=int(healthy),
        )


class HoldGauges(Collector):
    """Held output of backed-up connections (gateway/outbox.py ``HoldStats``), read at scrape
    time: bytes and connections held now, publications dropped by conflation so far."""

    def __init__(self, read: Callable[[], tuple[int, int, int]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        held_bytes, connections, conflated = self.read()
        yield GaugeMetricFamily(
            "taskcast_gateway_client_held_bytes", "Output held for backed-up connections.", value=held_bytes
        )
        yield GaugeMetricFamily(
            "taskcast_gateway_client_held_connections",
            "Connections whose output is held (transport past client.queue_conflate_size).",
            value=connections,
        )
        yield CounterMetricFamily(
            "taskcast_gateway_client_conflated_publications",
            "Queued publications dropped for a newer one of the same conflation key (seed §13.3).",
            value=conflated,
        )


class _ActionCounts(Collector):
    """``centrifugo_node_action_count`` (labels action, channel_namespace): counted in a dict on
    the publish path (a prometheus Counter takes a lock per increment) and exposed at scrape
    time with the same samples (``_total`` and ``_created``)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.created: dict[str, float] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            f"{NS}_node_action_count", "Number of node actions.", labels=["action", "channel_namespace"]
        )
        for action, n in list(self.counts.items()):
            family.add_metric([action, ""], n, created=self.created.get(action))
        yield family


class _AsyncioTasks(Collector):
    """``taskcast_gateway_asyncio_tasks``: tasks alive in the serving event loop at scrape time
    (leak checks: back to baseline after connection churn)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # scraped outside the event loop (tests rendering directly)
            return
        yield GaugeMetricFamily("taskcast_gateway_asyncio_tasks", "Asyncio tasks alive.", value=tasks)
