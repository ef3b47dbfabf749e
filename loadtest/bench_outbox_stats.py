"""What the outbox gauges' query (``outbox_admin.stats``) costs MariaDB as the retention window grows.

Each relay calls it every ``stats_interval_seconds`` (5 s) for its gauges, and ``GET
/admin/v1/outbox/stats`` and the operator UI's backlog view call it too. A throwaway MariaDB
(``scripts/services.sh``) gets ``--pending`` PENDING, a few PROCESSING and DEAD rows and, per
``--published`` size in turn, that many PUBLISHED rows; then every ``--tree`` (a checkout's
``status_api``, in a subprocess with the tree first on ``sys.path``) calls ``stats`` ``--calls``
times on one connection. Reported per tree and size: MariaDB CPU (psutil user+sys of ``mariadbd``,
read around the calls) per call, and the server's ``Handler_read%`` counters per call (rows and
index entries the storage engine read); medians over ``--rounds``, trees alternating (ABBA).

    .venv/bin/python loadtest/bench_outbox_stats.py --tree /path/to/main --tree . \\
        [--published 1000 200000 --pending 50 --calls 50 --rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from status_api.storage.database import create_engine, init_db  # noqa: E402
from status_api.storage.tables import task_outbox  # noqa: E402

NOW = datetime(2026, 12, 2, 12, 0, 0)
PAYLOAD = {"kind": "task.summary", "pad": "p" * 500}

CHILD = r"""
import asyncio, json, sys
from datetime import datetime
import psutil
import sqlalchemy as sa
from status_api.storage import outbox_admin
from status_api.storage.database import create_engine

url, db_pid, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
NOW = datetime(2026, 12, 2, 12, 0, 0)

async def reads(conn):
    rows = await conn.execute(sa.text("SHOW SESSION STATUS LIKE :n"), {"n": "Handler_read%"})
    return sum(int(v) for _, v in rows)

async def main():
    engine = create_engine(url)
    db = psutil.Process(db_pid)
    async with engine.connect() as conn:
        got = await outbox_admin.stats(conn, NOW)  # warm: the table open, the statements compiled
        r0 = await reads(conn)
        c0 = sum(db.cpu_times()[:2])
        for _ in range(calls):
            got = await outbox_admin.stats(conn, NOW)
        cpu = sum(db.cpu_times()[:2]) - c0
        r1 = await reads(conn)
        show = await reads(conn) - r1
    await engine.dispose()
    print(json.dumps({"cpu_ms_per_call": cpu * 1000 / calls,
                      "reads_per_call": (r1 - r0 - show) / calls, "counts": got["counts"]}))

asyncio.run(main())
"""


def services(state: Path, cmd: str) -> str:
    out = subprocess.run(
        ["bash", "scripts/services.sh", cmd, str(state)],
        cwd=ROOT,
        check=cmd == "start",
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("export TASKCAST_TEST_MYSQL_URL="):
            return line.split("=", 1)[1]
    return ""


def rows(status: str, first: int, n: int) -> list[dict[str, object]]:
    at = NOW - timedelta(minutes=10)
    return [
        {
            "aggregate_id": f"{status.lower()}-{first + i}",
            "aggregate_version": 1,
            "channel": f"task_user:t/u{(first + i) % 500}",
            "projection": "USER_SUMMARY",
            "payload": PAYLOAD,
            "status": status,
            "available_at": at,
            "created_at": at,
            "locked_by": None if status == "PENDING" else "bench",
            "locked_at": None if status == "PENDING" else at,
            "published_at": at if status == "PUBLISHED" else None,
        }
        for i in range(n)
    ]


async def fill(url: str, batch: list[dict[str, object]], *, create: bool = False) -> None:
    engine = create_engine(url)
    if create:
        await init_db(engine)
    for k in range(0, len(batch), 2000):
        async with engine.begin() as conn:
            await conn.execute(sa.insert(task_outbox), batch[k : k + 2000])
    await engine.dispose()


def measure(tree: str, url: str, db_pid: int, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(db_pid), str(calls)],
        env=env,
        cwd=tree,  # ``python -c`` puts the working directory first on sys.path
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], help="checkout to run (repeat; default: this one)")
    p.add_argument("--published", type=int, nargs="+", default=[1000, 200_000], help="ascending")
    p.add_argument("--pending", type=int, default=50)
    p.add_argument("--calls", type=int, default=50, help="stats calls per measurement")
    p.add_argument("--rounds", type=int, default=4, help="measurements per tree and size")
    args = p.parse_args()
    trees = args.tree or [str(ROOT)]
    state = Path(tempfile.mkdtemp(prefix="bench-outbox-stats."))
    try:
        url = services(state, "start")
        db_pid = int((state / "mysql.pid").read_text())
        asyncio.run(fill(url, rows("PENDING", 0, args.pending) + rows("DEAD", 10_000, 3), create=True))
        asyncio.run(fill(url, rows("PROCESSING", 20_000, 5)))
        have = 0
        for size in args.published:
            asyncio.run(fill(url, rows("PUBLISHED", 1_000_000 + have, size - have)))
            have = size
            runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
            for rnd in range(args.rounds):
                for tree in trees if rnd % 2 == 0 else list(reversed(trees)):
                    load = round(os.getloadavg()[0], 2)
                    run = {**measure(tree, url, db_pid, args.calls), "load": load}
                    print(json.dumps({"tree": tree, "published": size, **run}), flush=True)
                    runs[tree].append(run)
            for tree, rs in runs.items():
                summary = {
                    "tree": tree,
                    "published": size,
                    "median_cpu_ms_per_call": round(statistics.median(r["cpu_ms_per_call"] for r in rs), 3),
                    "median_reads_per_call": statistics.median(r["reads_per_call"] for r in rs),
                    "loads": [r["load"] for r in rs],
                }
                print(json.dumps(summary), flush=True)
    finally:
        services(state, "stop")
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
