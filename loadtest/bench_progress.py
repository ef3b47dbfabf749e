"""Publications per burst of STEP_PROGRESS, with and without the server-side progress window.

One process: the Status API's app (``build_components`` + ``create_app``, driven over ASGI like a
worker would drive it over HTTP), a running relay (``Relay.run``) woken by the Status API's
post-commit hook as in ``taskcast up``, and a publisher that records what the relay publishes
instead of sending it to a gateway (this counts publications: a version's one outbox row carries
one per channel, ``outbox.publications``; the gateway's cost per publication is measured
elsewhere). For each ``--windows`` value (``progress.min_interval_ms``):
``--tasks`` running tasks each send ``--events`` progress reports spread evenly over
``--burst-seconds``, all tasks at once; then it waits until the relay has published every task's
last progress and counts the progress publications (each version goes to the user channel and the
detail channel: two publications) and the delay from the last report's answer to its publication.

Nothing asserts: ``tests/relay/test_progress_window_e2e.py`` proves the behaviour. Writes the
section between ``<!-- progress:start -->`` and ``<!-- progress:end -->`` of ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jwt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))
from fleet import replace_block  # noqa: E402

from relay.claim import OutboxLeases  # noqa: E402
from relay.config import build_config as relay_build_config  # noqa: E402
from relay.publisher import PUBLISHED, PublishResult  # noqa: E402
from relay.relay import Relay  # noqa: E402
from status_api.app import build_components, create_app  # noqa: E402
from status_api.config import build_config  # noqa: E402
from status_api.storage.database import create_engine, init_db  # noqa: E402
from status_api.storage.outbox import OutboxRow, publications  # noqa: E402

SERVICE_SECRET = "bench-progress-service-secret-0123456789"
STEP = {"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}


class Recorder:
    """A relay publisher that records each publication's (task, version, channel) and time, and
    succeeds."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str, float]] = []

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        now = time.monotonic()
        self.rows += [
            (r.aggregate_id, r.aggregate_version, p.channel, now) for r in rows for p in publications(r)
        ]
        return [PUBLISHED] * len(rows)

    async def aclose(self) -> None:
        return None


def _config(db_url: str, window_ms: int) -> Any:
    return build_config(
        {
            "database": {"url": db_url},
            "internal_auth": {"mode": "jwt", "jwt_secret": SERVICE_SECRET, "rate_per_second": 0},
            "execution_token": {"secret": "bench-progress-exec-secret-0123456789ab"},
            "user_auth": {"mode": "hs", "secret": "bench-progress-user-secret-0123456789"},
            "realtime": {"secret": "bench-progress-realtime-secret-012345"},
            "reconciler": {"enabled": False},
            "progress": {"min_interval_ms": window_ms},
        }
    )


async def _run(db_url: str, window_ms: int, tasks: int, events: int, burst_seconds: float) -> dict[str, Any]:
    engine = create_engine(db_url, pool_size=10)
    await init_db(engine)
    recorder = Recorder()
    relay_cfg = relay_build_config(
        {
            "database_url": db_url,
            "gateway_api_url": "http://unused.invalid/api",
            "relay_id": f"bench-{uuid.uuid4().hex[:6]}",
            "poll_interval_seconds": 1.0,
            "concurrency": 2,
        }
    )
    relay = Relay(OutboxLeases(engine, relay_cfg.relay_id, lease_seconds=30), recorder, relay_cfg)
    comp = build_components(_config(db_url, window_ms), engine=engine, on_commit=lambda _n: relay.wake())
    await comp.service.load_registry_files()
    app = create_app(_config(db_url, window_ms), components=comp)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://status")
    coordinator = jwt.encode(
        {"sub": "task-coordinator", "roles": ["coordinator"], "exp": int(time.time()) + 3600},
        SERVICE_SECRET,
        "HS256",
    )
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        contexts = []
        for _ in range(tasks):
            r = await http.post(
                "/internal/v1/tasks",
                json={
                    "tenantId": "t1",
                    "ownerId": "u1",
                    "product": "DOCUMENT",
                    "taskType": "DOCUMENT_PROCESS",
                    "title": "bench",
                    "statusDefinitionVersion": 1,
                    "operationDefinitionVersion": 1,
                    "steps": [STEP],
                },
                headers={"Authorization": f"Bearer {coordinator}"},
            )
            r.raise_for_status()
            contexts.append(r.json()["steps"][0])

        async def report(ctx: dict[str, Any], seq: int, event_type: str, business: str, **extra: Any) -> int:
            body = {
                "eventId": f"evt-{uuid.uuid4().hex}",
                "taskId": ctx["taskId"],
                "taskType": "DOCUMENT_PROCESS",
                "taskAttempt": ctx["taskAttempt"],
                "stepId": ctx["stepId"],
                "operationCode": ctx["operationCode"],
                "stepAttempt": ctx["stepAttempt"],
                "producerId": ctx["producerId"],
                "sourceSeq": seq,
                "eventType": event_type,
                "businessStatus": business,
                "occurredAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                **extra,
            }
            r = await http.post(
                "/internal/v1/task-events",
                json=body,
                headers={
                    "Authorization": f"Bearer {ctx['executionToken']}",
                    "Idempotency-Key": body["eventId"],
                },
            )
            r.raise_for_status()
            return int(r.json()["taskVersion"])

        for ctx in contexts:
            await report(ctx, 1, "STEP_STARTED", "PREPARING")
        started_version = 2
        await _until(lambda: _has(recorder, contexts, started_version), 30, "STEP_STARTED published")
        last: dict[str, tuple[int, float]] = {}
        burst_start = time.monotonic()

        async def burst(ctx: dict[str, Any]) -> None:
            for i in range(events):
                at = burst_start + i * burst_seconds / events
                await asyncio.sleep(max(0.0, at - time.monotonic()))  # the worker's own pacing
                v = await report(
                    ctx, 2 + i, "STEP_PROGRESS", "PREPARING", progress={"current": i + 1, "total": events}
                )
                last[ctx["taskId"]] = (v, time.monotonic())

        await asyncio.gather(*(burst(ctx) for ctx in contexts))
        sent_seconds = time.monotonic() - burst_start
        await _until(
            lambda: all(_published_at(recorder, tid, v) for tid, (v, _) in last.items()),
            60 + window_ms / 1000,
            "every last progress published",
        )
        progress_rows = [r for r in recorder.rows if r[0] in last and r[1] > started_version]
        delays = [(_published_at(recorder, tid, v) or 0.0) - answered for tid, (v, answered) in last.items()]
        per_task = [sum(1 for r in progress_rows if r[0] == tid) for tid in last]
        delivered = sum(1 for tid, (v, _) in last.items() if _published_at(recorder, tid, v))
        return {
            "window_ms": window_ms,
            "reports": tasks * events,
            "rows_published": len(progress_rows),
            "rows_per_task": statistics.mean(per_task),
            "versions_per_task": statistics.mean(
                len({r[1] for r in progress_rows if r[0] == tid}) for tid in last
            ),
            "last_delivered": f"{delivered}/{tasks}",
            "last_delay_p50_ms": statistics.median(delays) * 1000,
            "last_delay_max_ms": max(delays) * 1000,
            "sent_seconds": sent_seconds,
        }
    finally:
        stop.set()
        await running
        await http.aclose()
        await engine.dispose()


def _published_at(recorder: Recorder, task_id: str, version: int) -> float | None:
    times = [t for tid, v, _, t in recorder.rows if tid == task_id and v == version]
    return max(times) if len(times) >= 2 else None  # both channels


def _has(recorder: Recorder, contexts: list[dict[str, Any]], version: int) -> bool:
    return all(_published_at(recorder, c["taskId"], version) for c in contexts)


async def _until(cond: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _markdown(results: list[dict[str, Any]], args: argparse.Namespace, load: float) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "<!-- progress:start -->",
        "## Progress window: publications per burst (`loadtest/bench_progress.py`)",
        "",
        f"Run {when}, {os.cpu_count()} CPUs, 1-minute load average {load:.1f} at the start. "
        f"{args.tasks} running tasks each send {args.events} STEP_PROGRESS reports spread over "
        f"{args.burst_seconds:g} s, all at once; the relay (in process, woken by the post-commit hook, "
        "publishing to a recorder) runs throughout. Rows = publications for the burst (a version goes "
        "to the user and the detail channel); delay = the last report's answer → its "
        "publication.",
        "",
        "| database | `progress.min_interval_ms` | reports | rows published | rows per task "
        "| versions per task | last progress delivered | delay of the last, p50 / max | burst sent in |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['db']} | {r['window_ms']} | {r['reports']} | {r['rows_published']} "
            f"| {r['rows_per_task']:.1f} | {r['versions_per_task']:.1f} | {r['last_delivered']} "
            f"| {r['last_delay_p50_ms']:.0f} / {r['last_delay_max_ms']:.0f} ms | {r['sent_seconds']:.2f} s |"
        )
    lines += ["<!-- progress:end -->"]
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--url", help="also on this MariaDB (mysql+asyncmy://…); always on a throwaway SQLite file"
    )
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--burst-seconds", type=float, default=1.0)
    ap.add_argument("--windows", default="0,1000", help="progress.min_interval_ms values, comma-separated")
    ap.add_argument("--out", type=Path, help="write the progress block of this markdown file")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for db in ("SQLite", "MariaDB") if args.url else ("SQLite",):
            for window in (int(w) for w in args.windows.split(",")):
                url = args.url if db == "MariaDB" else f"sqlite+aiosqlite:///{tmp}/progress-{window}.db"
                results.append(
                    {"db": db, **await _run(url, window, args.tasks, args.events, args.burst_seconds)}
                )
                print(results[-1], flush=True)
    block = _markdown(results, args, load)
    print(block)
    if args.out:
        replace_block(args.out, "<!-- progress:start -->", "<!-- progress:end -->", block)


if __name__ == "__main__":
    asyncio.run(main())
