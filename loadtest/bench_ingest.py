"""Ingest benchmark for the Status API on MariaDB (issue 3; `make bench-ingest`).

Measures accepted events/s and per-event latency (p50/p99) of the Status API's event path — token
verification, JSON Schema validation, the locked transaction (task/step update, event log,
idempotency row, 2 outbox rows) and commit — called in-process (no HTTP sockets), for:

* ``hot``:  1 task x 16 concurrent reporters (16 steps, each reporter streams progress events);
* ``wide``: 2,000 tasks x 1 reporter each (each reporter sends STARTED + progress events), with at
  most ``--concurrency`` requests in flight;
* with ``--http``, ``wide`` again through the Starlette app (routing, auth, JSON, middleware) over
  ``httpx.ASGITransport`` — in-process, no sockets.

Events go through the service's group commit (``ServiceSettings.ingest_batch_*``); ``--single`` runs
one transaction per event instead (the pre-group-commit shape) for comparison.

Writes a markdown section between ``<!-- ingest:start -->`` and ``<!-- ingest:end -->`` in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest_http
from fleet import replace_block
from procs import listener_pid

from status_api.app import build_components, create_app
from status_api.config import Config, build_config
from status_api.storage.database import init_db
from status_api.storage.tables import metadata

SECRET = "bench-secret-0123456789abcdef0123456789"
START, END = "<!-- ingest:start -->", "<!-- ingest:end -->"


def _config(url: str, pool: int) -> Config:
    raw = {
        "database": {"url": url, "pool_size": pool, "max_overflow": pool},
        "internal_auth": {"mode": "jwt", "jwt_secret": SECRET, "rate_per_second": 0},
        "execution_token": {"secret": SECRET},
        "user_auth": {"mode": "hs", "secret": SECRET},
        "realtime": {"secret": SECRET},
        "reconciler": {"enabled": False},
    }
    return build_config(raw)


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] * 1000


class Bench:
    def __init__(self, url: str, pool: int, batch_max: int | None, runners: int | None) -> None:
        self.cfg = _config(url, pool)
        self.comp = build_components(self.cfg)
        group = self.comp.service.ingestor.group
        if group is not None and batch_max is not None and batch_max <= 1:
            self.comp.service.ingestor.group = group = None
        if group is not None:
            group.max_batch = batch_max or group.max_batch
            group.max_runners = runners or group.max_runners
        self.http: httpx.AsyncClient | None = None
        self.coordinator = self.comp.api.service_auth.service(
            jwt.encode(
                {"sub": "task-coordinator", "roles": ["coordinator"], "exp": int(time.time()) + 3600},
                SECRET,
                "HS256",
            )
        )

    async def reset(self) -> None:
        await init_db(self.comp.engine)
        async with self.comp.engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                if table.name not in ("task_status_definition", "task_operation_definition"):
                    await conn.execute(table.delete())
        await self.comp.service.load_registry_files()

    async def create(self, steps: int) -> dict[str, Any]:
        body = {
            "tenantId": "bench",
            "ownerId": f"u{uuid.uuid4().hex[:6]}",
            "projectId": None,
            "product": "DOCUMENT",
            "taskType": "DOCUMENT_PROCESS",
            "title": "bench",
            "statusDefinitionVersion": 1,
            "operationDefinitionVersion": 1,
            "steps": [
                {
                    "stepId": f"s{i:02d}",
                    "operationCode": "DOCUMENT.PARSE",
                    "producerId": f"document-parser-{i}",
                }
                for i in range(steps)
            ],
        }
        del body["projectId"]
        return await self.comp.service.create_task(body, self.coordinator)

    async def send(self, ctx: dict[str, Any], seq: int, latencies: list[float]) -> None:
        body = ingest_http.progress_event(ctx, seq, total=1000)
        t0 = time.perf_counter()
        if self.http is not None:
            headers = {"Authorization": f"Bearer {ctx['executionToken']}", "Idempotency-Key": body["eventId"]}
            r = await self.http.post("/internal/v1/task-events", json=body, headers=headers)
            assert r.status_code == 200, r.text
            out = r.json()
        else:
            caller = self.comp.api.service_auth.event_caller(ctx["executionToken"])
            out = await self.comp.service.ingest_event(body, caller, body["eventId"])
        latencies.append(time.perf_counter() - t0)
        assert out["accepted"] and not out["stale"], out

    async def hot(self, reporters: int, per_reporter: int) -> dict[str, Any]:
        task = await self.create(reporters)
        lat: list[float] = []

        async def reporter(ctx: dict[str, Any]) -> None:
            for seq in range(1, per_reporter + 1):
                await self.send(ctx, seq, lat)

        mark = self._mark()
        await asyncio.gather(*(reporter(c) for c in task["steps"]))
        return self._result(f"1 task x {reporters} concurrent reporters", lat, mark)

    async def wide(
        self, tasks: int, per_task: int, concurrency: int, *, http: bool = False
    ) -> dict[str, Any]:
        created = [await self.create(1) for _ in range(tasks)]
        if http:
            app = create_app(self.cfg, components=self.comp)
            self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://status")
        lat: list[float] = []
        gate = asyncio.Semaphore(concurrency)

        async def reporter(ctx: dict[str, Any]) -> None:
            for seq in range(1, per_task + 1):
                async with gate:
                    await self.send(ctx, seq, lat)

        mark = self._mark()
        try:
            await asyncio.gather(*(reporter(t["steps"][0]) for t in created))
        finally:
            if self.http is not None:
                await self.http.aclose()
                self.http = None
        via = ", HTTP via ASGI" if http else ""
        return self._result(f"{tasks} tasks x 1 reporter ({concurrency} in flight{via})", lat, mark)

    def _mark(self) -> tuple[float, float, int]:
        group = self.comp.service.ingestor.group
        return time.perf_counter(), time.process_time(), len(group.batch_sizes) if group else 0

    def _result(self, name: str, lat: list[float], mark: tuple[float, float, int]) -> dict[str, Any]:
        wall = time.perf_counter() - mark[0]
        cpu = time.process_time() - mark[1]
        group = self.comp.service.ingestor.group
        sizes = list(group.batch_sizes)[mark[2] :] if group else []
        return {
            "scenario": name,
            "events": len(lat),
            "seconds": wall,
            "eps": len(lat) / wall,
            "p50": _pct(lat, 50),
            "p99": _pct(lat, 99),
            "mean": statistics.mean(lat) * 1000,
            "cpu_ms": cpu / len(lat) * 1000,
            "batch": statistics.mean(sizes) if sizes else 1.0,
            "load": os.getloadavg()[0],
        }

    async def server_version(self) -> str:
        async with self.comp.engine.connect() as conn:
            return str(await conn.scalar(sa.text("SELECT VERSION()")))


def _mariadb_pid(url: str) -> int | None:
    """The pid of the MariaDB server listening on ``url``'s port (for CPU accounting), if local."""
    return listener_pid(sa.make_url(url).port or 3306)


HTTP_HEADER = (
    "| workers | accepted events | errors | events/s | p50 ms | p99 ms | mean ms "
    "| CPU s: workers / MariaDB | CPU ms per event: workers / MariaDB | load |"
)


def _per_event(row: dict[str, Any], key: str) -> str:
    return f"{row[key] / row['events'] * 1000:.2f}" if row["events"] else "–"


def _http_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    body = "\n".join(
        f"| {r['workers']} | {r['events']} | {r['errors']} | {r['eps']:.0f} | {r['p50']:.1f} "
        f"| {r['p99']:.1f} | {r['mean']:.1f} | {r['cpu_workers_s']:.1f} / {r['cpu_mariadb_s']:.1f} "
        f"| {_per_event(r, 'cpu_workers_s')} / {_per_event(r, 'cpu_mariadb_s')} | {r['load']:.1f} |"
        for r in rows
    )
    split = "".join(
        f"\nWhere the workers' CPU went with {r['workers']} worker(s) (py-spy, share of non-idle samples): "
        + "; ".join(f"{name} {share:.1f} %" for name, share in r["profile"])
        + ".\n"
        for r in rows
        if r.get("profile")
    )
    best = max(rows, key=lambda r: r["eps"])
    met = best["eps"] >= 2000 and best["p99"] < 50
    return f"""
Over real HTTP, load generator out of process (`loadtest/ingest_http.py`, issue 16):
`taskcast status-api serve --workers W` (SO_REUSEPORT, group commit per worker),
{rows[0]["scenario"].split(",")[0]}, {rows[0]["scenario"].split(", ", 3)[-1]}; the generators
are separate uvloop processes on raw keep-alive HTTP/1.1. Everything shares the same
{len(os.sched_getaffinity(0))} CPUs.

{HTTP_HEADER}
|---:|---:|---:|---:|---:|---:|---:|---|---|---:|
{body}
{split}
Target (issue 16: >= 2,000 accepted events/s, p99 < 50 ms, 2,000 tasks x 1 reporter):
**{"met" if met else "not met"}** in this run (best: {best["eps"]:.0f} events/s, p99 {best["p99"]:.1f} ms
with {best["workers"]} worker(s)).
"""


def _markdown(
    results: list[dict[str, Any]],
    args: argparse.Namespace,
    server: str,
    http_rows: list[dict[str, Any]] | None = None,
) -> str:
    rows = "\n".join(
        f"| {r['scenario']} | {r['events']} | {r['eps']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} "
        f"| {r['mean']:.1f} | {r['batch']:.1f} | {r['cpu_ms']:.2f} | {r['load']:.1f} |"
        for r in results
    )
    wide = results[1]
    mode = (
        "one transaction per event (`--single`)"
        if args.batch_max is not None and args.batch_max <= 1
        else f"group commit (<= {args.effective_batch_max} events per transaction, "
        f"{args.effective_runners} transactions in flight)"
    )
    verdict = "met" if wide["eps"] >= 1500 and wide["p99"] < 50 else "not met"
    return f"""{START}
## Status API ingest (`make bench-ingest`)

Measured {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())} on {platform.machine()} with
{len(__import__("os").sched_getaffinity(0))} CPUs, Python {platform.python_version()}, {server}
(throwaway server from `scripts/services.sh`: `innodb_flush_log_at_trx_commit=2`, 128 MB buffer pool),
SQLAlchemy pool {args.pool}+{args.pool}, {mode}. Each event is one full Status API ingestion:
execution-token verification, JSON Schema validation, the locked transaction (step + task update,
event log, idempotency row, 2 outbox rows), commit, answer. Called in-process on one event loop
(the HTTP row adds the Starlette app over `httpx.ASGITransport`); the benchmark driver shares the 2
CPUs with MariaDB and with whatever else runs on the machine (`load` = 1-minute load average at the
end of the scenario). Latency is per event, from the call to the answer after commit. `batch` = mean
events per transaction; `cpu ms` = CPU time of the benchmark process (driver + service) per event.

| scenario | accepted events | events/s | p50 ms | p99 ms | mean ms | batch | cpu ms | load |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
{rows}

Before group commit (commit b20f6d9: one transaction and ~9 round trips per event, envelope validated by
jsonschema alone), same benchmark: 1 task x 16 reporters 115 events/s (p50 136.6 ms, p99 235.9 ms);
2000 tasks x 1 reporter 182 events/s (p50 161.4 ms, p99 305.7 ms).

Target (issue 3): >= 1,500 events/s with p99 < 50 ms for the many-tasks case: **{verdict}** in this run.
Where the time goes and what is left to try: docs/status-api.md ("Performance").
{_http_markdown(http_rows or [])}{END}"""


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    bench = Bench(args.url, args.pool, args.batch_max, args.runners)
    group = bench.comp.service.ingestor.group
    args.effective_batch_max = group.max_batch if group else 1
    args.effective_runners = group.max_runners if group else 0
    http_rows: list[dict[str, Any]] = []
    try:
        await bench.reset()
        server = await bench.server_version()
        results = [] if args.only_processes else [await bench.hot(16, args.hot_events)]
        if not args.only_processes:
            await bench.reset()
            results.append(await bench.wide(args.tasks, args.wide_events, args.concurrency))
        if args.http and not args.only_processes:
            await bench.reset()
            results.append(await bench.wide(args.tasks, args.wide_events, args.concurrency, http=True))
        for workers in args.processes:
            await bench.reset()
            row = await asyncio.to_thread(
                ingest_http.run_case, args.url, workers, args, _mariadb_pid(args.url)
            )
            print(json.dumps(row), flush=True)
            for name, share in row["profile"]:
                print(f"  {share:5.1f} %  {name}", flush=True)
            http_rows.append(row)
    finally:
        await bench.comp.engine.dispose()
    for r in results:
        print(
            f"{r['scenario']}: {r['events']} events in {r['seconds']:.2f}s = {r['eps']:.0f}/s, "
            f"p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, batch {r['batch']:.1f}, "
            f"cpu {r['cpu_ms']:.2f} ms/event, load {r['load']:.1f}"
        )
    if args.out and results:  # the full run only (--only-processes prints its rows)
        replace_block(Path(args.out), START, END, _markdown(results, args, server, http_rows))
    return results


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True, help="mysql+asyncmy://… (a database the benchmark may empty)")
    p.add_argument("--out", help="markdown file to update (docs/PERFORMANCE.md)")
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--hot-events", type=int, default=100, help="events per reporter in the 1-task case")
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--wide-events", type=int, default=3, help="events per task in the many-tasks case")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--batch-max", type=int, help="events per group-commit transaction (1 = --single)")
    p.add_argument("--single", dest="batch_max", action="store_const", const=1, help="no group commit")
    p.add_argument("--runners", type=int, help="group-commit transactions in flight")
    p.add_argument("--http", action="store_true", help="also run the many-tasks case through the HTTP app")
    p.add_argument(
        "--processes",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        help="worker counts for the out-of-process HTTP case (e.g. 1,2): serve --workers W + generators",
    )
    p.add_argument("--generators", type=int, default=2, help="load generator processes (with --processes)")
    p.add_argument("--only-processes", action="store_true", help="run only the out-of-process HTTP case")
    p.add_argument("--profile", action="store_true", help="py-spy the workers in the out-of-process case")
    p.add_argument(
        "--server-root",
        type=Path,
        help="run the Status API from this checkout (A/B: `git worktree add /tmp/ab-old <commit>`)",
    )
    asyncio.run(main(p.parse_args()))
