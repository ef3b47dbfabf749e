"""Prometheus metrics under Centrifugo's names (PROTOCOL.md §8), on a registry owned by the app.

Only the metrics Taskcast produces are registered; label sets follow Centrifugo's so existing
dashboards keep working. ``channel_namespace`` labels are always "" (Centrifugo's default with
namespace labels off), which keeps cardinality bounded.
"""

from __future__ import annotations

import asyncio
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

NS = "centrifugo"

_SENT_PUBLICATION = ("publication", "")

NodeCounts = Callable[[], tuple[int, int, int, int, int, bool]]
"""Returns (clients, users, subscriptions, channels, live nodes, engine healthy) of this node."""


class Metrics:
    """Counters and histograms the gateway updates on its paths."""

    def __init__(self, version: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        build = Gauge("node_build", "Node build info.", ["version"], namespace=NS, registry=r)
        build.labels(version).set(1)
        self.action_count = LoopCounters(
            f"{NS}_node_action_count", "Number of node actions.", ("action", "channel_namespace")
        )
        r.register(self.action_count)
        self.map_publish_suppressed = LoopCounters(
            f"{NS}_map_broker_publish_suppressed_count",
            "Number of suppressed map publish operations.",
            ("reason", "channel_namespace"),
        )
        r.register(self.map_publish_suppressed)
        self.map_remove_suppressed = LoopCounters(
            f"{NS}_map_broker_remove_suppressed_count",
            "Number of suppressed map remove operations.",
            ("reason", "channel_namespace"),
        )
        r.register(self.map_remove_suppressed)
        self.messages_sent_count = LoopCounters(
            f"{NS}_node_messages_sent_count",
            "Number of messages sent to clients.",
            ("type", "channel_namespace"),
        )
        r.register(self.messages_sent_count)
        self.pub_sub_lag = LoopHistograms(
            f"{NS}_node_pub_sub_lag_seconds",
            "Lag from publish to delivery to local subscribers.",
            (),
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        r.register(self.pub_sub_lag)
        self._pub_sub_lag = self.pub_sub_lag.labels()
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
        self.commands_decoded = Counter(
            "taskcast_gateway_client_commands_decoded",
            "Client commands decoded from transport frames (pongs included).",
            ["transport"],
            registry=r,
        )
        self.transport_messages_sent = Counter(
            "transport_messages_sent",
            "Frames written to transports.",
            ["transport", "frame_type", "channel_namespace"],
            namespace=NS,
            registry=r,
        )
        self.api_duration = LoopHistograms(
            f"{NS}_api_command_duration_seconds_histogram",
            "Server API command duration.",
            ("protocol", "method"),
        )
        r.register(self.api_duration)
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
        self.proxy_oversized = Counter(
            "taskcast_gateway_proxy_oversized_responses",
            "Proxy answers refused for exceeding the proxy's max_response_size (error 100).",
            ["protocol", "type", "name"],
            registry=r,
        )
        self.proxy_inflight = Gauge(
            "proxy_inflight_requests",
            "Proxy calls in flight.",
            ["protocol", "type", "name"],
            namespace=NS,
            registry=r,
        )
        self.messages_sent_count.inc(_SENT_PUBLICATION, 0)
        self.registry.register(_AsyncioTasks())

    def register_node_gauges(self, collector: Collector) -> None:
        self.registry.register(collector)

    def action(self, action: str, channel: str) -> None:
        self.action_count.inc((action, ""))

    def map_write(self, channel: str, *, remove: bool, reason: str) -> None:
        """A map publish or remove (``action_count``), or its suppression (``reason``)."""
        if not reason:
            self.action_count.inc(("map_remove" if remove else "map_publish", ""))
        elif remove:
            self.map_remove_suppressed.inc((reason, ""))
        else:
            self.map_publish_suppressed.inc((reason, ""))

    def api_timer(self, protocol: str, method: str) -> LoopHistogram:
        """The ``api_command_duration`` child of (protocol, method)."""
        return self.api_duration.labels(protocol, method)

    def messages_sent(self, channel: str, n: int) -> None:
        if n:
            self.messages_sent_count.inc(_SENT_PUBLICATION, n)

    def observe_pub_lag(self, seconds: float) -> None:
        self._pub_sub_lag.observe(seconds)

    def render(self) -> bytes:
        return exposition(self.registry)


#: Centrifugo counters that Centrifugo itself names ``*_total`` (without the suffix here).
CENTRIFUGO_TOTAL_COUNTERS = frozenset(
    {f"{NS}_api_command_errors", f"{NS}_consumers_messages_processed", f"{NS}_consumers_errors"}
)


class _Collected:
    """Metric families already collected, in the shape ``generate_latest`` reads."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def exposition(registry: CollectorRegistry) -> bytes:
    """``registry`` in the Prometheus text format (0.0.4), Centrifugo's counters under the names
    Centrifugo exports: a ``centrifugo_*`` counter has no ``_total`` suffix (Go's client adds
    none; prometheus_client adds it to every counter) unless Centrifugo's own name ends in it
    (``CENTRIFUGO_TOTAL_COUNTERS``), and no ``_created`` sample. Every other family is written by
    prometheus_client as it is. Collects once."""
    centrifugo: list[Metric] = []
    others: list[Metric] = []
    for metric in registry.collect():
        is_centrifugo = metric.type == "counter" and metric.name.startswith(f"{NS}_")
        (centrifugo if is_centrifugo else others).append(metric)
    out = [generate_latest(_Collected(others)).decode()]
    for metric in centrifugo:
        name = f"{metric.name}_total" if metric.name in CENTRIFUGO_TOTAL_COUNTERS else metric.name
        doc = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} counter\n")
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue
            labels = ",".join(
                f'{key}="{_label_value(value)}"' for key, value in sorted(sample.labels.items())
            )
            series = f"{name}{{{labels}}}" if labels else name
            out.append(f"{series} {floatToGoString(sample.value)}\n")  # type: ignore[no-untyped-call]
    return "".join(out).encode()


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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
    """Held output of backed-up connections (gateway/connection/sendqueue.py ``HoldStats``), read at scrape
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


class LoopHistogram:
    """One histogram series, updated only from the event loop's thread: plain counters, no lock
    (a prometheus ``Histogram`` takes a lock per bucket and per sum on every observation, which
    cost ~15 % of a publication's CPU in the /api/batch profile)."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose upper bound is >= it (``le``)."""
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.total += amount


class LoopHistograms(Collector):
    """A labelled histogram of ``LoopHistogram`` series, exposed at scrape time with the samples
    of a prometheus ``Histogram`` (``_bucket`` cumulative per ``le``, ``_count``, ``_sum``,
    ``_created``). Default buckets are prometheus_client's."""

    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], buckets: tuple[float, ...] = ()
    ) -> None:
        bounds = tuple(float(b) for b in (buckets or Histogram.DEFAULT_BUCKETS))
        self.bounds = bounds if bounds[-1] == math.inf else (*bounds, math.inf)
        self.le: tuple[str, ...] = tuple(floatToGoString(b) for b in self.bounds)  # type: ignore[no-untyped-call]
        self.name = name
        self.documentation = documentation
        self.label_names = labels
        self.series: dict[tuple[str, ...], LoopHistogram] = {}

    def labels(self, *values: str) -> LoopHistogram:
        child = self.series.get(values)
        if child is None:
            child = self.series[values] = LoopHistogram(self.bounds)
        return child

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.label_names)
        for values, child in list(self.series.items()):
            cumulative, buckets = 0, []
            for le, n in zip(self.le, child.counts, strict=True):
                cumulative += n
                buckets.append((le, float(cumulative)))
            family.add_metric(list(values), buckets, child.total)
            labels = dict(zip(self.label_names, values, strict=True))
            family.samples.append(Sample(f"{self.name}_created", labels, child.created))
        yield family


class LoopCounters(Collector):
    """A labelled counter updated only from the event loop's thread (a dict, no lock per
    increment), exposed at scrape time with a prometheus ``Counter``'s samples (``_total`` and
    ``_created``)."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = labels
        self.counts: dict[tuple[str, ...], float] = {}
        self.created: dict[tuple[str, ...], float] = {}

    def inc(self, values: tuple[str, ...], amount: float = 1) -> None:
        counts = self.counts
        n = counts.get(values)
        if n is None:
            self.created[values] = time.time()
            n = 0
        counts[values] = n + amount

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.label_names)
        for values, n in list(self.counts.items()):
            family.add_metric(list(values), n, created=self.created.get(values))
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
