"""The capacity model on one machine (seed §15; `make bench-capacity`): what an accepted event
costs each process of the pipeline, beside what the database alone needs for it.

Steps (each reports CPU seconds per event from psutil, never wall time: the machine is shared):

1. **ingest** — ``taskcast status-api serve --workers W`` on MariaDB, ``--tasks`` tasks, generator
   processes sending each task's events over keep-alive HTTP (``loadtest/ingest_http.py``) with
   ``--concurrency`` requests in flight. CPU per accepted event of the Status API's workers and of
   MariaDB.
2. **floor** — the database floor of the same work, in the same run: the same events ingested
   in-process once more while every SQL statement and transaction boundary is recorded
   (SQLAlchemy cursor events), then that statement log replayed through the driver alone
   (asyncmy, no SQLAlchemy, no Status API) on a copy of the pre-event database, with as many
   connections as the group commit had transactions in flight. Floor = (replay process + MariaDB)
   CPU per event. The Status API's CPU per event is reported as a multiple of it.
3. **e2e** — the seed's model end to end (``loadtest/capacity_e2e.py``): the production topology
   with 20,000 active tasks, a board connection per task owner and a detail watcher per task,
   producers at 667 events/s and then a ladder to the ceiling; accepted events/s, HTTP and
   commit→visible p50/p99, deliveries, CPU per event of every process.
4. **idle** — idle connections on one gateway process (``loadtest/bench_idle.py``).

Every record carries the 1-minute load average. ``--quick`` is a smoke run (a few tasks, one
worker, 40 tasks and one short rung): it checks that the benchmark runs and reports, never a capacity.

    make bench-capacity                    # throwaway MariaDB + Redis, results into docs/PERFORMANCE.md
    .venv/bin/python loadtest/bench_capacity.py [--url mysql+asyncmy://… --redis-url redis://…]
        [--quick] [--steps ingest floor e2e idle] [--out FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import abba
import capacity_e2e
import capacity_report
import ingest_http
from bench_ingest import Bench, _mariadb_pid
from fleet import replace_block

from taskcast.dev.procs import start_services

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- capacity:start -->", "<!-- capacity:end -->"
E2E_START, E2E_END = "<!-- capacity:e2e:start -->", "<!-- capacity:e2e:end -->"
STEPS = ("ingest", "floor", "e2e", "idle")

#: One transaction of the statement log: (statement, DBAPI parameters, executemany) in order.
Transaction = list[tuple[str, Any, bool]]


# --- step 1: HTTP ingest out of process -------------------------------------------------------


def ingest_step(url: str, args: argparse.Namespace, db_pid: int | None) -> dict[str, Any]:
    ns = argparse.Namespace(
        pool=args.pool,
        tasks=args.tasks,
        wide_events=args.events,
        generators=args.generators,
        concurrency=args.concurrency,
        profile=False,
        server_root=args.server_tree,
    )
    load = abba.load1()
    row = ingest_http.run_case(url, args.workers, ns, db_pid)
    events = max(1, row["events"])
    return {
        "step": "ingest",
        "workers": args.workers,
        "events": row["events"],
        "errors": row["errors"],
        "first_error": row["first_error"],
        "events_per_s": round(row["eps"], 1),
        "p50_ms": round(row["p50"], 2),
        "p99_ms": round(row["p99"], 2),
        "status_api_cpu_ms_per_event": round(row["cpu_workers_s"] / events * 1000, 3),
        "mariadb_cpu_ms_per_event": round(row["cpu_mariadb_s"] / events * 1000, 3) if db_pid else None,
        "load_start": load,
        "load_end": abba.load1(),
    }


# --- step 2: the database floor ---------------------------------------------------------------


class StatementLog:
    """Records every statement of an engine, grouped by committed transaction (SQLAlchemy events)."""

    def __init__(self, engine: Any) -> None:
        self.transactions: list[Transaction] = []
        self._open: dict[int, Transaction] = {}
        sync = engine.sync_engine
        sa.event.listen(sync, "before_cursor_execute", self._statement)
        sa.event.listen(sync, "commit", self._commit)
        sa.event.listen(sync, "rollback", self._rollback)

    def _statement(self, conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        self._open.setdefault(id(conn), []).append((statement, params, many))

    def _commit(self, conn: Any) -> None:
        stmts = self._open.pop(id(conn), None)
        if stmts:
            self.transactions.append(stmts)

    def _rollback(self, conn: Any) -> None:
        self._open.pop(id(conn), None)


async def _copy_database(engine: Any, source: str, target: str) -> None:
    async with engine.connect() as conn:
        if (await conn.exec_driver_sql(f"SHOW DATABASES LIKE '{target}'")).first() is not None:
            await conn.exec_driver_sql(f"DROP DATABASE `{target}`")
        await conn.exec_driver_sql(f"CREATE DATABASE `{target}`")
        tables = [r[0] for r in (await conn.exec_driver_sql(f"SHOW TABLES FROM `{source}`")).all()]
        await conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 0")
        for t in tables:
            await conn.exec_driver_sql(f"CREATE TABLE `{target}`.`{t}` LIKE `{source}`.`{t}`")
            await conn.exec_driver_sql(f"INSERT INTO `{target}`.`{t}` SELECT * FROM `{source}`.`{t}`")
        await conn.commit()


async def _capture(url: str, args: argparse.Namespace, replica: str) -> tuple[list[Transaction], int, int]:
    """The events of the ingest step ingested in-process with the statement log on; returns the
    log, the events accepted and the connections to replay it with. One process stands for the
    ``--workers`` processes of the HTTP step: it takes a worker's share of the requests in flight
    (so its batches are a worker's size) and the replay uses every worker's transactions."""
    bench = Bench(url, args.pool, None, None)
    await bench.reset()
    created = [await bench.create(1) for _ in range(args.tasks)]
    await _copy_database(bench.comp.engine, sa.make_url(url).database or "", replica)
    log = StatementLog(bench.comp.engine)
    gate = asyncio.Semaphore(max(1, args.concurrency // args.workers))
    lat: list[float] = []

    async def reporter(ctx: dict[str, Any]) -> None:
        for seq in range(1, args.events + 1):
            async with gate:
                await bench.send(ctx, seq, lat)

    await asyncio.gather(*(reporter(t["steps"][0]) for t in created))
    group = bench.comp.service.ingestor.group
    runners = group.max_runners if group is not None else 1
    await bench.comp.engine.dispose()
    return log.transactions, len(lat), runners * args.workers


async def _replay(url: str, database: str, transactions: list[Transaction], connections: int) -> None:
    import asyncmy

    u = sa.make_url(url)
    queue = list(reversed(transactions))

    async def one() -> None:
        conn = await asyncmy.connect(
            host=u.host or "127.0.0.1",
            port=u.port or 3306,
            user=u.username or "",
            password=u.password or "",
            db=database,
            charset="utf8mb4",
            autocommit=False,
        )
        try:
            async with conn.cursor() as cur:
                await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            while queue:
                tx = queue.pop()
                async with conn.cursor() as cur:
                    for statement, params, many in tx:
                        if many:
                            await cur.executemany(statement, params)
                        else:
                            await cur.execute(statement, params)
                        if cur.description is not None:
                            await cur.fetchall()
                await conn.commit()
        finally:
            conn.close()

    await asyncio.gather(*(one() for _ in range(connections)))


def floor_step(url: str, args: argparse.Namespace, db_pid: int | None) -> dict[str, Any]:
    import uvloop

    replica = f"{sa.make_url(url).database}_floor"
    transactions, events, runners = uvloop.run(_capture(url, args, replica))
    statements = sum(len(t) for t in transactions)
    me = os.getpid()
    procs = [me, *([db_pid] if db_pid else [])]
    load = abba.load1()
    cpu0 = abba.cpu_by_pid(procs)
    t0 = time.perf_counter()
    uvloop.run(_replay(url, replica, transactions, runners))
    wall = time.perf_counter() - t0
    cpu1 = abba.cpu_by_pid(procs)
    driver_s = cpu1[me] - cpu0[me]
    db_s = cpu1[db_pid] - cpu0[db_pid] if db_pid else 0.0
    per = max(1, events)
    return {
        "step": "floor",
        "events": events,
        "transactions": len(transactions),
        "statements": statements,
        "statements_per_event": round(statements / per, 2),
        "events_per_transaction": round(events / max(1, len(transactions)), 1),
        "connections": runners,
        "replay_events_per_s": round(events / wall, 1) if wall > 0 else None,
        "driver_cpu_ms_per_event": round(driver_s / per * 1000, 3),
        "mariadb_cpu_ms_per_event": round(db_s / per * 1000, 3) if db_pid else None,
        "floor_cpu_ms_per_event": round((driver_s + db_s) / per * 1000, 3) if db_pid else None,
        "load_start": load,
        "load_end": abba.load1(),
    }


# --- report -----------------------------------------------------------------------------------


def _f(value: Any) -> str:
    return "–" if value is None else str(value)


def markdown(results: dict[str, Any]) -> str:
    ing, flo = results["ingest"], results["floor"]
    floor = flo["floor_cpu_ms_per_event"]
    ratio = f"{ing['status_api_cpu_ms_per_event'] / floor:.2f}×" if floor else "– (MariaDB's pid unknown)"
    return "\n".join(
        [
            START,
            "## Capacity: CPU per event against the database floor (`make bench-capacity`)",
            "",
            f"Run {results['date']}, git `{results['git']}`, {results['cpus']} CPUs, Python "
            f"{results['python']}; `--workers {ing['workers']}`, {results['tasks']} tasks x "
            f"{results['events']} events, {results['concurrency']} requests in flight from "
            f"{results['generators']} generator processes. CPU from psutil (user+sys) of each process; "
            "load = 1-minute load average at the start / end of the step (2 CPUs, shared).",
            "",
            "| step | events | events/s | p50 / p99 ms | CPU ms per event | load |",
            "|---|---:|---:|---:|---|---:|",
            f"| ingest over HTTP | {ing['events']} ({ing['errors']} errors) | {ing['events_per_s']} | "
            f"{ing['p50_ms']} / {ing['p99_ms']} | Status API {ing['status_api_cpu_ms_per_event']}, "
            f"MariaDB {_f(ing['mariadb_cpu_ms_per_event'])} | {ing['load_start']} / {ing['load_end']} |",
            f"| database floor (replay) | {flo['events']} | {_f(flo['replay_events_per_s'])} | – | "
            f"driver {flo['driver_cpu_ms_per_event']} + MariaDB {_f(flo['mariadb_cpu_ms_per_event'])} "
            f"= **{_f(floor)}** | {flo['load_start']} / {flo['load_end']} |",
            "",
            f"Floor: {flo['statements_per_event']} statements per event "
            f"({flo['statements']} in {flo['transactions']} transactions, "
            f"{flo['events_per_transaction']} events per transaction, {flo['connections']} connections). "
            f"Status API CPU per event / floor: **{ratio}** (target: ≤ 3×, and ≤ 0.5 ms).",
            END,
        ]
    )


def markdown_e2e(results: dict[str, Any]) -> str:
    parts = [
        E2E_START,
        "## Capacity end to end: the seed's §15 model (`make bench-capacity`, steps e2e + idle)",
        "",
        f"Run {results['date']}, git `{results['git']}`, {results['cpus']} CPUs (shared), Python "
        f"{results['python']}. CPU = user + sys from /proc of each process over the measured window.",
    ]
    if "e2e" in results:
        parts += ["", capacity_report.markdown_e2e(results["e2e"])]
    if "idle" in results:
        parts += ["", capacity_report.markdown_idle(results["idle"])]
    return "\n".join([*parts, E2E_END])


def _steps(values: list[str]) -> set[str]:
    steps = {s for v in values for s in v.split(",") if s}
    unknown = steps - set(STEPS)
    if unknown:
        raise SystemExit(f"unknown steps: {sorted(unknown)} (known: {', '.join(STEPS)})")
    return steps


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="mysql+asyncmy://… a database the benchmark may empty (default: throwaway)")
    p.add_argument("--redis-url", help="redis://… for the e2e step (default: throwaway, with --url unset)")
    p.add_argument("--out", help="markdown file to update (docs/PERFORMANCE.md)")
    p.add_argument("--json", help="write the results here too (docs/perf/capacity-results.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: a few tasks, one worker, one short rung")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--events", type=int, default=3, help="events per task")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--server-tree", help="run the Status API from this checkout (an A/B; same venv)")
    p.add_argument(
        "--steps", nargs="+", default=list(STEPS), help="any of: ingest floor e2e idle (spaces or commas)"
    )
    capacity_e2e.add_arguments(p)
    args = p.parse_args()
    steps = _steps(args.steps)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the topology and the services on SIGTERM too
    if args.quick:
        args.workers, args.tasks, args.events, args.concurrency, args.generators = 1, 20, 2, 4, 1
        capacity_e2e.quick(args)
    services = None
    url, redis_url = args.url, args.redis_url
    if url is None or (redis_url is None and "e2e" in steps):
        services = Path(tempfile.mkdtemp(prefix="taskcast-capacity."))
        throwaway_redis, throwaway_mysql = start_services(services)
        url, redis_url = url or throwaway_mysql, redis_url or throwaway_redis
    try:
        db_pid = _mariadb_pid(url)
        results: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "git": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "tasks": args.tasks,
            "events": args.events,
            "concurrency": args.concurrency,
            "generators": args.generators,
            "mariadb_pid_known": db_pid is not None,
        }
        if "ingest" in steps:
            results["ingest"] = ingest_step(url, args, db_pid)
        if "floor" in steps:
            results["floor"] = floor_step(url, args, db_pid)
        if "e2e" in steps:
            results["e2e"] = capacity_e2e.e2e_step(redis_url or "", url, args)
        if "idle" in steps:
            results["idle"] = capacity_e2e.idle_step(args)
    finally:
        if services is not None:
            subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "stop", str(services)], check=False)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(json.dumps(results))
    if args.out and {"ingest", "floor"} <= steps:
        replace_block(Path(args.out), START, END, markdown(results))
    if args.out and steps & {"e2e", "idle"}:
        replace_block(Path(args.out), E2E_START, E2E_END, markdown_e2e(results))


if __name__ == "__main__":
    main()
