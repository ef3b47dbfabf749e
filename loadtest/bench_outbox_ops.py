"""MariaDB CPU per outbox operation, one class at a time (the relay side of ``bench_dbcost.py``).

One connection against a database this benchmark owns (``dbcost_loop``, dropped and re-created per
run) holding 20,000 PUBLISHED rows (the audit window), then:

1. ``--n`` commits of 2 PENDING rows (one task version: user + detail channel);
2. ``--n`` rounds of: commit 2 rows; the hinted relay claims them (``claim_driver``: the probe, then
   lease UPDATE + next-due + COMMIT) and marks them PUBLISHED; then, every other round, the second
   relay's claim that finds nothing, and in the other rounds one of four read shapes of the probe
   (locking, plain, ids only, a count) in the state the loop leaves behind (the delete-marked index
   entries of claimed rows that InnoDB's purge has not removed yet);
3. a retention purge of every PUBLISHED row (per row).

Reported: µs of ``mariadbd`` CPU (psutil user+sys, summed per operation) per operation and variant
(an index dropped, the binary log off for the session, a row image), medians over ``--rounds`` runs,
variants alternating (ABBA).

    .venv/bin/python loadtest/bench_outbox_ops.py --url mysql+asyncmy://… --db-pid PID \\
        [--n 1500 --rounds 2 --variants base,-priority-idx,binlog-off]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import abba
from bench_dbcost import _connect

from status_api.storage import outbox_claims as oc
from status_api.storage.outbox_admin import purge_published

DB = "dbcost_loop"
SETUP: dict[str, list[str]] = {
    "base": [],
    "-priority-idx": ["ALTER TABLE task_outbox DROP INDEX outbox_priority_claim_idx"],
    "-lock-timeout-idx": ["ALTER TABLE task_outbox DROP INDEX outbox_lock_timeout_idx"],
    "binlog-off": ["SET SESSION sql_log_bin = 0"],
    "row-image-noblob": ["SET SESSION binlog_row_image = 'NOBLOB'"],
    "row-image-minimal": ["SET SESSION binlog_row_image = 'MINIMAL'"],
}
COLUMNS = (
    "aggregate_type, aggregate_id, aggregate_version, channel, projection, payload, status, priority,"
    " available_at, attempts, created_at"
)
INSERT_2 = (
    f"INSERT INTO task_outbox ({COLUMNS}) VALUES"
    " (%s,%s,%s,%s,%s,%s,'PENDING',%s,%s,0,%s), (%s,%s,%s,%s,%s,%s,'PENDING',%s,%s,0,%s)"
)
PAYLOAD = json.dumps({"kind": "task.summary", "task": {"id": "x" * 36, "title": "bench", "pad": "p" * 500}})
PROBE = oc._D_ALL_DUE.sql
SHAPES = {
    "probe FOR UPDATE": PROBE,
    "probe plain": PROBE.replace(" FOR UPDATE SKIP LOCKED", ""),
    "probe ids plain": (
        "SELECT id FROM task_outbox WHERE status = %s AND available_at <= %s"
        " ORDER BY available_at, id LIMIT %s"
    ),
    "count due": "SELECT count(*) FROM task_outbox WHERE status = %s AND available_at <= %s AND %s > 0",
}


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


async def _fresh_database(url: str) -> str:
    from sqlalchemy.ext.asyncio import create_async_engine

    from status_api.storage.database import init_db

    u = sa.make_url(url)
    admin = create_async_engine(u)
    async with admin.begin() as conn:
        await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {DB}")
        await conn.exec_driver_sql(f"CREATE DATABASE {DB}")
    await admin.dispose()
    target = u.set(database=DB)
    engine = create_async_engine(target)
    await init_db(engine)
    await engine.dispose()
    return target.render_as_string(hide_password=False)


async def run(url: str, variant: str, n: int, cpu: Callable[[], float]) -> dict[str, float]:
    db_url = await _fresh_database(url)
    conn = await _connect(url, DB)
    cur = conn.cursor()
    await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    for statement in SETUP[variant]:
        await cur.execute(statement)
    old = _now() - timedelta(minutes=5)
    window = [
        ("task", f"bg{i}", 1, f"task_user:b/u{i}", "USER_SUMMARY", PAYLOAD, "PUBLISHED", 0, old, 1, old, old)
        for i in range(20000)
    ]
    for k in range(0, len(window), 1000):
        await cur.executemany(
            f"INSERT INTO task_outbox ({COLUMNS}, published_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            window[k : k + 1000],
        )
        await conn.commit()
    version = 0

    async def insert() -> None:
        nonlocal version
        version += 1
        at, task = _now(), f"t{version % 2000}"
        priority = 5 if version % 10 == 0 else 0
        user = (
            "task",
            task,
            version,
            f"task_user:b/u{version % 500}",
            "USER_SUMMARY",
            PAYLOAD,
            priority,
            at,
            at,
        )
        detail = ("task", task, version, f"task_detail:{task}", "TASK_DETAIL", PAYLOAD, priority, at, at)
        await cur.execute(INSERT_2, user + detail)
        await conn.commit()

    await asyncio.sleep(1.0)  # the setup's undo purged (mostly) before the first phase
    out: dict[str, float] = {}
    c0 = cpu()
    for _ in range(n):
        await insert()
    out["insert 2 rows"] = (cpu() - c0) / n
    while rows := (await oc.claim_driver(cur, "r1", 200, _now()))[0]:  # drain (not measured)
        await oc.mark_published_driver(cur, [r.id for r in rows], "r1", _now())
        await conn.commit()
    await asyncio.sleep(1.0)
    sums = dict.fromkeys(("claim 2 rows", "mark 2 rows", "empty claim"), 0.0)
    shape_cpu, shape_n = dict.fromkeys(SHAPES, 0.0), dict.fromkeys(SHAPES, 0)
    for i in range(n):
        await insert()
        a = cpu()
        rows = (await oc.claim_driver(cur, "r1", 200, _now())).rows
        b = cpu()
        await oc.mark_published_driver(cur, [r.id for r in rows], "r1", _now())
        await conn.commit()
        c = cpu()
        sums["claim 2 rows"] += b - a
        sums["mark 2 rows"] += c - b
        if i % 2 == 0:
            await oc.claim_driver(cur, "r2", 200, _now())
            sums["empty claim"] += cpu() - c
        else:
            shape = list(SHAPES)[(i // 2) % len(SHAPES)]
            await cur.execute(SHAPES[shape], ["PENDING", _now(), 64])
            await cur.fetchall()
            await conn.commit()
            shape_cpu[shape] += cpu() - c
            shape_n[shape] += 1
    out["claim 2 rows"] = sums["claim 2 rows"] / n
    out["mark 2 rows"] = sums["mark 2 rows"] / n
    out["empty claim"] = sums["empty claim"] / max(1, (n + 1) // 2)
    for shape in SHAPES:
        out[f"{shape} + COMMIT"] = shape_cpu[shape] / max(1, shape_n[shape])
    await cur.close()
    conn.close()
    await asyncio.sleep(1.0)
    out["purge per row"] = await _purge_per_row(db_url, cpu)
    return {k: round(v * 1e6, 1) for k, v in out.items()}


async def _purge_per_row(db_url: str, cpu: Callable[[], float]) -> float:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(db_url)
    c0, purged = cpu(), 0
    try:
        while True:
            async with engine.begin() as conn:
                n = await purge_published(conn, datetime(2999, 1, 1), limit=1000)
            purged += n
            if n == 0:
                return (cpu() - c0) / max(1, purged)
    finally:
        await engine.dispose()


async def main_async(args: argparse.Namespace) -> None:
    def cpu() -> float:
        return abba.cpu_seconds([args.db_pid])

    runs: list[dict[str, Any]] = []
    for _, v in abba.order(args.variants.split(","), args.rounds):
        load = abba.load1()
        result: dict[str, Any] = {"variant": v, **await run(args.url, v, args.n, cpu), "load": load}
        print(json.dumps(result), flush=True)
        runs.append(result)
    keys = [k for k in runs[0] if k not in ("variant", "load")] if runs else []
    for v, medians in abba.medians(runs, "variant", keys).items():
        loads = [r["load"] for r in runs if r["variant"] == v]
        print(json.dumps({"variant": v, "median_us": medians, "loads": loads}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="a MariaDB server (the benchmark owns database dbcost_loop)")
    p.add_argument("--db-pid", type=int, required=True, help="pid of that server's mariadbd")
    p.add_argument("--n", type=int, default=1500, help="rounds per phase")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", default="base,-priority-idx,binlog-off", help=f"comma list of {list(SETUP)}")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
