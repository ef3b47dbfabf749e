"""Idle connections on one gateway process: connect time, RSS per connection, CPU of the pings.

One gateway process (memory engine, history on; ``client.ping_interval`` ``--ping-interval``) and
``--ns`` ladder rungs of idle clients from this process (``fleet.WSConn``: raw asyncio, answers the
protocol ping). Each client connects with a token carrying its own personal channel
(``task_user:t1/u<n>``, subscribed server-side, as a board is), then stays idle. Per rung:

* connect time: wall time for the rung's new connections (``--concurrency`` handshakes in flight);
* RSS per connection: gateway RSS after the rung minus RSS before any client, divided by N;
* ping CPU: gateway CPU (psutil, user + sys) over ``--window`` idle seconds, per connection-ping
  (N × window / ping interval), and projected to 100,000 connections at the default 25 s interval.

Clients connect from 127.0.0.1 to one port, so one rung stays below the ephemeral port range
(~28,000 on Linux). Prints one JSON line per rung and a markdown table; the load average is in each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))

from bench_relay import GATEWAY_CONFIG, TREES, cpu_seconds, spawn, wait_http  # noqa: E402
from fleet import WSConn, mint, ws_open  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

SECRET = GATEWAY_CONFIG["client"]["token"]["hmac_secret_key"]


async def connect_one(port: int, n: int) -> WSConn:
    conn = await ws_open(port, None, wait_s=30.0)
    token = mint(SECRET, f"u{n}", channels=[f"task_user:t1/u{n}"])
    reply = (await conn.call([("connect", {"token": token})], wait_s=30.0))[0]
    if "error" in reply:
        conn.abort()
        raise RuntimeError(f"connect refused: {reply['error']}")
    return conn


async def rung(port: int, conns: list[WSConn], target: int, concurrency: int) -> tuple[float, int]:
    """Connect until ``target`` clients are open; (seconds, failures)."""
    sem = asyncio.Semaphore(concurrency)
    failures = 0

    async def one(n: int) -> None:
        nonlocal failures
        async with sem:
            try:
                conns.append(await connect_one(port, n))
            except (OSError, TimeoutError, RuntimeError):
                failures += 1

    started = time.monotonic()
    await asyncio.gather(*(one(n) for n in range(len(conns), target)))
    return time.monotonic() - started, failures


async def amain(args: argparse.Namespace) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-idle."))
    port = free_port()
    cfg = json.loads(json.dumps(GATEWAY_CONFIG))
    cfg["http_server"]["port"] = port
    cfg["client"]["ping_interval"] = f"{args.ping_interval:g}s"
    pong = args.pong_timeout if args.pong_timeout is not None else min(8.0, args.ping_interval / 2)
    cfg["client"]["pong_timeout"] = f"{pong:g}s"
    (workdir / "gateway.json").write_text(json.dumps(cfg))
    gw = spawn(["gateway", "--config", str(workdir / "gateway.json")], workdir / "gateway.log")
    conns: list[WSConn] = []
    results = []
    try:
        wait_http(f"http://127.0.0.1:{port}/health", gw)
        proc = psutil.Process(gw.pid)
        await asyncio.sleep(1.0)  # the gateway's start-up settles (pacing, not a sync point)
        rss0 = proc.memory_info().rss
        c0, t0 = cpu_seconds(proc), time.monotonic()
        await asyncio.sleep(min(args.window, 10.0))
        base = (cpu_seconds(proc) - c0) / (time.monotonic() - t0)  # the gateway alone, no client
        for target in args.ns:
            seconds, failures = await rung(port, conns, target, args.concurrency)
            open_now = sum(1 for c in conns if not c.closed.done())
            await asyncio.sleep(2.0)  # idle before the window (pacing)
            load0 = os.getloadavg()[0]
            cpu0, me0, t0 = cpu_seconds(proc), cpu_seconds(psutil.Process()), time.monotonic()
            await asyncio.sleep(args.window)
            elapsed = time.monotonic() - t0
            cpu = cpu_seconds(proc) - cpu0 - base * elapsed
            pings = open_now * elapsed / args.ping_interval
            r = {
                "connections": open_now,
                "failed": failures,
                "connect_s": round(seconds, 2),
                "rss_per_conn_kib": round((proc.memory_info().rss - rss0) / max(open_now, 1) / 1024, 1),
                "idle_cpu_share": round(cpu / elapsed, 4),
                "gateway_alone_cpu_share": round(base, 4),
                "us_per_ping": round(1e6 * cpu / max(pings, 1), 1),
                "cpu_share_100k_at_25s": round(cpu / max(pings, 1) * 100_000 / 25.0, 3),
                "client_cpu_share": round((cpu_seconds(psutil.Process()) - me0) / elapsed, 3),
                "still_open": sum(1 for c in conns if not c.closed.done()),
                "load": (round(load0, 1), round(os.getloadavg()[0], 1)),
            }
            print(json.dumps(r), flush=True)
            results.append(r)
        return results
    finally:
        for c in conns:
            c.abort()
        gw.terminate()
        gw.wait(timeout=30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ns", type=int, nargs="+", default=[5000, 10000, 20000])
    p.add_argument(
        "--ping-interval",
        type=float,
        default=5.0,
        help="client.ping_interval seconds (production default: 25)",
    )
    p.add_argument(
        "--pong-timeout",
        type=float,
        default=None,
        help="client.pong_timeout seconds (default: half the ping interval, at most 8)",
    )
    p.add_argument("--window", type=float, default=20.0)
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--gateway-tree", type=Path, default=ROOT, help="source tree the gateway runs from (A/B)")
    args = p.parse_args()
    TREES.update(gateway=args.gateway_tree.resolve())
    results = asyncio.run(amain(args))
    print(
        "\n| connections | connect s | RSS KiB per conn | idle gateway CPU | µs per ping | "
        "100k at 25 s | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r['connections']:,} | {r['connect_s']} | {r['rss_per_conn_kib']} | "
            f"{100 * r['idle_cpu_share']:.1f} % | {r['us_per_ping']} | "
            f"{100 * r['cpu_share_100k_at_25s']:.1f} % | {r['load'][0]} → {r['load'][1]} |"
        )


if __name__ == "__main__":
    main()
