"""The Status API at a steady open-loop rate, without the clients: CPU per event of its workers and
of MariaDB, events per transaction and HTTP latency at the e2e's moderate rates (200–667/s).

    .venv/bin/python loadtest/bench_open_ingest.py --arm main=/work/main:2 --arm this=.:2 \\
        --rates 200 500 667 --rounds 2 [--url mysql+asyncmy://… --redis-url redis://…] [--profile 667]

Each arm is ``NAME=DIR:WORKERS[:JSON]``: ``taskcast status-api serve --workers WORKERS`` run from
checkout ``DIR`` (same venv), its config that of ``loadtest/ingest_http.py`` plus the wake-up over
Redis the deploy files use (``wake.redis_url``, a channel no relay listens on: the PUBLISH is paid,
nothing claims the rows) and ``JSON`` merged in (e.g. ``{"ingest": {"batch_runners": 1}}``).
Per run: a fresh database on the MariaDB server, ``--tasks`` tasks created over HTTP (not
measured), then the e2e's producer process (``loadtest/open_loop.py``: keep-alive HTTP over
``--conns`` connections, open loop, ``STEP_PROGRESS`` round robin over the tasks) at each rate for
``--warmup`` + ``--window`` seconds. Measured over the window only: CPU (psutil user+sys) of the
workers and of MariaDB per accepted event, MariaDB's ``Com_commit`` per event (the transactions
that wrote; the inverse is events per transaction), HTTP p50/p99, the 1-minute load average.
Arms run in ABBA order per round; the summary is the median per arm and rate.

The e2e's Status API as the §15 model runs it (``bench_capacity.py --steps e2e``): ``--tasks 20000``
(each worker's execution token comes round again after 20,000 others: the verified-token cache must
hold them all) and arms with ``{"http": {"log_level": "info"}}`` (deploy/status-api.yaml's level:
uvicorn's access log writes a line per event); the defaults (3,000 tasks, ``warning``) measure
neither.

Without ``--url``/``--redis-url``, a throwaway MariaDB and Redis (scripts/services.sh) that nothing
else uses, so MariaDB's CPU is this benchmark's alone. ``--profile RATE``: py-spy on the workers
during that rate's window, the raw stacks in the work directory (``loadtest/spy_summary.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))

import abba
import ingest_http
from bench_ingest import _mariadb_pid
from capacity_e2e import Producer, sleep_until

from taskcast.dev.procs import start_services

ROOT = Path(__file__).resolve().parents[1]


def parse_arm(spec: str) -> tuple[str, Path, int, dict[str, Any]]:
    """``NAME=DIR:WORKERS[:JSON]`` → (name, checkout, workers, config overrides)."""
    name, _, rest = spec.partition("=")
    tree, _, rest = rest.partition(":")
    workers, _, extra = rest.partition(":")
    return name, Path(tree).resolve(), int(workers or 2), json.loads(extra) if extra else {}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


async def _status(engine: Any, name: str) -> int:
    async with engine.connect() as conn:
        row = (await conn.execute(sa.text(f"SHOW GLOBAL STATUS LIKE '{name}'"))).first()
    return int(row[1]) if row else 0


class Run:
    """One arm's run: its database, its server, its tasks, its producer."""

    def __init__(self, args: argparse.Namespace, url: str, redis_url: str, db_pid: int | None) -> None:
        self.args, self.url, self.redis_url, self.db_pid = args, url, redis_url, db_pid
        self.work = Path(tempfile.mkdtemp(prefix="taskcast-open-ingest."))

    async def run(self, name: str, tree: Path, workers: int, extra: dict[str, Any]) -> list[dict[str, Any]]:
        admin = create_async_engine(self.url, pool_size=1)
        database = f"open_ingest_{uuid.uuid4().hex[:8]}"
        async with admin.begin() as conn:
            await conn.execute(sa.text(f"CREATE DATABASE {database}"))
        db_url = sa.make_url(self.url).set(database=database).render_as_string(hide_password=False)
        port = ingest_http._free_port()
        cfg = ingest_http.server_config(db_url, port, self.args.pool)
        cfg["wake"] = {"redis_url": self.redis_url, "channel": f"open-ingest:{database}:wake"}
        (self.work / f"{database}.json").write_text(json.dumps(_merge(cfg, extra)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKCAST_")}
        argv = [sys.executable, "-m", "taskcast", "status-api", "serve"]
        argv += ["--config", str(self.work / f"{database}.json"), "--workers", str(workers)]
        log = (self.work / f"{database}.log").open("wb")
        server = subprocess.Popen(  # noqa: ASYNC220 (a benchmark driver starting its server)
            argv, cwd=tree, env={**env, "PYTHONPATH": str(tree)}, stdout=log, stderr=subprocess.STDOUT
        )
        producer: Producer | None = None
        try:
            sup = psutil.Process(server.pid)
            deadline = time.monotonic() + 180
            while not ingest_http._ready(port, sup, workers):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"status api not ready: {self.work / f'{database}.log'}")
                await asyncio.sleep(0.2)  # polling a process's readiness from a benchmark driver
            contexts = await ingest_http._create(port, self.args.tasks)
            contexts_file = self.work / f"{database}.contexts.json"
            contexts_file.write_text(json.dumps(contexts))
            producer = await Producer.start(contexts_file, port, self.args.conns)
            started = await producer.call({"cmd": "start"}, 300)
            if started["errors"]:
                raise RuntimeError(f"first events: {started['first_error']}")
            procs = sup.children() or [sup]
            rows = []
            for rate in self.args.rates:
                rows.append(await self.rung(name, workers, rate, producer, procs, admin))
            return rows
        finally:
            if producer is not None:
                await producer.stop()
            ingest_http.stop_server(server, log)
            async with admin.begin() as conn:
                await conn.execute(sa.text(f"DROP DATABASE {database}"))
            await admin.dispose()

    async def rung(
        self, name: str, workers: int, rate: int, producer: Producer, procs: list[psutil.Process], admin: Any
    ) -> dict[str, Any]:
        a = self.args
        start_at = time.time() + 1.0
        cmd = {"cmd": "rung", "rate": rate, "start_at": start_at, "warmup": a.warmup, "window": a.window}
        answer = asyncio.create_task(producer.call(cmd, a.warmup + a.window + 120))
        pids = [p.pid for p in procs]
        await sleep_until(start_at + a.warmup)
        spies = ingest_http._start_spies(procs, self.work) if rate == a.profile else []
        load0 = abba.load1()
        db_pids = [self.db_pid or -1]
        cpu0, db0 = abba.cpu_seconds(pids), abba.cpu_seconds(db_pids)
        tx0 = await _status(admin, "Com_commit")
        await sleep_until(start_at + a.warmup + a.window)
        cpu1, db1 = abba.cpu_seconds(pids), abba.cpu_seconds(db_pids)
        tx1 = await _status(admin, "Com_commit")
        load1 = abba.load1()
        spy_out = str(self.work / f"spy-{name}-{rate}.txt") if spies else None
        split = ingest_http._stop_spies(spies, spy_out)
        res = await answer
        events = max(1.0, res["accepted_per_s"] * a.window)
        row = {
            "arm": name,
            "workers": workers,
            "rate": rate,
            "accepted_per_s": round(res["accepted_per_s"], 1),
            "errors": res["errors"],
            "p50_ms": round(res["request_p50_ms"], 2),
            "p99_ms": round(res["request_p99_ms"], 2),
            "api_ms_per_event": round((cpu1 - cpu0) / events * 1000, 3),
            "db_ms_per_event": round((db1 - db0) / events * 1000, 3) if self.db_pid else None,
            "events_per_tx": round(events / max(1, tx1 - tx0 - 2), 2),  # 2: the samples' own reads
            "load": [load0, load1],
        }
        if spy_out:
            row["profile"] = {"raw": spy_out, "categories": split}
        print(json.dumps(row), flush=True)
        return row


def summary(rows: list[dict[str, Any]]) -> str:
    keys = ["accepted_per_s", "api_ms_per_event", "db_ms_per_event", "events_per_tx", "p50_ms", "p99_ms"]
    lines = [
        "| arm | rate/s | runs | accepted/s | Status API CPU ms/event | MariaDB CPU ms/event | events/tx "
        "| HTTP p50 ms | HTTP p99 ms | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["arm"], r["rate"]), []).append(r)
    for rate in sorted({r for _, r in by}):
        for (arm, r), group in by.items():
            if r != rate:
                continue
            cells = []
            for k in keys:
                vals = [g[k] for g in group if g.get(k) is not None]
                cells.append(f"{statistics.median(vals):g}" if vals else "–")
            loads = ", ".join(f"{g['load'][0]}–{g['load'][1]}" for g in group)
            lines.append(f"| {arm} | {rate} | {len(group)} | " + " | ".join(cells) + f" | {loads} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    arms = [parse_arm(s) for s in args.arm]
    services = None
    url, redis_url = args.url, args.redis_url
    if not url or not redis_url:
        services = Path(tempfile.mkdtemp(prefix="taskcast-open-ingest-svc."))
        throwaway_redis, throwaway_mysql = start_services(services)
        url, redis_url = url or throwaway_mysql, redis_url or throwaway_redis
    rows: list[dict[str, Any]] = []
    try:
        run = Run(args, url, redis_url, _mariadb_pid(url))
        for _, (name, tree, workers, extra) in abba.order(arms, args.rounds):
            rows += await run.run(name, tree, workers, extra)
    finally:
        if services is not None:
            stop = ["bash", str(ROOT / "scripts/services.sh"), "stop", str(services)]
            subprocess.run(stop, check=False)  # noqa: ASYNC221 (the run is over)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arm", action="append", required=True, metavar="NAME=DIR:WORKERS[:JSON]")
    p.add_argument("--rates", type=int, nargs="+", default=[200, 500, 667])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tasks", type=int, default=3000)
    p.add_argument("--conns", type=int, default=128, help="the producer's keep-alive connections")
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--window", type=float, default=15.0)
    p.add_argument("--url", help="mysql+asyncmy://… of a MariaDB server the benchmark may add databases to")
    p.add_argument("--redis-url")
    p.add_argument("--profile", type=int, default=0, metavar="RATE", help="py-spy the workers at this rate")
    p.add_argument("--json", help="write every run's row here")
    args = p.parse_args()
    import uvloop

    rows = uvloop.run(main_async(args))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(summary(rows))


if __name__ == "__main__":
    main()
