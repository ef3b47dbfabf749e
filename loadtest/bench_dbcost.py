"""Where MariaDB's own CPU goes per ingested event, and what a schema or server setting changes
(seed §15's ~667 state writes/s; the capacity model's database share).

One MariaDB of the benchmark's own (``mariadbd`` started here, binary log on in ROW format as in
``deploy/mariadb/primary.cnf``, ``innodb_flush_log_at_trx_commit=2`` as in the test services; or
``--url`` with ``--db-pid``) so its CPU is this benchmark's alone. Steps:

1. **capture** — ``--tasks`` tasks with one step each, ``--events`` progress events per task
   ingested in-process while every SQL statement and transaction boundary is recorded (the
   capacity benchmark's floor step: ``bench_capacity._capture``), on a database copied before the
   events (``dbcost_pre``).
2. **variants** — each run copies ``dbcost_pre`` into ``dbcost_run``, applies the variant's DDL,
   then replays the statement log through the driver (asyncmy, as many connections as the group
   commit had transactions in flight) while two relay loops claim and mark the outbox rows as the
   relay does (``claim_driver`` with ``--claim-limit``, ``mark_published_driver``), and finally
   purges the published rows (``purge_published``). Reported per variant: MariaDB CPU (psutil
   user+sys of ``mariadbd``) per event for write+claim+mark, and per purged row. A variant either
   drops a statement class from every transaction (leave-one-out: what that class costs), drops
   an index, skips the relays (the write alone), or changes a server setting for the run.

Variants run in alternating order round after round (ABBA: round 2 runs them in reverse), and the
report gives medians over rounds, with the 1-minute load average at start and end.

    .venv/bin/python loadtest/bench_dbcost.py [--tasks 2000 --events 3 --rounds 4]
        [--variants base,-dedup,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import abba
import bench_capacity
from bench_capacity import Transaction, _copy_database

from status_api.storage.outbox_admin import purge_published
from status_api.storage.outbox_claims import claim_driver, mark_published_driver

PRE, RUN = "dbcost_pre", "dbcost_run"

#: Statement classes of the ingest transaction: (name, pattern on the statement's start).
CLASSES = (
    ("lock task", re.compile(r"SELECT .* FROM `task` WHERE .*FOR UPDATE", re.S)),
    ("read steps", re.compile(r"SELECT .* FROM `task_step`", re.S)),
    ("read dedup", re.compile(r"SELECT .* FROM `task_event_dedup`", re.S)),
    ("upsert task", re.compile(r"INSERT INTO `task` ")),
    ("upsert step", re.compile(r"INSERT INTO `task_step` ")),
    ("insert log", re.compile(r"INSERT INTO `task_event_log` ")),
    ("insert dedup", re.compile(r"INSERT INTO `task_event_dedup` ")),
    ("insert outbox", re.compile(r"INSERT INTO `task_outbox` ")),
    ("supersede", re.compile(r"DELETE FROM task_outbox ")),
)


def classify(statement: str) -> str:
    for name, pattern in CLASSES:
        if pattern.match(statement):
            return name
    return "other: " + statement[:60]


@dataclass
class Variant:
    """One way to run the replay: DDL on the copy, statement classes left out, relays on/off,
    session/global settings for the run."""

    name: str
    ddl: list[str] = field(default_factory=list)
    drop_classes: frozenset[str] = frozenset()
    relays: bool = True
    session: list[str] = field(default_factory=list)
    global_set: list[str] = field(default_factory=list)
    global_reset: list[str] = field(default_factory=list)


def _drop_index(table: str, index: str) -> str:
    return f"ALTER TABLE `{table}` DROP INDEX IF EXISTS `{index}`"


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("base"),
        Variant("write-only", relays=False),
        *(
            Variant(f"-{name.replace(' ', '-')}", drop_classes=frozenset({name}))
            for name, _ in CLASSES
            if name != "insert outbox"
        ),
        Variant("-insert-outbox", drop_classes=frozenset({"insert outbox", "supersede"}), relays=False),
        Variant("-priority-idx", ddl=[_drop_index("task_outbox", "outbox_priority_claim_idx")]),
        Variant("-lock-timeout-idx", ddl=[_drop_index("task_outbox", "outbox_lock_timeout_idx")]),
        Variant("-producer-idx", ddl=[_drop_index("task_event_log", "task_event_producer_idx")]),
        Variant(
            "write-only -producer-idx",
            ddl=[_drop_index("task_event_log", "task_event_producer_idx")],
            relays=False,
        ),
        Variant(
            "write-only +producer-idx",
            ddl=[
                "CREATE INDEX IF NOT EXISTS task_event_producer_idx"
                " ON task_event_log (task_id, producer_id, task_attempt, source_seq)"
            ],
            relays=False,
        ),
        Variant(
            "write-only -priority-idx",
            ddl=[_drop_index("task_outbox", "outbox_priority_claim_idx")],
            relays=False,
        ),
        Variant("-committed-idx", ddl=[_drop_index("task_event_log", "task_event_committed_idx")]),
        Variant("-timeline-idx", ddl=[_drop_index("task_event_log", "task_event_timeline_idx")]),
        Variant("-dedup-task-idx", ddl=[_drop_index("task_event_dedup", "task_event_task_idx")]),
        Variant("-owner-idx", ddl=[_drop_index("task", "task_owner_updated_idx")]),
        Variant("-step-health-idx", ddl=[_drop_index("task_step", "task_step_health_idx")]),
        Variant("binlog-off", session=["SET SESSION sql_log_bin = 0"]),
        Variant(
            "flush-1",
            global_set=["SET GLOBAL innodb_flush_log_at_trx_commit = 1"],
            global_reset=["SET GLOBAL innodb_flush_log_at_trx_commit = 2"],
        ),
        Variant(
            "flush-1+sync-binlog-1",
            global_set=["SET GLOBAL innodb_flush_log_at_trx_commit = 1", "SET GLOBAL sync_binlog = 1"],
            global_reset=["SET GLOBAL innodb_flush_log_at_trx_commit = 2", "SET GLOBAL sync_binlog = 0"],
        ),
        Variant("binlog-mixed", session=["SET SESSION binlog_format = 'MIXED'"]),
        Variant("row-image-noblob", session=["SET SESSION binlog_row_image = 'NOBLOB'"]),
        Variant("row-image-minimal", session=["SET SESSION binlog_row_image = 'MINIMAL'"]),
    )
}


def _variant(name: str) -> Variant:
    """A variant by name; ``write-only X`` is variant ``X`` with the relays off (the write side
    alone: no claim dynamics in the figure)."""
    if name in VARIANTS:
        return VARIANTS[name]
    inner = VARIANTS[name.removeprefix("write-only ")]
    return Variant(
        name,
        ddl=inner.ddl,
        drop_classes=inner.drop_classes,
        relays=False,
        session=inner.session,
        global_set=inner.global_set,
        global_reset=inner.global_reset,
    )


def start_mariadb(state: Path, port: int, extra: Sequence[str]) -> int:
    """A throwaway mariadbd with its binary log on; returns its pid."""
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    data, sock = state / "data", state / "sock"
    subprocess.run(
        ["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.Popen(
        ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
         "--bind-address=127.0.0.1", "--user=root", f"--pid-file={state / 'pid'}",
         f"--log-error={state / 'err'}", "--skip-name-resolve", "--character-set-server=utf8mb4",
         "--collation-server=utf8mb4_unicode_ci", "--innodb-buffer-pool-size=256M",
         "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--max-connections=500",
         "--server-id=1", f"--log-bin={data / 'binlog'}", "--binlog-format=ROW", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    admin = ["mariadb-admin", "--no-defaults", f"--socket={sock}", "-uroot"]
    for _ in range(600):
        if subprocess.run([*admin, "ping"], capture_output=True).returncode == 0:
            break
        time.sleep(0.1)  # a bounded wait for the server to listen
    sql = (
        "CREATE DATABASE taskcast CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
        "CREATE USER 'taskcast'@'127.0.0.1' IDENTIFIED BY 'taskcast';"
        "GRANT ALL PRIVILEGES ON *.* TO 'taskcast'@'127.0.0.1';"
    )
    subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", sql], check=True)
    return int((state / "pid").read_text().strip())


def stop_mariadb(state: Path) -> None:
    subprocess.run(
        ["mariadb-admin", "--no-defaults", f"--socket={state / 'sock'}", "-uroot", "shutdown"],
        capture_output=True,
    )


async def _connect(url: str, database: str) -> Any:
    import asyncmy

    u = sa.make_url(url)
    return await asyncmy.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "",
        password=u.password or "",
        db=database,
        charset="utf8mb4",
        autocommit=False,
    )


async def _admin(url: str, statements: Sequence[str]) -> None:
    conn = await _connect(url, "taskcast")
    try:
        async with conn.cursor() as cur:
            for s in statements:
                await cur.execute(s)
        await conn.commit()
    finally:
        conn.close()


class _Replay:
    """The statement log through ``connections`` driver connections, transactions started at
    ``args.rate`` events/s (0: as fast as they go), with two relay loops (unless the variant skips
    them) claiming and marking as the relay does: each commit sends one wake-up hint to one relay
    (round robin), a woken relay claims until a claim finds room, and every ``args.poll_s`` a relay
    polls with the expired-lease scan. Ends when the writers are done and the outbox is drained."""

    def __init__(self, url: str, transactions: list[Transaction], variant: Variant, args: argparse.Namespace):
        self.url, self.variant, self.args = url, variant, args
        self.queue = list(reversed(transactions))
        self.done = asyncio.Event()
        self.counts = {"claimed": 0, "claims": 0, "deadlocks": 0, "commits": 0}
        self.hints: list[asyncio.Queue[None]] = [asyncio.Queue() for _ in range(2)]
        events_per_tx = max(1.0, args.events_total / max(1, len(transactions)))
        self.interval = events_per_tx / args.rate if args.rate else 0.0
        self.loop = asyncio.get_running_loop()
        self.t_start = self.loop.time()
        self.started = 0

    async def run(self, connections: int) -> dict[str, int]:
        relays = [asyncio.create_task(self.relay(i)) for i in range(2)] if self.variant.relays else []
        await asyncio.gather(*(self.writer() for _ in range(connections)))
        self.done.set()
        for h in self.hints:
            h.put_nowait(None)
        await asyncio.gather(*relays)
        return self.counts

    async def _session(self) -> Any:
        conn = await _connect(self.url, RUN)
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            for s in self.variant.session:
                await cur.execute(s)
        return conn

    async def _pace(self) -> None:
        if not self.interval:
            return
        due = self.t_start + self.started * self.interval
        self.started += 1
        delay = due - self.loop.time()
        if delay > 0:
            await asyncio.sleep(delay)  # the open-loop schedule of the offered rate

    async def writer(self) -> None:
        conn = await self._session()
        try:
            while self.queue:
                tx = self.queue.pop()
                await self._pace()
                async with conn.cursor() as cur:
                    for statement, params, many in tx:
                        if classify(statement) in self.variant.drop_classes:
                            continue
                        if many:
                            await cur.executemany(statement, params)
                        else:
                            await cur.execute(statement, params)
                        if cur.description is not None:
                            await cur.fetchall()
                await conn.commit()
                self.counts["commits"] += 1
                self.hints[self.counts["commits"] % 2].put_nowait(None)
        finally:
            conn.close()

    async def relay(self, index: int) -> None:
        conn = await self._session()
        next_poll = self.loop.time() + self.args.poll_s
        try:
            async with conn.cursor() as cur:
                while True:
                    lease = None
                    try:
                        timeout = max(0.0, next_poll - self.loop.time())
                        await asyncio.wait_for(self.hints[index].get(), timeout=timeout)
                    except TimeoutError:
                        lease, next_poll = 30.0, self.loop.time() + self.args.poll_s
                    while not self.hints[index].empty():
                        self.hints[index].get_nowait()
                    last = await self._claim_until_room(conn, cur, f"relay-{index}", lease)
                    if self.done.is_set() and not last:
                        return
        finally:
            conn.close()

    async def _claim_until_room(self, conn: Any, cur: Any, relay_id: str, lease: float | None) -> int:
        """Claim and mark until a claim finds room; returns the last claim's row count."""
        import asyncmy.errors

        while True:
            now = datetime.now(UTC).replace(tzinfo=None)
            try:
                rows = (
                    await claim_driver(cur, relay_id, self.args.claim_limit, now, lease_seconds=lease)
                ).rows
                if rows:
                    await mark_published_driver(cur, [r.id for r in rows], relay_id, now)
                    await conn.commit()
            except asyncmy.errors.OperationalError as exc:
                if exc.args[0] not in (1213, 1205):  # deadlock, lock wait: the relay retries
                    raise
                await conn.rollback()
                self.counts["deadlocks"] += 1
                continue
            lease = None
            if rows:
                self.counts["claims"] += 1
                self.counts["claimed"] += len(rows)
            if len(rows) < self.args.claim_limit:
                return len(rows)


async def _replay(
    url: str, transactions: list[Transaction], connections: int, variant: Variant, args: argparse.Namespace
) -> dict[str, int]:
    return await _Replay(url, transactions, variant, args).run(connections)


async def _settle(url: str, bound_s: float = 10.0) -> None:
    """Wait (bounded) until InnoDB's purge caught up with the run (history length near zero), so
    the deferred removal of delete-marked index entries is counted in the run's CPU."""
    conn = await _connect(url, "taskcast")
    deadline = time.monotonic() + bound_s
    try:
        async with conn.cursor() as cur:
            while time.monotonic() < deadline:
                await cur.execute(
                    "SELECT `count` FROM information_schema.INNODB_METRICS"
                    " WHERE name = 'trx_rseg_history_len'"
                )
                (row,) = await cur.fetchall()
                await conn.commit()
                if int(row[0]) < 50:
                    return
                await asyncio.sleep(0.1)  # polling interval of a bounded wait
    finally:
        conn.close()


async def _purge(url: str) -> int:
    from sqlalchemy.ext.asyncio import create_async_engine

    u = sa.make_url(url).set(database=RUN)
    engine = create_async_engine(u)
    purged = 0
    try:
        while True:
            async with engine.begin() as conn:
                n = await purge_published(conn, datetime(2999, 1, 1), limit=1000)
            purged += n
            if n == 0:
                return purged
    finally:
        await engine.dispose()


def run_variant(
    url: str, db_pid: int, log: tuple[list[Transaction], int, int], variant: Variant, args: argparse.Namespace
) -> dict[str, Any]:
    import uvloop
    from sqlalchemy.ext.asyncio import create_async_engine

    transactions, events, connections = log

    async def prepare() -> None:
        engine = create_async_engine(url)
        try:
            await _copy_database(engine, PRE, RUN)
        finally:
            await engine.dispose()
        await _admin(url, [f"USE `{RUN}`", *variant.ddl, *variant.global_set])

    uvloop.run(prepare())
    load = abba.load1()
    cpu0 = abba.cpu_seconds([db_pid])
    t0 = time.perf_counter()
    counts = uvloop.run(_replay(url, transactions, connections, variant, args))
    wall = time.perf_counter() - t0
    uvloop.run(_settle(url))
    cpu1 = abba.cpu_seconds([db_pid])
    purged = uvloop.run(_purge(url))
    cpu2 = abba.cpu_seconds([db_pid])
    if variant.global_reset:
        uvloop.run(_admin(url, variant.global_reset))
    return {
        "variant": variant.name,
        "events": events,
        "rows_claimed": counts["claimed"],
        "rows_per_claim": round(counts["claimed"] / max(1, counts["claims"]), 1),
        "deadlocks": counts["deadlocks"],
        "events_per_s": round(events / wall, 1),
        "wall_s": round(wall, 2),
        "mariadb_ms_per_event": round((cpu1 - cpu0) / events * 1000, 4),
        "purged": purged,
        "purge_us_per_row": round((cpu2 - cpu1) / purged * 1e6, 1) if purged else None,
        "load": load,
    }


def classes_of(transactions: list[Transaction], events: int) -> dict[str, float]:
    per: Counter[str] = Counter()
    for tx in transactions:
        for statement, _params, _many in tx:
            per[classify(statement)] += 1
    return {k: round(v / max(1, len(transactions)), 2) for k, v in per.most_common()}


def markdown(result: dict[str, Any]) -> str:
    rows = result["summary"]
    base = next((r for r in rows if r["variant"] == "base"), None)
    lines = [
        f"{result['date']}, {result['tasks']} tasks × {result['events_per_task']} events "
        f"({result['events']} events in {result['transactions']} transactions, "
        f"{result['connections']} connections) replayed at {result['rate']} events/s, "
        f"claim limit {result['claim_limit']}, "
        f"{result['rounds']} rounds ABBA, load {result['load_start']} → {result['load_end']}.",
        "",
        "| variant | MariaDB ms per event (median) | Δ vs base | runs | purge µs per row | rows per claim |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        delta = "" if base is None or r is base else f"{r['median_ms'] - base['median_ms']:+.3f}"
        lines.append(
            f"| {r['variant']} | {r['median_ms']:.3f} | {delta} | "
            f"{' / '.join(f'{x:.3f}' for x in r['runs'])} | {_f(r['purge_us'])} | {r['rows_per_claim']} |"
        )
    return "\n".join(lines)


def _f(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="an existing MariaDB (with --db-pid); default: one of its own")
    p.add_argument("--db-pid", type=int)
    p.add_argument("--port", type=int, default=0, help="port of the benchmark's own mariadbd (0: free)")
    p.add_argument("--mariadbd-arg", action="append", default=[], help="extra mariadbd option (repeat)")
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--events", type=int, default=3, help="events per task")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight (the batch size)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--claim-limit", type=int, default=100)
    p.add_argument("--rate", type=float, default=667.0, help="offered events/s of the replay (0: unpaced)")
    p.add_argument("--poll-s", type=float, default=1.0, help="a relay's poll interval (with the lease scan)")
    p.add_argument("--variants", default="base,write-only", help="comma list; 'all' for every variant")
    p.add_argument("--schema-tree", help="init-db from this checkout's tables (PYTHONPATH decides)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
    variants = [_variant(n) for n in names]
    state = None
    url, db_pid = args.url, args.db_pid
    if url is None:
        state = Path(tempfile.mkdtemp(prefix="taskcast-dbcost."))
        port = args.port or _free_port()
        db_pid = start_mariadb(state, port, args.mariadbd_arg)
        url = f"mysql+asyncmy://taskcast:taskcast@127.0.0.1:{port}/taskcast?charset=utf8mb4"
    assert db_pid is not None, "--db-pid is required with --url"
    try:
        import uvloop

        load_start = abba.load1()
        cap = argparse.Namespace(
            pool=args.pool,
            tasks=args.tasks,
            concurrency=args.concurrency,
            workers=args.workers,
            events=args.events,
        )
        log = uvloop.run(bench_capacity._capture(url, cap, PRE))
        args.events_total = log[1]
        runs: list[dict[str, Any]] = []
        for rnd, v in abba.order(variants, args.rounds):
            r = run_variant(url, db_pid, log, v, args)
            r["round"] = rnd
            print(json.dumps(r), flush=True)
            runs.append(r)
        medians = abba.medians(
            runs, "variant", ["mariadb_ms_per_event", "purge_us_per_row", "rows_per_claim"]
        )
        summary = [
            {
                "variant": v.name,
                "median_ms": medians[v.name]["mariadb_ms_per_event"],
                "runs": [r["mariadb_ms_per_event"] for r in runs if r["variant"] == v.name],
                "purge_us": medians[v.name].get("purge_us_per_row"),
                "rows_per_claim": medians[v.name]["rows_per_claim"],
            }
            for v in variants
        ]
        result = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "tasks": args.tasks,
            "events_per_task": args.events,
            "events": log[1],
            "transactions": len(log[0]),
            "connections": log[2],
            "statements_per_transaction": classes_of(log[0], log[1]),
            "claim_limit": args.claim_limit,
            "rate": args.rate,
            "rounds": args.rounds,
            "load_start": load_start,
            "load_end": abba.load1(),
            "summary": summary,
            "runs": runs,
        }
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
        print(markdown(result))
    finally:
        if state is not None:
            stop_mariadb(state)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    main()
