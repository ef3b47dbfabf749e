"""The relay's hinted claim on MariaDB: statements, time and server CPU per claim (issue 16).

What a wake-up hint costs between the commit and the publish is mostly the claim transaction. Each
round: commit 2 outbox rows (one task version, user + detail channel, as the Status API does), then
claim as the hinted relay would (``takeover=False``, room for ``batch_size`` rows), then claim again
as the second relay whose hint found nothing. Measured per claim: MariaDB's own statement counters
(``SHOW GLOBAL STATUS``; nothing else uses the throwaway server), the transaction's wall time
(p50/p99) and MariaDB's CPU seconds (psutil on ``mariadbd``).

``--tree DIR`` (repeatable) runs the same rounds with another checkout's ``status_api`` and ``relay``
(a subprocess with that tree first on ``sys.path``), alternating trees, so an A/B shares one server,
one machine state and one run. Starts its own MariaDB (``scripts/services.sh``) unless
``--mysql-url`` is given. Prints JSON; ``--out`` replaces the ``claim`` block of a markdown file.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from taskcast.dev.procs import start_services  # noqa: E402

COUNTERS = ("Com_select", "Com_update", "Com_insert", "Com_commit", "Com_rollback", "Questions")


async def worker(url: str, rounds: int, batch_size: int) -> dict[str, Any]:
    """One tree's rounds (imports come from whichever tree is first on ``sys.path``)."""
    import sqlalchemy as sa

    from relay.claim import OutboxLeases, create_engine, utc_now
    from status_api.storage import outbox, write
    from status_api.storage.database import init_db
    from status_api.storage.tables import task_outbox

    engine = create_engine(url, pool_size=4)
    await init_db(engine)
    async with engine.begin() as conn:
        await conn.execute(task_outbox.delete())

    async def counters() -> dict[str, int]:
        async with engine.connect() as conn:
            rows = (await conn.exec_driver_sql("SHOW GLOBAL STATUS")).all()
        return {str(r[0]): int(r[1]) for r in rows if r[0] in COUNTERS}

    winner = OutboxLeases(engine, "bench-relay-1", lease_seconds=30)
    loser = OutboxLeases(engine, "bench-relay-2", lease_seconds=30)
    hit: list[float] = []
    miss: list[float] = []
    stats: dict[str, dict[str, float]] = {}
    for phase in ("hit", "miss"):
        totals = dict.fromkeys(COUNTERS, 0)
        for i in range(rounds):
            task = f"bench-{uuid.uuid4().hex[:10]}"
            msgs = [
                outbox.OutboxMessage(f"task_user:u{i % 50}", "USER_SUMMARY", {"taskId": task, "v": 2}, 0),
                outbox.OutboxMessage(f"task_detail:{task}", "TASK_DETAIL", {"taskId": task, "v": 2}, 0),
            ]
            async with engine.begin() as conn:
                await write.append_outbox_version(conn, task, 2, msgs, utc_now())
            if phase == "miss":
                await winner.claim(batch_size, takeover=False)  # the other relay won
            before = await counters()
            started = time.perf_counter()
            rows = await (winner if phase == "hit" else loser).claim(batch_size, takeover=False)
            (hit if phase == "hit" else miss).append(time.perf_counter() - started)
            after = await counters()
            assert len(rows) == (2 if phase == "hit" else 0), len(rows)
            for k in COUNTERS:
                # ``counters()`` is a transaction of its own: SHOW (a question, no SELECT) + ROLLBACK.
                totals[k] += after[k] - before[k]
        # Inside each delta: the ROLLBACK that ends the ``before`` read, and the ``after`` SHOW.
        totals["Questions"] -= 2 * rounds  # the after-SHOW and the before-read's ROLLBACK
        totals["Com_rollback"] -= rounds
        stats[phase] = {k: v / rounds for k, v in totals.items()}
    async with engine.begin() as conn:
        await conn.execute(sa.delete(task_outbox))
    await engine.dispose()

    def ms(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 3)

    return {
        "statements_per_claim": stats,
        "hit_ms": {"p50": ms(hit, 0.5), "p99": ms(hit, 0.99), "mean": round(1000 * statistics.fmean(hit), 3)},
        "miss_ms": {
            "p50": ms(miss, 0.5),
            "p99": ms(miss, 0.99),
            "mean": round(1000 * statistics.fmean(miss), 3),
        },
    }


def mariadb_cpu(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def run_tree(tree: Path, url: str, args: argparse.Namespace, db_pid: int | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu0 = mariadb_cpu(db_pid) if db_pid else None
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            "--mysql-url",
            url,
            "--rounds",
            str(args.rounds),
            "--batch-size",
            str(args.batch_size),
        ],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if cpu0 is not None and db_pid:
        result["mariadb_cpu_ms_per_round"] = round(1000 * (mariadb_cpu(db_pid) - cpu0) / (2 * args.rounds), 4)
    result["tree"] = str(tree)
    return result


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, load: tuple[float, ...]) -> str:
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "<!-- claim:start -->",
        "## The hinted claim (`loadtest/bench_claim.py`)",
        "",
        f"Generated {date}; {args.rounds} rounds per tree and phase, trees alternating "
        f"{args.repeat}×; load average at start {load[0]:.2f}. *hit* = the relay whose hint finds the 2 rows "
        "of a just-committed task version; *miss* = the second relay, whose hint finds them taken. "
        "Statements from MariaDB's `SHOW GLOBAL STATUS`, per claim (the test suite asserts the counts). "
        "MariaDB CPU per round: one 2-row commit, the claim(s) and two `SHOW GLOBAL STATUS` reads.",
        "",
        "| tree | hit: statements (SELECT / UPDATE / COMMIT / ROLLBACK) | hit ms p50 / p99 "
        "| miss: statements | miss ms p50 / p99 | MariaDB CPU ms per round |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in results:
        s = r["statements_per_claim"]

        def st(p: str, s: dict[str, Any] = s) -> str:
            d = s[p]
            return (
                f"{d['Questions']:.1f} ({d['Com_select']:.1f} / {d['Com_update']:.1f} / "
                f"{d['Com_commit']:.1f} / {d['Com_rollback']:.1f})"
            )

        lines.append(
            f"| {Path(r['tree']).name} | {st('hit')} | {r['hit_ms']['p50']} / {r['hit_ms']['p99']} "
            f"| {st('miss')} | {r['miss_ms']['p50']} / {r['miss_ms']['p99']} "
            f"| {r.get('mariadb_cpu_ms_per_round', '–')} |"
        )
    lines += ["<!-- claim:end -->"]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mysql-url")
    p.add_argument("--rounds", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--tree", action="append", type=Path, default=[])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", type=Path)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(worker(args.mysql_url, args.rounds, args.batch_size))))
        return
    trees = args.tree or [ROOT]
    state = None
    url = args.mysql_url
    db_pid = None
    if url is None:
        state = Path(tempfile.mkdtemp(prefix="bench-claim-"))
        _, url = start_services(state)
        db_pid = int((state / "mysql.pid").read_text().strip())
    load = os.getloadavg()
    try:
        results = [run_tree(t, url, args, db_pid) for _ in range(args.repeat) for t in trees]
    finally:
        if state is not None:
            subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "stop", str(state)], check=False)
    print(json.dumps(results, indent=1))
    if args.out:
        sys.path.insert(0, str(ROOT / "loadtest"))
        from fleet import replace_block

        replace_block(args.out, "<!-- claim:start -->", "<!-- claim:end -->", markdown(results, args, load))


if __name__ == "__main__":
    main()
