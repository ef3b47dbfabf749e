"""``make bench-relay-rate``: the relays' CPU per row at a steady rate (not a backlog drain).

Two ``taskcast relay run`` processes (deploy/relay.yaml's settings: batch 200, 4 loops, poll 0.2 s,
woken through Redis) publish into one real gateway process while this process commits outbox rows
open-loop at each ``--rates`` events/s: every ``--tick`` seconds one transaction inserts the events
due by then (2 rows each: a user channel and a detail channel, ~600-byte task.summary payloads, as
the Status API wrote them before VERSION rows; ``--one-row``: ONE row per event carrying both
publications, ``outbox.VERSION_PROJECTION``, as it writes them now), then the Status API's own
wake-up hook (``status_api.wake``'s ``RedisWakePublisher``, ``--wake redis``, or
``UdpWakeSender``, ``--wake udp``) is told, exactly as the Status API's commit does. After
``--warmup`` seconds, a ``--window`` of seconds is measured (``relay_us_per_event``: the same CPU
per event, whatever the rows per event):

* relays' CPU (user + sys from /proc, psutil) divided by the rows they published in the window
  (their own ``taskcast_relay_published_rows_total``);
* claims and hints per relay, rows per claim, and the relays' CPU per claim that leased rows (a
  cycle, with its share of the empty claims and hints): on a loaded machine the relays fall behind
  and batch more, which lowers the CPU per row but not per cycle;
* commit → publish p50 / p99 from the relays' histogram (bucket bounds, so coarse).

MariaDB and Redis are ``TASKCAST_TEST_MYSQL_URL`` / ``TASKCAST_TEST_REDIS_URL`` when set (a database
and a wake channel of this run's own), else throwaway ones (``scripts/services.sh``). Their CPU is
not attributed (shared servers). The load average is printed with each step: on a shared 2-CPU
machine rates and latencies follow it, CPU per row much less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))

from bench_relay import (  # noqa: E402
    API_KEY,
    GATEWAY_CONFIG,
    TREES,
    cpu_seconds,
    profile,
    spawn,
    summary_payload,
    wait_http,
)
from procs import Services  # noqa: E402

from relay.metrics import LATENCY_BUCKETS  # noqa: E402
from status_api.storage.database import create_engine, init_db  # noqa: E402
from status_api.storage.outbox import VERSION_PROJECTION  # noqa: E402
from status_api.storage.tables import task_outbox  # noqa: E402
from status_api.wake import RedisWakePublisher, UdpWakeSender  # noqa: E402
from taskcast.dev.procs import free_port  # noqa: E402

USERS = 200


def scrape_all(port: int) -> dict[str, float]:
    """Every ``taskcast_relay_*`` sample of a relay's ``/metrics`` (labels kept in the name)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("taskcast_relay_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Upper bound of the bucket holding quantile ``q`` of cumulative ``(le, count)`` pairs."""
    total = buckets[-1][1] if buckets else 0.0
    for le, count in buckets:
        if total and count >= q * total:
            return le
    return float("nan")


def latency_buckets(
    after: list[dict[str, float]], before: list[dict[str, float]]
) -> list[tuple[float, float]]:
    name = "taskcast_relay_state_commit_to_publish_seconds_bucket"
    out = []
    for le in (*LATENCY_BUCKETS, float("inf")):
        key = f'{name}{{le="{"+Inf" if le == float("inf") else float(le)}"}}'
        out.append((le, sum(delta(a, b, key) for a, b in zip(after, before, strict=True))))
    return out


def event_rows(
    now: datetime, task: str, version: int, user: int, one_row: bool = False
) -> list[dict[str, Any]]:
    payload = summary_payload(task, version)
    if one_row:
        pubs = [
            {"channel": f"task_user:t1/u{user}", "projection": "USER_SUMMARY", "data": payload},
            {"channel": f"task_detail:t1/{task}", "projection": "TASK_DETAIL", "data": payload},
        ]
        return [
            {
                "aggregate_type": "task", "aggregate_id": task, "aggregate_version": version,
                "channel": pubs[0]["channel"], "projection": VERSION_PROJECTION, "payload": pubs,
                "status": "PENDING", "priority": 0, "available_at": now, "attempts": 0, "created_at": now,
            }
        ]  # fmt: skip
    return [
        {
            "aggregate_type": "task",
            "aggregate_id": task,
            "aggregate_version": version,
            "channel": channel,
            "projection": projection,
            "payload": payload,
            "status": "PENDING",
            "priority": 0,
            "available_at": now,
            "attempts": 0,
            "created_at": now,
        }
        for channel, projection in (
            (f"task_user:t1/u{user}", "USER_SUMMARY"),
            (f"task_detail:t1/{task}", "TASK_DETAIL"),
        )
    ]


class Producer:
    """Open-loop commits of outbox rows at ``rate`` events/s, one transaction per tick."""

    def __init__(self, engine: Any, wake: Any, tasks: int, one_row: bool = False) -> None:
        self.one_row = one_row
        self.engine = engine
        self.wake = wake
        self.tasks = [uuid.uuid4().hex for _ in range(tasks)]
        self.versions = [0] * tasks
        self.next = 0
        self.events = 0
        self.late_ticks = 0

    async def run(self, rate: float, seconds: float, tick: float) -> None:
        start = time.monotonic()
        done = 0
        k = 0
        while (elapsed := time.monotonic() - start) < seconds:
            n = int(rate * elapsed) - done
            if n > 0:
                now = datetime.now(UTC).replace(tzinfo=None)
                rows: list[dict[str, Any]] = []
                for _ in range(n):
                    i = self.next
                    self.next = (self.next + 1) % len(self.tasks)
                    self.versions[i] += 1
                    rows += event_rows(now, self.tasks[i], self.versions[i], i % USERS, self.one_row)
                async with self.engine.begin() as conn:
                    await conn.execute(sa.insert(task_outbox), rows)
                self.events += n
                done += n
                self.wake.notify(len(rows))
            k += 1
            pause = start + k * tick - time.monotonic()
            if pause < 0:
                self.late_ticks += 1
            await asyncio.sleep(max(0.0, pause))


async def pending(engine: Any) -> int:
    async with engine.connect() as conn:
        q = sa.select(sa.func.count()).where(task_outbox.c.status.in_(("PENDING", "PROCESSING")))
        return int(await conn.scalar(q) or 0)


async def step(
    rate: float, args: argparse.Namespace, producer: Producer, relays: list[tuple[psutil.Process, int]],
    gateway: psutil.Process, engine: Any,
) -> dict[str, Any]:  # fmt: skip
    await producer.run(rate, args.warmup, args.tick)
    load0 = os.getloadavg()[0]
    before = [scrape_all(port) for _, port in relays]
    cpu0 = [cpu_seconds(p) for p, _ in relays]
    sys0 = sum(p.cpu_times().system for p, _ in relays)
    gw0 = cpu_seconds(gateway)
    db = psutil.Process(args.db_pid) if args.db_pid else None
    db0 = cpu_seconds(db) if db else 0.0
    events0 = producer.events
    started = time.monotonic()
    await producer.run(rate, args.window, args.tick)
    elapsed = time.monotonic() - started
    after = [scrape_all(port) for _, port in relays]
    cpu = sum(cpu_seconds(p) - c for (p, _), c in zip(relays, cpu0, strict=True))
    sys_cpu = sum(p.cpu_times().system for p, _ in relays) - sys0
    gw_cpu = cpu_seconds(gateway) - gw0
    db_cpu = cpu_seconds(db) - db0 if db else None
    total = lambda name: sum(delta(a, b, name) for a, b in zip(after, before, strict=True))  # noqa: E731
    published = total("taskcast_relay_published_rows_total")
    claims = total("taskcast_relay_claims_total")
    wakeups = [sum(v for k, v in a.items() if k.startswith("taskcast_relay_wakeups_total{")) for a in after]
    wakeups0 = [sum(v for k, v in b.items() if k.startswith("taskcast_relay_wakeups_total{")) for b in before]
    empty = total("taskcast_relay_empty_claims_total")
    sources = sorted({k for a in after for k in a if k.startswith("taskcast_relay_wakeups_total{")})
    by_source = {k.partition('source="')[2].rstrip('"}'): round(total(k)) for k in sources}
    buckets = latency_buckets(after, before)
    # Drain what is left before the next rate (not measured).
    for _ in range(200):
        if not await pending(engine):
            break
        await asyncio.sleep(0.05)  # bounded wait between rates, outside the window
    return {
        "rate": rate,
        "window_s": elapsed,
        "events": producer.events - events0,
        "events_per_s": (producer.events - events0) / elapsed,
        "published": published,
        "claims": claims,
        "rows_per_claim": published / max(claims, 1),
        # claim transactions that found nothing, and wake-ups that rode on another claim (relays
        # that export these counters)
        "empty_claims": total("taskcast_relay_empty_claims_total"),
        "absorbed": total("taskcast_relay_wakeups_absorbed_total"),
        "hints": [round(a - b) for a, b in zip(wakeups, wakeups0, strict=True)],
        "wakeups_by_source": by_source,
        "claims_per_s": claims / elapsed,
        "empty_share": empty / max(claims + empty, 1),
        "relay_cpu_s": cpu,
        "relay_cpu_share": cpu / elapsed,
        "relay_us_per_row": 1e6 * cpu / max(published, 1),
        "relay_us_per_event": 1e6 * cpu / max(published / (1 if args.one_row else 2), 1),
        # every claim that leased rows, with its share of the empty claims, hints and polls
        "relay_us_per_claim": 1e6 * cpu / max(claims, 1),
        "relay_sys_share": sys_cpu / cpu if cpu else 0.0,
        "gateway_us_per_row": 1e6 * gw_cpu / max(published, 1),
        # ``--db-pid``: the MariaDB server's CPU (the producer's commits included) per claim
        # transaction and per event; meaningful only on a server nothing else uses
        "db_us_per_claim": None if db_cpu is None else 1e6 * db_cpu / max(claims + empty, 1),
        "db_us_per_event": None if db_cpu is None else 1e6 * db_cpu / max(producer.events - events0, 1),
        "lag_p50_ms": 1000 * quantile(buckets, 0.5),
        "lag_p99_ms": 1000 * quantile(buckets, 0.99),
        "late_ticks": producer.late_ticks,
        "load": (load0, os.getloadavg()[0]),
    }


async def amain(args: argparse.Namespace) -> list[dict[str, Any]]:
    svc = Services().start()
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-relay-rate."))
    name = f"bench_rrate_{uuid.uuid4().hex[:8]}"
    channel = f"taskcast:outbox:wake:{name}"
    admin = create_engine(svc.mysql_url)
    async with admin.begin() as conn:
        await conn.exec_driver_sql(
            f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        )
    await admin.dispose()
    db_url = sa.make_url(svc.mysql_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(db_url, pool_size=2)
    await init_db(engine)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        gw_cfg = json.loads(json.dumps(GATEWAY_CONFIG))
        gw_cfg["http_server"]["port"] = port
        (workdir / "gateway.json").write_text(json.dumps(gw_cfg))
        gw = spawn(["gateway", "--config", str(workdir / "gateway.json")], workdir / "gateway.log")
        procs.append(gw)
        gw_url = f"http://127.0.0.1:{port}"
        wait_http(f"{gw_url}/health", gw)
        relays: list[tuple[psutil.Process, int]] = []
        udp_targets = []
        for i in range(args.relays):
            mport = free_port()
            cfg: dict[str, Any] = {
                "database_url": db_url,
                "gateway_api_url": f"{gw_url}/api",
                "gateway_api_key": API_KEY,
                "relay_id": f"{name}-{i}",
                "batch_size": 200,
                "concurrency": 4,
                "poll_interval_seconds": 0.2,
                "publish_timeout_seconds": 3,
                "metrics_port": mport,
                "log_level": "warning",
            }
            if args.linger_ms:
                cfg["linger_ms"] = args.linger_ms
            for option in args.relay_option:
                key, _, value = option.partition("=")
                cfg[key] = json.loads(value)
            if args.wake == "redis":
                cfg.update(wake_redis_url=svc.redis_url, wake_channel=channel)
            else:
                udp = f"127.0.0.1:{free_port()}"
                udp_targets.append(udp)
                cfg["wake_udp_listen"] = udp
            path = workdir / f"relay-{i}.json"
            path.write_text(json.dumps(cfg))
            proc = spawn(["relay", "run", "--config", str(path)], workdir / f"relay-{i}.log")
            procs.append(proc)
            wait_http(f"http://127.0.0.1:{mport}/metrics", proc)
            relays.append((psutil.Process(proc.pid), mport))
        wake: Any = (
            RedisWakePublisher(svc.redis_url, channel) if args.wake == "redis" else UdpWakeSender(udp_targets)
        )
        await asyncio.sleep(1.0)  # the relays subscribe (pacing, not a sync point: a lost hint is polled)
        producer = Producer(engine, wake, args.tasks, args.one_row)
        spies = []
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            spies = [profile(p.pid, args.profile / f"relay-{i}.txt") for i, (p, _) in enumerate(relays)]
        results = []
        for rate in args.rates:
            r = await step(rate, args, producer, relays, psutil.Process(gw.pid), engine)
            print(json.dumps(r), flush=True)
            results.append(r)
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=30)
        await wake.aclose()
        return results
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE `{name}`")
        await engine.dispose()
        svc.stop()


def net_of_idle(results: list[dict[str, Any]]) -> None:
    """With a rate-0 step in ``results``: add ``idle_cpu_ms_per_s`` (the relays' CPU with no events,
    per second: polls, timers, gauges) and, to every other step, ``relay_net_us_per_row`` (its CPU
    minus that floor over its window, per row published)."""
    idle = next((r["relay_cpu_share"] for r in results if r["rate"] == 0), None)
    if idle is None:
        return
    for r in results:
        r["idle_cpu_ms_per_s"] = 1000 * idle
        if r["published"]:
            net = r["relay_cpu_s"] - idle * r["window_s"]
            r["relay_net_us_per_row"] = 1e6 * net / r["published"]


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, label: str) -> str:
    net_of_idle(results)
    idle = [r for r in results if r["rate"] == 0]
    results = [r for r in results if r["rate"] != 0]
    lines = [
        f"{label} — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {len(os.sched_getaffinity(0))} CPUs, "
        f"Python {platform.python_version()}, {args.relays} relays woken through {args.wake}, "
        f"linger_ms {args.linger_ms}, "
        f"window {args.window:.0f} s after {args.warmup:.0f} s warm-up, "
        f"one commit per {1000 * args.tick:.0f} ms tick.",
        "",
        "| events/s (rows/s) | relay CPU µs per row (kernel share) | net of idle µs per row | "
        "rows per claim | "
        "relay CPU µs per claim | hints per relay | commit→publish p50 / p99 ms (bucket bound) | "
        "gateway µs per row | load |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['events_per_s']:.0f} ({r['published'] / args.window:.0f}) | "
            f"**{r['relay_us_per_row']:.0f}** ({100 * r['relay_sys_share']:.0f} %) | "
            f"{r.get('relay_net_us_per_row', float('nan')):.0f} | {r['rows_per_claim']:.1f} | "
            f"{r['relay_us_per_claim']:.0f} | "
            f"{' / '.join(str(h) for h in r['hints'])} | "
            f"{r['lag_p50_ms']:.0f} / {r['lag_p99_ms']:.0f} | {r['gateway_us_per_row']:.0f} | "
            f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    for r in idle:
        lines.append(
            f"\nIdle (no events, {r['window_s']:.0f} s): the relays' CPU {r['idle_cpu_ms_per_s']:.1f} ms per "
            f"second together ({r['claims']:.0f} claims that leased rows), load {r['load'][0]:.1f}."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--rates", type=float, nargs="+", default=[0, 10, 50, 200, 667],
        help="events/s (2 rows each); 0 measures the relays' idle floor, subtracted in the net column",
    )  # fmt: skip
    p.add_argument("--relays", type=int, default=2)
    p.add_argument("--one-row", action="store_true", help="one VERSION row per event (else 2 rows)")
    p.add_argument("--wake", choices=("redis", "udp"), default="redis")
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--window", type=float, default=15.0)
    p.add_argument("--tick", type=float, default=0.005, help="seconds between the producer's commits")
    p.add_argument("--linger-ms", type=int, default=0, help="the relays' linger_ms (0: off, the default)")
    p.add_argument("--relay-tree", type=Path, default=ROOT, help="source tree the relays run from (A/B)")
    p.add_argument("--label", default="this tree")
    p.add_argument("--profile", type=Path, help="directory for py-spy raw profiles of the relays")
    p.add_argument(
        "--db-pid", type=int, help="pid of the MariaDB server (an unshared one): its CPU per claim"
    )
    p.add_argument(
        "--relay-option", action="append", default=[], metavar="NAME=JSON",
        help="a relay config option for this run (repeatable), e.g. mark_defer_ms=0",
    )  # fmt: skip
    args = p.parse_args()
    TREES.update(relay=args.relay_tree.resolve())
    print(markdown(asyncio.run(amain(args)), args, args.label))


if __name__ == "__main__":
    main()
