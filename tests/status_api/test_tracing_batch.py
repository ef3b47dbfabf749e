"""Tracing of a group-commit batch (service/ingest.py, storage/write.py; docs/operations.md
"Tracing with OpenTelemetry"), with the OpenTelemetry SDK's in-memory exporter: the batch's
transaction is one span, a child of the first event's request span and linked to the others'; the
outbox rows of the first event carry the transaction span's context, every other event's rows their
own request's; a batch with no caller context is a root span its rows carry. Off, no row carries a
context even when the caller passed one. Also: the tracer's refusals when the SDK is missing or the
protocol unknown, and that off imports nothing of it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from httpwire.tracing import OFF, TracingUnavailable, setup
from tests.status_api.harness import TEST_CONFIG, Harness
from tests.support import ROOT

in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")


#: What httpwire/tracing.py imports when tracing is on.
TRACING_MODULES = (
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter",
    "opentelemetry.trace.propagation.tracecontext",
)


def _traceparent() -> str:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


async def _ingest_in_one_batch(h: Harness, traceparents: list[str | None]) -> list[str]:
    """One STEP_STARTED per new task, all submitted in one loop tick: the task ids, in order."""
    tasks = [await h.create_task(owner=f"u{i}") for i in range(len(traceparents))]
    calls = []
    for t, tp in zip(tasks, traceparents, strict=True):
        body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
        caller = h.comp.api.service_auth.event_caller(t.steps["01_prepare"].token)
        calls.append(h.service.ingest_event(body, caller, body["eventId"], None, tp))
    results = await asyncio.gather(*calls)
    assert all(r["accepted"] for r in results)
    return [t.id for t in tasks]


async def _row_contexts(h: Harness, task_id: str) -> set[Any]:
    return {r["traceparent"] for r in await h.outbox_rows(task_id) if r["aggregate_version"] == 2}


async def test_a_batch_is_one_transaction_span_and_each_row_keeps_its_trace(h: Harness) -> None:
    exporter = in_memory.InMemorySpanExporter()
    h.service.tracing = setup(True, "test", exporter=exporter)
    parents = [_traceparent() for _ in range(3)]
    task_ids = await _ingest_in_one_batch(h, parents)
    (lone,) = await _ingest_in_one_batch(h, [None])  # a direct call of the use case: no caller span
    h.service.tracing.shutdown()  # flushes the batch span processor

    tx, root = [s for s in exporter.get_finished_spans() if s.name == "status_api.transaction"]
    ctx = tx.get_span_context()
    assert tx.parent is not None and f"{tx.parent.span_id:016x}" == parents[0][36:52]
    assert f"{ctx.trace_id:032x}" == parents[0][3:35] and tx.attributes["taskcast.batch_size"] == 3
    assert sorted(f"{link.context.trace_id:032x}" for link in tx.links) == sorted(
        p[3:35] for p in parents[1:]
    )
    own = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"
    assert await _row_contexts(h, task_ids[0]) == {own}
    for task_id, parent in zip(task_ids[1:], parents[1:], strict=True):
        assert await _row_contexts(h, task_id) == {parent}
    assert root.parent is None and not root.links
    root_ctx = root.get_span_context()
    (stored,) = await _row_contexts(h, lone)
    assert stored[:52] == f"00-{root_ctx.trace_id:032x}-{root_ctx.span_id:016x}"


async def test_off_stores_no_context(h: Harness) -> None:
    assert h.service.tracing is OFF
    task_ids = await _ingest_in_one_batch(h, [_traceparent(), _traceparent()])
    for task_id in task_ids:
        assert await _row_contexts(h, task_id) == {None}


def test_enabled_without_the_sdk_or_with_an_unknown_protocol_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with pytest.raises(TracingUnavailable, match="carrier-pigeon"):
        setup(True, "test")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # import fails
    with pytest.raises(TracingUnavailable, match="taskcast\\[tracing\\]"):
        setup(True, "test")
    assert setup(False, "test") is OFF


def test_off_imports_nothing_of_opentelemetry() -> None:
    """The three services built with tracing off import nothing of OpenTelemetry's tracing (redis-py
    imports OpenTelemetry's API for its own optional metrics whenever the package is installed)."""
    config = {**TEST_CONFIG, "database": {"url": "sqlite+aiosqlite:///:memory:"}}
    code = (
        "import sys\n"
        "from gateway.app import Runtime\n"
        "from gateway.config.schema import Settings\n"
        "from status_api.app import build_components\n"
        "from status_api.config import build_config\n"
        "from relay.publisher import HttpGatewayPublisher\n"
        "Runtime(Settings())\n"
        f"build_components(build_config({config!r}))\n"
        f"print(sorted(m for m in sys.modules if m.startswith({TRACING_MODULES!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
