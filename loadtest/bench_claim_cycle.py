"""The relay's CPU per claim → mark cycle, in-process, on MariaDB (no HTTP, no other process).

Each cycle commits one event's 2 outbox rows (~500-byte payloads), then times (``time.process_time``)
one ``OutboxLeases.claim`` (a poll: expired-lease scan, probe, lease UPDATE, next-due read, COMMIT)
and the ``settle`` of both rows as published, on leases opened as the relay opens them
(``OutboxLeases.open``). ``--defer``: the mark is deferred (``OutboxLeases.defer_published``) and
carried by the next cycle's claim, as the relay's loops do with ``mark_defer_ms`` (a tree without
it settles at once). ``--hint``: the claims skip the expired-lease scan, as a hint's claim does.
``--loop uvloop``: on uvloop (what ``taskcast relay run`` runs on by default).
For an A/B run it once per tree with that tree first on the path::

    PYTHONPATH=/other/tree python loadtest/bench_claim_cycle.py --cycles 400

MariaDB is ``TASKCAST_TEST_MYSQL_URL`` (a throwaway database of its own is created and dropped);
``--server-pid`` = its server process, whose CPU (user + sys) in the timed parts is reported per
cycle too (meaningful only on a MariaDB nothing else uses: ``scripts/services.sh start DIR``).
Prints one JSON line: CPU µs per cycle (mean over the cycles).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from typing import Any

import psutil
import sqlalchemy as sa

from relay.claim import OutboxLeases, create_engine, utc_now
from status_api.storage import write
from status_api.storage.database import init_db
from status_api.storage.outbox import OutboxMessage


def _server_cpu(proc: Any) -> float:
    if proc is None:
        return 0.0
    t = proc.cpu_times()
    return float(t.user + t.system)


async def run(
    url: str, cycles: int, *, defer: bool = False, hint: bool = False, server_pid: int | None = None
) -> dict[str, float]:
    server = psutil.Process(server_pid) if server_pid else None
    name = f"bench_cycle_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url)
    async with admin.begin() as conn:
        await conn.exec_driver_sql(f"CREATE DATABASE `{name}`")
    await admin.dispose()
    db_url = sa.make_url(url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(db_url, pool_size=2)
    await init_db(engine)
    leases = OutboxLeases.open(db_url, "bench", lease_seconds=30, pool_size=5, lock_wait_timeout_seconds=5)
    spent = user = system = server_cpu = 0.0
    deferring = defer and hasattr(leases, "defer_published")
    try:
        for i in range(cycles):
            body = {"x": "y" * 500}
            async with engine.begin() as conn:
                msgs = [
                    OutboxMessage(f"a:{i}", "TASK_DETAIL", body, 0),
                    OutboxMessage(f"b:{i}", "TASK_SUMMARY", body, 0),
                ]
                await write.append_outbox_version(conn, f"t{i}", 2, msgs, utc_now())
            started, t0, s0 = time.process_time(), os.times(), _server_cpu(server)
            rows = await leases.claim(200, takeover=not hint)
            if deferring:
                leases.defer_published([r.id for r in rows], utc_now())
            else:
                await leases.settle([r.id for r in rows], [], [])
            spent += time.process_time() - started
            server_cpu += _server_cpu(server) - s0
            t1 = os.times()
            user += t1.user - t0.user
            system += t1.system - t0.system
            if len(rows) != 2:
                raise RuntimeError(f"claimed {len(rows)} rows, expected 2")
        if deferring:
            await leases.flush_marks()
    finally:
        await leases.dispose()
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE `{name}`")
        await engine.dispose()
    return {
        "cycles": cycles,
        "cpu_us_per_cycle": round(spent / cycles * 1e6, 1),
        # os.times() ticks are 10 ms: the split is only meaningful over many cycles
        "user_us_per_cycle": round(user / cycles * 1e6, 1),
        "sys_us_per_cycle": round(system / cycles * 1e6, 1),
        "server_us_per_cycle": round(server_cpu / cycles * 1e6, 1) if server else None,
        "deferred_mark": deferring,
        "load": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=400)
    p.add_argument("--mysql-url", default=os.environ.get("TASKCAST_TEST_MYSQL_URL"))
    p.add_argument("--defer", action="store_true", help="defer each mark to the next claim (if the tree can)")
    p.add_argument("--hint", action="store_true", help="claims without the expired-lease scan")
    p.add_argument("--server-pid", type=int, help="the MariaDB server's pid (its CPU per cycle)")
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the event loop")
    args = p.parse_args()
    if not args.mysql_url:
        raise SystemExit("set TASKCAST_TEST_MYSQL_URL or pass --mysql-url")
    factory = None
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(
            run(args.mysql_url, args.cycles, defer=args.defer, hint=args.hint, server_pid=args.server_pid)
        )
    result["loop"] = args.loop
    print(json.dumps(result))


if __name__ == "__main__":
    main()
