"""What one retention pass of the outbox costs MariaDB when the retention window is full.

The relay's retention pass (``relay.claim.OutboxLeases.purge``) calls
``outbox_admin.purge_published`` until a call deletes fewer rows than its chunk. A table with
``--window`` PUBLISHED rows inside the retention window and ``--old`` PUBLISHED rows older than it
(``--pending`` PENDING rows beside them); each pass deletes the old rows, and the table is refilled
before the next pass. ``--old 0`` measures a pass that finds nothing to delete, on one table for
every tree (written once, as the last tree's relay marks rows). Reported per tree: MariaDB CPU
(psutil user+sys of ``mariadbd``) per pass and per purged row, medians over ``--rounds`` passes per
tree, trees alternating (ABBA).

``--tree DIR`` (repeat) runs the pass with that checkout's ``status_api`` (a subprocess with the
tree first on ``sys.path``); the rows are written as the tree's relay marks them (the
``locked_at`` a PUBLISHED row keeps or not is the tree's ``mark_published``).

    .venv/bin/python loadtest/bench_outbox_purge.py --url mysql+asyncmy://… --db-pid PID \\
        --tree /work/main --tree . [--window 200000 --old 5000 --rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import abba

CHILD = r"""
import asyncio, sys, json
from datetime import datetime, timedelta
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from status_api.storage import outbox_admin, outbox_claims
from status_api.storage.database import init_db
from status_api.storage.tables import task_outbox

url, mode = sys.argv[1], sys.argv[2]
window, old, pending = (int(a) for a in sys.argv[3:6])
NOW = datetime(2026, 12, 2, 12, 0, 0)
CUTOFF = NOW - timedelta(hours=1)
PAYLOAD = {"kind": "task.summary", "pad": "p" * 500}
HISTORY = ("SELECT `count` FROM information_schema.INNODB_METRICS"
           " WHERE name = 'trx_rseg_history_len'")

async def fill(engine, n, first, published_at, status="PUBLISHED"):
    prefix = "t" if status == "PUBLISHED" else "p"
    # rows as this tree's relay leaves them: claimed (lease at published_at - 20 ms), then marked
    rows = []
    for i in range(n):
        at = published_at - timedelta(milliseconds=20)
        rows.append(dict(aggregate_id=f"{prefix}{first + i}", aggregate_version=1, channel=f"c{first + i}",
                         projection="USER_SUMMARY", payload=PAYLOAD, status="PENDING", priority=0,
                         available_at=at, attempts=0, created_at=at))
    for k in range(0, n, 2000):
        async with engine.begin() as conn:
            await conn.execute(sa.insert(task_outbox), rows[k:k + 2000])
    if status != "PUBLISHED":
        return
    async with engine.connect() as conn:
        ids = [r[0] for r in await conn.execute(
            sa.select(task_outbox.c.id).where(task_outbox.c.status == "PENDING",
                                             task_outbox.c.aggregate_id.like("t%")))]
    lease = published_at - timedelta(milliseconds=10)
    for k in range(0, len(ids), 2000):
        chunk = ids[k:k + 2000]
        async with engine.begin() as conn:
            await conn.execute(sa.update(task_outbox).where(task_outbox.c.id.in_(chunk)).values(
                status="PROCESSING", locked_by="bench-relay", locked_at=lease))
            await outbox_claims.mark_published(conn, chunk, "bench-relay", published_at)

async def main():
    engine = create_async_engine(url)
    if mode == "setup":
        await init_db(engine)
        async with engine.begin() as conn:
            await conn.execute(task_outbox.delete())
        await fill(engine, window, 10_000_000, NOW - timedelta(minutes=10))
        await fill(engine, pending, 20_000_000, NOW, status="PENDING")
    elif mode == "settle":
        # InnoDB's purge of the setup's undo (history length near zero), bounded at 120 s
        for _ in range(1200):
            async with engine.connect() as conn:
                n = await conn.scalar(sa.text(HISTORY))
            if int(n or 0) < 50:
                break
            await asyncio.sleep(0.1)
    elif mode == "refill":
        await fill(engine, old, 30_000_000, CUTOFF - timedelta(minutes=10))
    else:
        total = 0
        for _ in range(int(sys.argv[6])):  # --repeat: passes after the first find nothing old
            while True:
                async with engine.begin() as conn:
                    n = await outbox_admin.purge_published(conn, CUTOFF, 5000)
                total += n
                if n < 5000:
                    break
        print(json.dumps({"purged": total}))
    await engine.dispose()

asyncio.run(main())
"""


def child(tree: str, url: str, mode: str, args: argparse.Namespace) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    argv = [sys.executable, "-c", CHILD, url, mode, str(args.window), str(args.old), str(args.pending)]
    argv.append(str(args.repeat))
    # cwd = the tree: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH
    return subprocess.run(argv, env=env, cwd=tree, check=True, capture_output=True, text=True).stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="a MariaDB database this benchmark may empty")
    p.add_argument("--db-pid", type=int, required=True)
    p.add_argument("--tree", action="append", default=[], help="checkout to run (repeat; default: this one)")
    p.add_argument("--window", type=int, default=200_000, help="PUBLISHED rows inside the retention window")
    p.add_argument("--old", type=int, default=5_000, help="PUBLISHED rows older than the window, per pass")
    p.add_argument("--pending", type=int, default=200)
    p.add_argument("--rounds", type=int, default=4, help="measurements per tree")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="passes per measurement (the CPU clock ticks at 10 ms: repeat short ones)",
    )
    args = p.parse_args()
    trees = args.tree or [str(Path(__file__).resolve().parents[1])]
    runs: list[dict[str, Any]] = []
    for rnd, tree in abba.order(trees, args.rounds):
        if args.old or not (rnd or tree != trees[0]):
            # the window as this tree's relay leaves it (--old 0: as the last tree's relay leaves
            # it, once: a pass then deletes nothing and every tree reads the same table)
            child(tree if args.old else trees[-1], args.url, "setup", args)
            child(tree, args.url, "refill", args)
        child(tree, args.url, "settle", args)  # the setup's undo purged before the window
        load = abba.load1()
        c0 = abba.cpu_seconds([args.db_pid])
        out = json.loads(child(tree, args.url, "purge", args))
        cpu = abba.cpu_seconds([args.db_pid]) - c0
        run = {
            "tree": tree,
            "cpu_ms_per_pass": round(cpu * 1000 / args.repeat, 1),
            "purged": out["purged"],
            "load": load,
            "us_per_purged_row": round(cpu / max(1, out["purged"]) * 1e6, 1),
        }
        print(json.dumps(run), flush=True)
        runs.append(run)
    for tree, medians in abba.medians(runs, "tree", ["cpu_ms_per_pass", "us_per_purged_row"]).items():
        summary = {
            "tree": tree,
            "window": args.window,
            "old": args.old,
            "median_cpu_ms_per_pass": medians["cpu_ms_per_pass"],
            "median_us_per_purged_row": medians["us_per_purged_row"],
            "loads": [r["load"] for r in runs if r["tree"] == tree],
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
