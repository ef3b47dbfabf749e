"""Prometheus metrics of one relay process, on a registry of its own (seed §14.1).

Nothing here is global: :class:`RelayMetrics` is built by the composition code and passed in, so
several relays in one test process never share counters. :func:`serve` exposes the registry on
``metrics_host:metrics_port`` (prometheus-client's threaded HTTP server).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

#: Commit → publish latency buckets (seconds): sub-second is normal, minutes means a backlog.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


@dataclass
class RelayMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.rows = Gauge(
            "taskcast_relay_outbox_rows", "Outbox rows by status (whole table).", ["status"], registry=r
        )
        self.oldest_pending_age = Gauge(
            "taskcast_relay_oldest_pending_age_seconds",
            "Age of the oldest PENDING outbox row (0 when none).",
            registry=r,
        )
        self.claims = Counter(
            "taskcast_relay_claims_total", "Claim transactions that leased at least one row.", registry=r
        )
        self.empty_claims = Counter(
            "taskcast_relay_empty_claims_total",
            "Claim transactions that found no due row (a hint another claim had already served, a "
            "poll of an empty outbox on SQLite: on MySQL/MariaDB a poll looks first and claims only "
            "when something is claimable).",
            registry=r,
        )
        self.polls = Counter(
            "taskcast_relay_polls_total",
            "Claims made by the relay-wide safety-net poll: no claim of the relay had started for "
            'the poll bound (docs/relay.md "Wake-up").',
            registry=r,
        )
        self.looks = Counter(
            "taskcast_relay_looks_total",
            "Looks before a claim (one statement, no lock, no transaction; MySQL/MariaDB): a poll's, "
            "or a claim woken only by held-back rows' due times. outcome=claimed: something was "
            'claimable, the claim followed; outcome=nothing: no claim transaction (docs/relay.md "A '
            'poll looks before it claims", "Due times look first").',
            ["outcome"],
            registry=r,
        )
        self.claimed_rows = Counter("taskcast_relay_claimed_rows_total", "Rows leased.", registry=r)
        self.published = Counter(
            "taskcast_relay_published_rows_total", "Rows published and marked PUBLISHED.", registry=r
        )
        self.superseded = Counter(
            "taskcast_relay_superseded_rows_total",
            "Progress rows marked PUBLISHED without a publish because a newer version of the same "
            "task and channel was in the same batch (collapse_superseded_progress).",
            registry=r,
        )
        self.failures = Counter(
            "taskcast_relay_publish_failures_total",
            "Rows whose publish failed, by failure class and outcome: retry (row-specific, per-row "
            "backoff), requeue (the gateway as a whole failed: due again at once) or dead.",
            ["failure_class", "outcome"],
            registry=r,
        )
        self.takeovers = Counter(
            "taskcast_relay_lease_takeovers_total",
            "Rows claimed from an expired lease (a crashed or stalled relay).",
            registry=r,
        )
        self.lost_leases = Counter(
            "taskcast_relay_lost_leases_total",
            "Rows whose result could not be recorded because another relay had taken the lease over.",
            registry=r,
        )
        self.released = Counter(
            "taskcast_relay_released_rows_total", "Leases given back at shutdown.", registry=r
        )
        self.purged = Counter(
            "taskcast_relay_purged_rows_total", "PUBLISHED rows deleted by retention.", registry=r
        )
        self.gateway_up = Gauge(
            "taskcast_relay_gateway_up",
            "1 while the relay claims; 0 while claims are paused after a gateway-wide failure.",
            registry=r,
        )
        self.probes = Counter(
            "taskcast_relay_gateway_probes_total",
            "One-row publishes sent while claims are paused, by result (up, down, error).",
            ["result"],
            registry=r,
        )
        self.wakeups = Counter(
            "taskcast_relay_wakeups_total",
            "Post-commit wake-up hints received (Redis PUB/SUB or in-process), by source.",
            ["source"],
            registry=r,
        )
        self.wakeups_absorbed = Counter(
            "taskcast_relay_wakeups_absorbed_total",
            "Wake-ups that cost no claim of their own: a loop already woken (or the pending flag) "
            'claims after them (docs/relay.md "Claim coverage").',
            registry=r,
        )
        self.wake_listener_up = Gauge(
            "taskcast_relay_wake_listener_up",
            "1 while subscribed to the wake-up channel; 0 while (re)connecting (only the poll runs).",
            registry=r,
        )
        self.loop_errors = Counter(
            "taskcast_relay_loop_errors_total", "Relay iterations that failed (database errors).", registry=r
        )
        self.commit_to_publish = Histogram(
            "taskcast_relay_state_commit_to_publish_seconds",
            "From the outbox row's commit time (created_at) to the gateway's publish acknowledgement.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.claim_seconds = Histogram(
            "taskcast_relay_claim_seconds", "Duration of one claim transaction.", registry=r
        )
        self.mark_seconds = Histogram(
            "taskcast_relay_mark_seconds", "Duration of one mark (settle) transaction.", registry=r
        )
        self.publish_request = Histogram(
            "taskcast_relay_publish_request_seconds",
            "Duration of one publish call to the gateway (a whole batch).",
            registry=r,
        )


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(metrics: RelayMetrics, host: str, port: int) -> MetricsServer:
    """Serve ``/metrics`` on ``host:port`` (0 = a free port: read ``.port``); ``close()`` stops it."""
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsServer(server, thread)
