"""Where a drained outbox row's CPU goes: relays, gateway, MariaDB, and MariaDB's claim vs mark.

``bench_relay.py`` (``make bench-relay``) times a whole backlog drain; its CPU figures include the
relays' start-up and its own polls of the table. This benchmark measures the steady middle of the
drain only, and then the database's share on its own:

1. **drain**: ``--rows`` PENDING rows (bench_relay's seed: ~600-byte task.summary payloads, user +
   detail channels), ``--relays`` ``taskcast relay run`` processes (batch ``--batch-size`` ×
   ``--concurrency`` loops) publishing into one gateway (bench_relay's config). CPU (psutil
   user+sys) of the relays, the gateway and ``mariadbd`` is read when the relays' own
   ``taskcast_relay_published_rows_total`` passes 15 % and 85 % of the rows (scraped from their
   metrics endpoints: the table is not polled), so start-up and the tail are left out.
   ``mariadb_incl_purge``: MariaDB's CPU from the 15 % mark until InnoDB has purged the drain's
   undo (it lags behind a drain), per row published after the mark.
   ``--profile DIR`` records the relays and the gateway with py-spy meanwhile.
2. **database only**: the same rows again, claimed by ``relay.claim.OutboxLeases`` in this
   process (``--db-loops`` loops, default ``--relays × --concurrency``; full claims, no publish)
   in two passes: claims that leave the rows PROCESSING, then marks of those rows PUBLISHED in
   batches of the same size (the relays defer a batch's mark into their next claim's
   transaction; here the two are apart so that MariaDB's CPU per row splits into the claim's and
   the mark's). InnoDB purges a phase's undo after it (old row versions, delete-marked index
   entries): a phase is measured until that is done (history length under 50); the seed's undo
   is purged before either phase starts.

``--relay-tree`` / ``--gateway-tree`` run another checkout's processes (bench_relay's A/B).

    .venv/bin/python loadtest/bench_drain_split.py [--rows 60000 --relays 2 --profile /tmp/spy]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))

import bench_relay  # noqa: E402
from bench_relay import (  # noqa: E402
    API_KEY,
    GATEWAY_CONFIG,
    TREES,
    profile,
    seed,
    services_start,
    services_stop,
    spawn,
    wait_http,
)

from relay.claim import OutboxLeases  # noqa: E402
from status_api.storage.database import create_engine, init_db  # noqa: E402
from taskcast.dev.procs import free_port  # noqa: E402

HISTORY = "SELECT `count` FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"


async def settle(engine: AsyncEngine) -> None:
    """Wait (at most 120 s) until InnoDB has purged the undo of the seed (and of the rows it
    deleted), so that work is not charged to the phase that follows."""
    for _ in range(1200):
        async with engine.connect() as conn:
            if int(await conn.scalar(sa.text(HISTORY)) or 0) < 50:
                return
        await asyncio.sleep(0.1)


def cpu(procs: list[psutil.Process]) -> float:
    return sum(float(t.user + t.system) for t in (p.cpu_times() for p in procs))


def published_total(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("taskcast_relay_published_rows_total "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def drain(
    engine: AsyncEngine,
    db_url: str,
    gw_url: str,
    gw: psutil.Process,
    db: psutil.Process,
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:
    procs: list[tuple[subprocess.Popen[bytes], int]] = []
    for i in range(args.relays):
        port = free_port()
        cfg = {
            "database_url": db_url,
            "gateway_api_url": f"{gw_url}/api",
            "gateway_api_key": API_KEY,
            "relay_id": f"split-{i}",
            "batch_size": args.batch_size,
            "concurrency": args.concurrency,
            "poll_interval_seconds": 0.2,
            "metrics_port": port,
            "log_level": "warning",
        }
        path = workdir / f"relay-{i}.json"
        path.write_text(json.dumps(cfg))
        procs.append((spawn(["relay", "run", "--config", str(path)], workdir / f"relay-{i}.log"), port))
    relays = [psutil.Process(p.pid) for p, _ in procs]
    spies = []
    if args.profile:
        spies = [profile(p.pid, Path(args.profile) / f"relay-{i}.txt") for i, (p, _) in enumerate(procs)]
        spies.append(profile(gw.pid, Path(args.profile) / "gateway.txt"))
    marks: list[tuple[float, float, float, float, float, float]] = []
    try:
        for fraction in (0.15, 0.85, 1.0):
            while True:
                if any(p.poll() is not None for p, _ in procs):
                    raise RuntimeError(f"a relay exited early; see {workdir}")
                try:
                    done = sum(published_total(port) for _, port in procs)
                except OSError:
                    done = 0.0  # metrics endpoint not up yet
                if done >= fraction * args.rows:
                    break
                await asyncio.sleep(0.25)  # a scrape costs the relay ~0.5 ms: not more often
            marks.append((time.perf_counter(), done, cpu(relays), cpu([gw]), cpu([db]), os.getloadavg()[0]))
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=30)
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            p.wait(timeout=30)
    await settle(engine)  # the drain's undo purged: charged to the rows from the first mark on
    d_all = cpu([db])
    (t0, n0, r0, g0, d0, l0), (t1, n1, r1, g1, d1, l1) = marks[:2]
    rows = n1 - n0
    return {
        "case": "drain",
        "relays": args.relays,
        "concurrency": args.concurrency,
        "rows_measured": int(rows),
        "rows_per_s": round(rows / (t1 - t0)),
        "us_per_row": {
            "relays": round((r1 - r0) / rows * 1e6, 1),
            "gateway": round((g1 - g0) / rows * 1e6, 1),
            "mariadb": round((d1 - d0) / rows * 1e6, 1),
            "mariadb_incl_purge": round((d_all - d0) / (marks[2][1] - n0) * 1e6, 1),
        },
        "load": [round(l0, 2), round(l1, 2)],
    }


async def database_only(db_url: str, db: psutil.Process, args: argparse.Namespace) -> dict[str, Any]:
    loops = args.db_loops or args.relays * args.concurrency
    leases = OutboxLeases.open(
        db_url,
        f"split-db-{uuid.uuid4().hex[:6]}",
        lease_seconds=600,
        pool_size=loops,
        lock_wait_timeout_seconds=5,
    )
    me = psutil.Process()
    claimed: list[list[int]] = []

    async def claim_loop() -> None:
        while rows := await leases.claim(args.batch_size, takeover=False, backlog=True):
            claimed.append([r.id for r in rows])

    load0 = os.getloadavg()[0]
    d0, m0 = cpu([db]), cpu([me])
    await asyncio.gather(*(claim_loop() for _ in range(loops)))
    n = sum(len(ids) for ids in claimed)
    queue = list(claimed)

    async def mark_loop() -> None:
        while queue:
            await leases.settle(queue.pop(), [], [])

    # InnoDB purges each phase's undo (old row versions, delete-marked index entries) after it:
    # that work is charged to the phase that caused it
    await settle(leases.engine)
    d1, m1 = cpu([db]), cpu([me])
    await asyncio.gather(*(mark_loop() for _ in range(loops)))
    await settle(leases.engine)
    d2, m2 = cpu([db]), cpu([me])
    await leases.dispose()
    return {
        "case": "database only",
        "loops": loops,
        "rows": n,
        "mariadb_us_per_row": {
            "claim": round((d1 - d0) / n * 1e6, 1),
            "mark": round((d2 - d1) / n * 1e6, 1),
        },
        "bench_process_us_per_row": {
            "claim": round((m1 - m0) / n * 1e6, 1),
            "mark": round((m2 - m1) / n * 1e6, 1),
        },
        "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


async def amain(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-drain-split."))
    state = workdir / "services"
    gw: subprocess.Popen[bytes] | None = None
    try:
        server_url = services_start(state)
        name = f"drain_split_{uuid.uuid4().hex[:8]}"
        admin = create_engine(server_url)
        async with admin.begin() as conn:
            await conn.exec_driver_sql(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
        await admin.dispose()
        db_url = sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)
        engine = create_engine(db_url, pool_size=2)
        await init_db(engine)
        port = free_port()
        gw_cfg = json.loads(json.dumps(GATEWAY_CONFIG))
        gw_cfg["http_server"]["port"] = port
        (workdir / "gateway.json").write_text(json.dumps(gw_cfg))
        gw = spawn(["gateway", "--config", str(workdir / "gateway.json")], workdir / "gateway.log")
        gw_url = f"http://127.0.0.1:{port}"
        wait_http(f"{gw_url}/health", gw)
        db = psutil.Process(int((state / "mysql.pid").read_text().strip()))
        for _ in range(args.rounds):
            await seed(engine, args.rows)
            await settle(engine)
            result = await drain(engine, db_url, gw_url, psutil.Process(gw.pid), db, args, workdir)
            print(json.dumps(result), flush=True)
            if args.no_db:
                continue
            await seed(engine, args.rows)
            await settle(engine)
            print(json.dumps(await database_only(db_url, db, args)), flush=True)
        await engine.dispose()
    finally:
        if gw is not None and gw.poll() is None:
            gw.terminate()
            gw.wait(timeout=10)
        services_stop(state)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--relays", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--db-loops", type=int, default=0, help="0: relays × concurrency")
    p.add_argument("--no-db", action="store_true", help="drains only (no database-only pass)")
    p.add_argument("--rounds", type=int, default=1, help="drain + database-only pairs")
    p.add_argument("--profile", help="directory for py-spy raw profiles of the relays and the gateway")
    p.add_argument("--relay-tree", type=Path, default=ROOT, help="source tree the relays run from")
    p.add_argument("--gateway-tree", type=Path, default=ROOT, help="source tree the gateway runs from")
    args = p.parse_args()
    TREES.update(relay=args.relay_tree.resolve(), gateway=args.gateway_tree.resolve())
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    assert bench_relay.TREES is TREES
    asyncio.run(amain(args))


if __name__ == "__main__":
    main()
