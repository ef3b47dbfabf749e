"""Status API CPU per event of the ingest use case alone, batches of a fixed size, A/B between trees.

The HTTP benchmarks (``bench_tracing_off.py``, ``bench_capacity.py``) measure everything a worker
pays, but the batch size the load produces moves their CPU per event by ±10 %, more than most
single cuts. This one drives :meth:`StatusService.ingest_event` in-process (the group commit, the
envelope schema, parsing, the canonical hash, the batch transaction on MariaDB, the domain and
the writer; not HTTP, not JWT): ``--tasks`` tasks are created over HTTP first (not measured),
then ``--events`` rounds each submit one event of every task of a group at once, which the group
commit takes as one batch: groups of ``--batch`` tasks, or with ``--spread`` of 1 to ``2 * batch - 1`` tasks
(seeded, mean ``--batch``), as a varying load makes them (each row count is a statement text of
its own). CPU of the process (``time.process_time``) over the
rounds, per accepted event. ``--baseline DIR`` alternates this tree and ``DIR`` (ABBA, each run a
fresh interpreter with ``PYTHONPATH`` set to its tree) for ``--rounds`` rounds and prints the
medians. Each run also reports, when the MariaDB server is local, its CPU per event (psutil
user+sys of the server process: use a database of your own, e.g. ``scripts/services.sh start DIR``)
and its statement counters per batch (``SHOW GLOBAL STATUS`` deltas: client requests
(``Questions``), prepares, executes and closes of server-side prepared statements, COMMITs).

    .venv/bin/python loadtest/bench_ingest_batch.py --url mysql+asyncmy://… --baseline /path/to/main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = str(Path(__file__).resolve().parent)


def _groups(tasks: int, batch: int, spread: bool) -> list[list[int]]:
    rng = random.Random(31)
    out: list[list[int]] = []
    i = 0
    while i < tasks:
        n = rng.randint(1, 2 * batch - 1) if spread else batch
        out.append(list(range(i, min(i + n, tasks))))
        i += n
    return out


async def _one_run(url: str, tasks: int, events: int, batch: int, spread: bool) -> dict[str, float]:
    import uvicorn

    sys.path.insert(0, HERE)
    import ingest_http
    import profile_ingest

    from status_api.app import create_app
    from status_api.config import build_config
    from status_api.server import uvicorn_config

    await profile_ingest._reset(url)
    port = ingest_http._free_port()
    raw = ingest_http.server_config(url, port, 20)
    raw["database"]["auto_init"] = True
    cfg = build_config(raw)
    app = create_app(cfg)
    uv = uvicorn.Server(uvicorn_config(app, cfg.http))
    serving = asyncio.create_task(uv.serve())
    while not uv.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.05)
    contexts = await ingest_http._create(port, tasks)
    comp = app.state.components
    service, auth = comp.service, comp.api.service_auth
    callers = [auth.event_caller(c["executionToken"]) for c in contexts]
    groups = _groups(tasks, batch, spread)
    ok = 0
    server = _server_probe(url)
    before = await _counters(comp.engine)
    db0 = server.cpu_times() if server is not None else None
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for seq in range(1, events + 1):
        for group in groups:
            bodies = [ingest_http.progress_event(contexts[j], seq, total=1000) for j in group]
            results = await asyncio.gather(
                *(
                    service.ingest_event(b, callers[j], b["eventId"], contexts[j]["executionToken"])
                    for b, j in zip(bodies, group, strict=True)
                ),
                return_exceptions=True,
            )
            ok += sum(1 for r in results if isinstance(r, dict) and r.get("accepted"))
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    db_cpu = -1.0
    if server is not None and db0 is not None:
        db1 = server.cpu_times()
        db_cpu = db1.user + db1.system - db0.user - db0.system
    after = await _counters(comp.engine)
    sizes = list(service.ingestor.group.batch_sizes)[-len(groups) * events :]
    uv.should_exit = True
    await serving
    per_batch = {k: (after[k] - before[k]) / max(1, len(sizes)) for k in after}
    return {
        "ok": ok,
        "cpu_s": cpu,
        "db_cpu_s": db_cpu,
        "wall_ms_per_batch": wall / max(1, len(sizes)) * 1000,
        "batch": sum(sizes) / max(1, len(sizes)),
        **per_batch,
    }


#: ``SHOW GLOBAL STATUS`` counters reported per batch (the benchmark's own reads add a few).
COUNTERS = ("Questions", "Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close", "Com_commit")


def _server_probe(url: str) -> Any:
    import psutil
    import sqlalchemy as sa
    from procs import listener_pid

    pid = listener_pid(sa.make_url(url).port or 3306)
    return psutil.Process(pid) if pid else None


async def _counters(engine: Any) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = (await conn.exec_driver_sql("SHOW GLOBAL STATUS")).all()
    return {str(r[0]): int(r[1]) for r in rows if r[0] in COUNTERS}


def _run(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--url", args.url, "--tasks", str(args.tasks)]
    argv += ["--events", str(args.events), "--batch", str(args.batch), "--child"]
    argv += ["--spread"] if args.spread else []
    out = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=900)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="mysql+asyncmy://… (a database the benchmark may empty)")
    p.add_argument("--baseline", type=Path, help="checkout of the code to compare with")
    p.add_argument("--tasks", type=int, default=400)
    p.add_argument("--events", type=int, default=6, help="events per task (STEP_STARTED, then progress)")
    p.add_argument("--batch", type=int, default=10, help="events submitted at once (one batch)")
    p.add_argument("--spread", action="store_true", help="batch sizes from 1 to 2 * batch - 1")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import uvloop

        print(json.dumps(uvloop.run(_one_run(args.url, args.tasks, args.events, args.batch, args.spread))))
        return
    trees: dict[str, Path] = {"this": ROOT}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    per_event: dict[str, list[float]] = {name: [] for name in trees}
    db_per_event: dict[str, list[float]] = {name: [] for name in trees}
    names = list(trees)
    for n in range(args.rounds):
        for name in names if n % 2 == 0 else reversed(names):
            r: dict[str, Any] = _run(trees[name], args)
            ms = r["cpu_s"] / max(1, r["ok"]) * 1000
            per_event[name].append(ms)
            db_ms = r["db_cpu_s"] / max(1, r["ok"]) * 1000
            db_per_event[name].append(db_ms)
            counts = ", ".join(f"{k} {r[k]:.1f}" for k in COUNTERS if k in r)
            print(
                f"{name:8} {r['ok']:.0f} events, CPU {ms:.3f} ms/event, MariaDB {db_ms:.3f} ms/event, "
                f"batch {r['batch']:.1f}, per batch: {r['wall_ms_per_batch']:.2f} ms wall, {counts}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for name, values in per_event.items():
        print(
            f"{name:8} median {statistics.median(values):.3f} ms/event, MariaDB "
            f"{statistics.median(db_per_event[name]):.3f} ms/event over {len(values)} runs"
        )


if __name__ == "__main__":
    main()
