"""OpenTelemetry tracing across real processes (docs/operations.md "Tracing"): a Status API, a
relay and a gateway (memory engine, deploy/gateway.json's namespaces) on one SQLite file, each
exporting over OTLP/HTTP to a receiver in this test that decodes the protobuf
``ExportTraceServiceRequest`` as a collector would. The worker is this test: the worker SDK in a
span of an OpenTelemetry SDK with the in-memory exporter.

On: one trace runs from the worker's span through the event POST, the ingest transaction, the
relay's publish and the gateway's server API request to its ``publish`` span, each a child of the
one before; the log lines of the Status API and the relay carry the trace id with the event's and
the outbox row's ids. Off (the default): nothing is exported and no outbox row holds a context,
even for a request that carried a ``traceparent``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import sqlalchemy as sa
from taskcast_worker import AsyncTaskcast, StepSpec

from gateway.api.grpc import api_pb2, api_pb2_grpc
from status_api.storage.database import create_engine
from status_api.storage.tables import task_outbox
from tests.helpers.otlp import Receiver, Span
from tests.status_api.harness import COORDINATOR, TEST_CONFIG
from tests.support import (
    ROOT,
    GatewayProcess,
    RelayProcess,
    StatusApiProcess,
    free_port,
    merge,
    scaled,
    wait_until,
)

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

pytestmark = pytest.mark.timeout(scaled(180))

API_KEY = "tracing-test-api-key"
STEP = StepSpec("02_parse", "DOCUMENT.PARSE", "document-parser")
TASK = {
    "tenant_id": "t1",
    "owner_id": "u1",
    "product": "DOCUMENT",
    "task_type": "DOCUMENT_PROCESS",
    "title": "traced",
    "status_definition_version": 1,
    "operation_definition_version": 1,
}


@dataclass
class Pipeline:
    api: StatusApiProcess
    relay: RelayProcess
    gateway: GatewayProcess
    grpc_port: int
    db_url: str
    receiver: Receiver
    procs: list[Any] = field(default_factory=list)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _pipeline(workdir: Path, receiver: Receiver, traced: bool) -> Iterator[Pipeline]:
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    db_url = f"sqlite+aiosqlite:///{workdir}/status.db"
    cfg = json.loads((ROOT / "deploy/gateway.json").read_text())
    cfg.pop("engine")
    cfg["client"]["token"]["hmac_secret_key"] = "tracing-test-hmac-secret-0123456789"
    cfg["http_api"]["key"] = API_KEY
    grpc_port = free_port()
    cfg["grpc_api"] = {"enabled": True, "port": grpc_port, "key": API_KEY}
    if traced:
        cfg["opentelemetry"] = {"enabled": True, "api": True}
    api_cfg = merge(TEST_CONFIG, {"database": {"url": db_url}, "opentelemetry": {"enabled": traced}})
    api = StatusApiProcess(api_cfg, workdir / "api", env)
    gateway = GatewayProcess(cfg, workdir / "gw", env=env)
    started: list[Any] = []
    try:
        started.append(api.start())
        started.append(gateway.start())
        relay_cfg = {
            "relay_id": f"tracing-relay-{'on' if traced else 'off'}",
            "database_url": db_url,
            "gateway_api_url": gateway.api_url,
            "gateway_api_key": API_KEY,
            "poll_interval_seconds": 0.1,
            "log_level": "debug",
            "opentelemetry_enabled": traced,
        }
        relay = RelayProcess(relay_cfg, workdir, env)
        started.append(relay.start())
        yield Pipeline(api, relay, gateway, grpc_port, db_url, receiver, started)
    finally:
        for proc in reversed(started):
            proc.terminate()
    for proc in started:
        assert "Traceback" not in proc.log_text(), proc.log_text()[-3000:]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Pipeline]:
    yield from _pipeline(tmp_path_factory.mktemp("traced"), receiver, True)


@pytest.fixture(scope="module")
def untraced(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Pipeline]:
    yield from _pipeline(tmp_path_factory.mktemp("untraced"), receiver, False)


async def _report(p: Pipeline) -> tuple[str, str, str]:
    """Create a task, then complete a step inside a worker span: (task id, trace id, span id)."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("worker")
    async with AsyncTaskcast(p.api.url, service_token=COORDINATOR, producer_id="task-coordinator") as tc:
        task = await tc.create_task(steps=[STEP], **TASK)
        with tracer.start_as_current_span("worker.parse"):
            async with tc.step(task.steps["02_parse"]) as step:
                await step.start("PARSING")
                await step.complete("PARSE_COMPLETED")
    provider.shutdown()
    (worker,) = exporter.get_finished_spans()
    ctx = worker.context
    return task.task_id, f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


async def _outbox(db_url: str, task_id: str) -> list[tuple[str, str | None]]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(task_outbox.c.status, task_outbox.c.traceparent).where(
                    task_outbox.c.aggregate_id == task_id
                )
            )
            return [(r[0], r[1]) for r in rows]
    finally:
        await engine.dispose()


async def test_one_trace_from_the_worker_to_the_gateway_publish(traced: Pipeline) -> None:
    task_id, trace_id, worker_span = await _report(traced)

    def chain() -> list[Span] | None:
        spans = [s for s in list(traced.receiver.spans) if s.trace_id == trace_id]
        by_id = {s.span_id: s for s in spans}
        for publish in (s for s in spans if s.service == "centrifugo" and s.name == "publish"):
            path = [publish]
            while path[-1].parent_id in by_id:
                path.append(by_id[path[-1].parent_id])
            if path[-1].parent_id == worker_span and len(path) == 5:
                return path[::-1]
        return None

    post, transaction, relay, request, publish = await wait_until(chain, 30, "a span chain to the gateway")
    assert (post.service, post.name) == ("taskcast-status-api", "POST /internal/v1/task-events")
    assert post.attributes["taskcast.task_id"] == task_id and post.attributes["taskcast.event_id"]
    assert (transaction.service, transaction.name) == ("taskcast-status-api", "status_api.transaction")
    assert (relay.service, relay.name) == ("taskcast-relay", "relay.publish")
    assert relay.attributes["taskcast.task_id"] == task_id and relay.attributes["taskcast.outbox.ids"]
    assert request.service == "centrifugo" and request.name in ("/api/publish", "/api/batch")
    assert publish.attributes["centrifugo.channel"].endswith(task_id) or publish.attributes[
        "centrifugo.channel"
    ].startswith("task_user:")
    rows = await _outbox(traced.db_url, task_id)
    stored = {tp for _, tp in rows if tp is not None}
    assert stored and all(tp[3:35] == trace_id for tp in stored)
    # The one-command trace of the event names the trace of each of its rows.
    argv = [sys.executable, "-m", "taskcast", "trace", post.attributes["taskcast.event_id"]]
    argv += ["--no-gateway", "--config", str(traced.relay.config_path)]
    shown = await asyncio.to_thread(
        subprocess.run, argv, cwd=ROOT, capture_output=True, text=True, timeout=scaled(60), check=False
    )
    assert shown.returncode == 0 and f"trace {trace_id}" in shown.stdout, shown.stdout + shown.stderr


async def test_log_lines_carry_the_trace_and_the_ids(traced: Pipeline) -> None:
    """The Status API's event line (eventId, taskId, version) and the relay's line per outbox row
    (row id, channel, taskId, version) end with the trace id of the event."""
    task_id, trace_id, _ = await _report(traced)

    def lines(text: str) -> list[str]:
        return [
            line for line in text.splitlines() if f"task={task_id}" in line and f"trace_id={trace_id}" in line
        ]

    api_lines = await wait_until(lambda: lines(traced.api.log_text()), 30, "the Status API's event lines")
    fields = ("event=evt-", "step=02_parse", "op=DOCUMENT.PARSE", "attempt=1/1", "seq=", "version=")
    assert any(all(f in line for f in fields) for line in api_lines), api_lines
    relay_lines = await wait_until(lambda: lines(traced.relay.log_text()), 30, "the relay's row lines")
    assert any(
        "outbox row" in line and "channel=task_" in line and "version=" in line for line in relay_lines
    )


async def test_server_api_callers_join_their_trace(traced: Pipeline) -> None:
    """Any caller of the server API, as with Centrifugo: a ``traceparent`` HTTP header or gRPC
    metadata makes the request span its child, and the publish a child of that."""
    callers = {
        "http": (os.urandom(16).hex(), os.urandom(8).hex()),
        "grpc": (os.urandom(16).hex(), os.urandom(8).hex()),
    }
    trace, parent = callers["http"]
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        r = await http.post(
            f"{traced.gateway.api_url}/publish",
            json={"channel": "task_system:public", "data": {"n": 1}},
            headers={"X-API-Key": API_KEY, "traceparent": f"00-{trace}-{parent}-01"},
        )
        assert r.status_code == 200 and "result" in r.json()
    trace, parent = callers["grpc"]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{traced.grpc_port}") as channel:
        stub = api_pb2_grpc.CentrifugoApiStub(channel)
        metadata = (("authorization", f"apikey {API_KEY}"), ("traceparent", f"00-{trace}-{parent}-01"))
        reply = await stub.Publish(
            api_pb2.PublishRequest(channel="task_system:public", data=b'{"n":2}'), metadata=metadata
        )
        assert not reply.HasField("error")

    names = {"http": "/api/publish", "grpc": "centrifugal.centrifugo.api.CentrifugoApi/Publish"}
    for door, (trace, parent) in callers.items():

        def spans(trace: str = trace) -> list[Span] | None:
            found = [sp for sp in traced.receiver.spans if sp.trace_id == trace]
            return found if len(found) >= 2 else None

        request, publish = sorted(
            await wait_until(spans, 30, f"the {door} caller's spans"), key=lambda sp: sp.name == "publish"
        )
        assert (request.name, request.parent_id, request.service) == (names[door], parent, "centrifugo")
        assert (publish.name, publish.parent_id) == ("publish", request.span_id)
        assert publish.attributes["centrifugo.channel"] == "task_system:public"
        assert publish.attributes["centrifugo.offset"] >= 1


async def test_off_exports_nothing_and_stores_no_context(untraced: Pipeline) -> None:
    task_id, trace_id, _ = await _report(untraced)  # the worker still sends a traceparent

    async def published() -> list[tuple[str, str | None]] | None:
        rows = await _outbox(untraced.db_url, task_id)
        return rows if rows and all(status == "PUBLISHED" for status, _ in rows) else None

    rows = await wait_until(published, 30, "every outbox row published")
    assert [tp for _, tp in rows] == [None] * len(rows)
    assert not [s for s in untraced.receiver.spans if s.trace_id == trace_id]
    assert not [s for s in untraced.receiver.spans if s.attributes.get("taskcast.task_id") == task_id]
    assert f"trace_id={trace_id}" not in untraced.api.log_text() + untraced.relay.log_text()
