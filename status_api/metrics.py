"""Prometheus metrics of the Status API (seed §14.1), on a registry owned by the app.

Request rate and latency per route and status, ingestion outcomes per operation code
(accepted / duplicate / stale / rejected with the error code: idempotency hits, conflicts, old
attempts, schema rejections and illegal transitions all show up here), and two gauges read from
the database at scrape time: active (non-terminal) tasks and the age of the oldest one — the
"task running longer than it reasonably can" alert of seed §14.3. Also read at scrape time: the
oldest PENDING outbox row per priority, and the PENDING rows not due yet (progress held back by its
task's window).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from status_api.domain.model import TERMINAL

if TYPE_CHECKING:
    from status_api.telemetry import ClientReport
from status_api.storage import outbox_admin
from status_api.storage.tables import task, task_outbox

NS = "taskcast_status_api"
#: Seconds buckets of the client-observed latencies (commit→visible, snapshot load, notice display).
CLIENT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Report counter -> (metric attribute, label values) of StatusMetrics.client_report.
_CLIENT_COUNTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "connectAttempts": ("client_connects", ("attempt",)),
    "connects": ("client_connects", ("success",)),
    "connectFailures": ("client_connects", ("failure",)),
    "reconnects": ("client_reconnects", ()),
    "recoveries": ("client_recoveries", ("all",)),
    "recoveredFalse": ("client_recoveries", ("false",)),
    "unknownOperations": ("client_unknown", ("operation",)),
    "unknownSchemas": ("client_unknown", ("schema",)),
    "clockSkew": ("client_clock_skew", ()),
}


class StatusMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(f"{NS}_requests_total", "HTTP requests.", ["route", "status"], registry=r)
        self.duration = Histogram(
            f"{NS}_request_duration_seconds",
            "HTTP request duration.",
            ["route"],
            registry=r,
            buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.events = Counter(
            f"{NS}_events_total",
            "Task events by outcome (accepted, duplicate, stale, rejected) and error code.",
            ["operation_code", "outcome", "code"],
            registry=r,
        )
        self.active_tasks = Gauge(f"{NS}_active_tasks", "Tasks not in a terminal state.", registry=r)
        self.oldest_active_task_age = Gauge(
            f"{NS}_oldest_active_task_age_seconds",
            "Age of the oldest task not in a terminal state.",
            registry=r,
        )

        self.outbox_oldest_pending = Gauge(
            f"{NS}_outbox_oldest_pending_age_seconds",
            "Age of the oldest PENDING outbox row per priority (10 = notices and terminal states).",
            ["priority"],
            registry=r,
        )
        self.outbox_held = Gauge(
            f"{NS}_outbox_held_rows",
            "PENDING outbox rows not due yet: progress held back by its task's window, and retries.",
            registry=r,
        )
        self.batch_events = Histogram(
            f"{NS}_batch_events",
            "Events per group-commit transaction of event ingestion (ingest.commit_delay_ms).",
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64),
        )
        self.database_up = Gauge(
            f"{NS}_database_up", "1 when the last scrape could query the database.", registry=r
        )

        self._client_metrics(r)

    def _client_metrics(self, r: CollectorRegistry) -> None:
        """Seed §14.1's client row and ``state_commit_to_visible_seconds``, from client-js reports
        (status_api/telemetry.py). The only label besides fixed outcomes is the transport (4 values)."""
        self.commit_to_visible = Histogram(
            "taskcast_state_commit_to_visible_seconds",
            "Commit of a task version to a client displaying it (client clock; reported by client-js).",
            ["transport"],
            registry=r,
            buckets=CLIENT_BUCKETS,
        )
        self.client_snapshot_load = Histogram(
            "taskcast_client_snapshot_load_seconds",
            "Client-observed time to load a snapshot (task list or task detail).",
            ["transport"],
            registry=r,
            buckets=CLIENT_BUCKETS,
        )
        self.client_notice_display = Histogram(
            "taskcast_client_notice_display_seconds",
            "Commit of a notice's version to the client showing the notice.",
            ["transport"],
            registry=r,
            buckets=CLIENT_BUCKETS,
        )
        self.client_connects = Counter(
            "taskcast_client_connects_total",
            "Client connection attempts and their outcome (attempt, success, failure).",
            ["transport", "outcome"],
            registry=r,
        )
        self.client_reconnects = Counter(
            "taskcast_client_reconnects_total",
            "Client reconnects after a lost connection.",
            ["transport"],
            registry=r,
        )
        self.client_recoveries = Counter(
            "taskcast_client_recoveries_total",
            "Re-subscriptions asking for recovery (recovered=all), and those answered recovered=false.",
            ["transport", "recovered"],
            registry=r,
        )
        self.client_unknown = Counter(
            "taskcast_client_unknown_total",
            "Steps a client rendered generically: unknown operationCode or data schema.",
            ["transport", "kind"],
            registry=r,
        )
        self.client_clock_skew = Counter(
            "taskcast_client_clock_skew_total",
            "commit→visible samples a client dropped because its clock was behind the server's.",
            ["transport"],
            registry=r,
        )
        self.client_reports = Counter(
            "taskcast_client_telemetry_reports_total",
            "Telemetry reports by outcome (accepted, or the rejection's error code).",
            ["outcome"],
            registry=r,
        )

        self.subscribe_proxy_requests = Counter(
            f"{NS}_subscribe_proxy_requests_total",
            "Subscribe-proxy decisions (status_api/subscribe_proxy.py) by kind and outcome.",
            ["kind", "outcome"],
            registry=r,
        )

    def subscribe_proxy(self, kind: str, outcome: str) -> None:
        """``kind``: subscribe / sub_refresh; ``outcome``: granted / refused."""
        self.subscribe_proxy_requests.labels(kind, outcome).inc()

    def client_report(self, report: ClientReport) -> None:
        """Record one validated report (every value already in range)."""
        t = report.transport
        for name, value in report.counts.items():
            if value:
                attr, labels = _CLIENT_COUNTS[name]
                getattr(self, attr).labels(t, *labels).inc(value)
        for name, hist in (
            ("commitToVisibleMs", self.commit_to_visible),
            ("snapshotLoadMs", self.client_snapshot_load),
            ("noticeDisplayMs", self.client_notice_display),
        ):
            child = hist.labels(t)
            for ms in report.samples.get(name, ()):
                child.observe(ms / 1000.0)
        self.client_reports.labels("accepted").inc()

    def telemetry_rejected(self, code: str) -> None:
        """A refused report; ``code`` is one of the telemetry endpoint's fixed error codes."""
        self.client_reports.labels(code[:40]).inc()

    def event(self, operation_code: str, outcome: str, code: str = "") -> None:
        self.events.labels(operation_code or "-", outcome, code).inc()

    async def render(self, engine: AsyncEngine) -> bytes:
        """Refresh the database-backed gauges and render. A database that cannot be queried
        sets ``database_up`` to 0 instead of failing the scrape."""
        terminal = [lc.value for lc in TERMINAL]
        active = sa.select(sa.func.count(), sa.func.min(task.c.created_at)).where(
            task.c.lifecycle_status.not_in(terminal)
        )
        now = datetime.now(UTC)
        held = sa.select(sa.func.count()).where(
            task_outbox.c.status == "PENDING", task_outbox.c.available_at > now.replace(tzinfo=None)
        )
        try:
            async with engine.connect() as conn:
                count, oldest = (await conn.execute(active)).one()
                pending_rows = await outbox_admin.oldest_pending_by_priority(conn)
                held_rows = await conn.scalar(held)
        except Exception:
            self.database_up.set(0)
            return generate_latest(self.registry)
        self.database_up.set(1)
        self.active_tasks.set(count or 0)
        self.oldest_active_task_age.set(_age(now, oldest))
        self.outbox_held.set(held_rows or 0)
        self.outbox_oldest_pending.clear()
        for label in ("0", "10"):
            self.outbox_oldest_pending.labels(label).set(0)
        for priority, created in pending_rows.items():
            self.outbox_oldest_pending.labels(str(priority)).set(_age(now, created))
        return generate_latest(self.registry)


def _age(now: datetime, then: datetime | None) -> float:
    if then is None:
        return 0.0
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return max(0.0, (now - then).total_seconds())


def route_name(scope: Scope, routes: list[Route]) -> str:
    """The route template (``/api/tasks/{task_id}``), never the raw path: bounded labels."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route.path
    return "other"


class MetricsMiddleware:
    """Plain ASGI middleware counting HTTP requests per route template and status (no
    BaseHTTPMiddleware: no extra task or body buffering per request)."""

    def __init__(self, app: ASGIApp, metrics: StatusMetrics, routes: list[Route]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            name = route_name(scope, self.routes)
            self.metrics.requests.labels(name, str(status)).inc()
            self.metrics.duration.labels(name).observe(time.perf_counter() - started)
