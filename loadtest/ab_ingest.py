"""A/B of the Status API's CPU per accepted HTTP event between source trees, alternating.

``python loadtest/ab_ingest.py --url mysql+asyncmy://… --tree main=/work/main --tree this=. --rounds 2``
runs the ingest step of ``loadtest/bench_capacity.py`` (``status-api serve --workers W`` on
MariaDB, generator processes out of process; ``ingest_http.run_case``) with the server of each
tree in a palindromic order (A B B A per round), and prints every run and, per tree, the median
over its runs of: the workers' CPU ms per accepted event (psutil user+sys), MariaDB's, events/s,
p50/p99 and the 1-minute load average. On a shared machine the load drifts; alternating and taking
medians keeps the drift from favouring one tree. The database at ``--url`` is emptied by the
server's schema setup of each run (use a database of your own). ``--spy PREFIX`` samples the
workers of every run with py-spy (100 Hz) and keeps the raw stacks in ``PREFIX.<tree>.<n>.txt``
(``loadtest/spy_summary.py`` prints their shares; the sampler's own CPU is not the workers').
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "loadtest"))

import ingest_http  # noqa: E402
from abba import median_table, named_trees, tree_runs  # noqa: E402
from bench_ingest import _mariadb_pid  # noqa: E402


def one_run(url: str, tree: Path, args: argparse.Namespace, label: str, n: int) -> dict[str, Any]:
    ns = argparse.Namespace(
        pool=args.pool,
        tasks=args.tasks,
        wide_events=args.events,
        generators=args.generators,
        concurrency=args.concurrency,
        profile=bool(args.spy),
        spy_out=f"{args.spy}.{label}.{n}.txt" if args.spy else None,
        server_root=str(tree),
    )
    load = os.getloadavg()[0]
    row = ingest_http.run_case(url, args.workers, ns, _mariadb_pid(url))
    events = max(1, row["events"])
    out = {
        "tree": label,
        "events": row["events"],
        "errors": row["errors"],
        "events_per_s": round(row["eps"], 1),
        "p50_ms": round(row["p50"], 1),
        "p99_ms": round(row["p99"], 1),
        "status_api_ms_per_event": round(row["cpu_workers_s"] / events * 1000, 4),
        "mariadb_ms_per_event": round(row["cpu_mariadb_s"] / events * 1000, 4),
        "load": round((load + os.getloadavg()[0]) / 2, 2),
    }
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="mysql+asyncmy://… a database the runs may empty")
    p.add_argument("--tree", action="append", required=True, metavar="NAME=DIR", help="2 or more")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--events", type=int, default=3, help="events per task")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--spy", metavar="PREFIX", help="py-spy raw stacks of every run's workers here")
    args = p.parse_args()
    trees = named_trees(args.tree)
    runs = tree_runs(trees, args.rounds, lambda name, tree, i: one_run(args.url, tree, args, name, i))
    keys = ("status_api_ms_per_event", "mariadb_ms_per_event", "events_per_s", "p50_ms", "p99_ms", "load")
    print(median_table(runs, keys))


if __name__ == "__main__":
    main()
