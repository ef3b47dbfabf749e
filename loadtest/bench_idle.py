"""Idle connections on one gateway process: connect time, RSS per connection, CPU of the pings.

    .venv/bin/python loadtest/bench_idle.py --connections 19000 --json /tmp/idle.json
    .venv/bin/python loadtest/bench_idle.py --connections 100000 --gateway-workers 6

A gateway (memory engine, history on, ``client.ping_interval`` ``--ping-interval``, 25 s by
default as in production; ``--gateway-workers`` processes on one port, 1 by default) and a ladder
of idle clients up to ``--connections`` (``--ns`` for explicit rungs). The clients are C epoll
processes (loadtest/idle_clients.py, loadtest/fanout_client.c ``--tokens``): each connection
sends one connect command with a token carrying its own personal channel
(``task_user:t1/u<n>``, subscribed server-side, as a board is), then only answers pings.

File descriptors: the benchmark raises its soft RLIMIT_NOFILE to the hard limit (the gateway
and the clients inherit it) and prints both. One process can hold at most that many sockets:
a target above ``--gateway-workers`` × (hard limit − 200) is lowered to it and the JSON says so
(``fd_limited``). Clients: ``--per-client`` connections per process (below the same limit).
Source addresses: connection i binds to 127.0.0.(2 + i mod K), port 20000 + i / K
(``--source-addresses K``, by default one per 25,000 connections; Linux routes all of
127.0.0.0/8 to lo), so one gateway port takes more than the ~28,000 connections of one
address's ephemeral port range, and no connect waits for the kernel's port search (6 ms per
connect at 25,000 connections per address). ``--source-addresses 0``: the kernel's choice.

Per rung:

* connect time: wall time for the rung's new connections (``--concurrency`` handshakes in
  flight in all) and connects/s;
* RSS per connection: the gateway processes' RSS (summed) after the rung minus before any
  client, divided by the connections open;
* ping CPU: the gateway processes' CPU (psutil, user + sys) over ``--window`` idle seconds minus
  the gateway's own CPU with no client, per ping the clients received in the window, and
  projected to 100,000 connections at the default 25 s interval (4,000 pings/s);
* the clients' CPU and RSS, and the 1-minute load average at the window's start and end.

``--profile FILE``: py-spy (raw collapsed stacks) of the gateway during the last rung's window.
Prints one JSON line per rung and a markdown table; ``--json FILE`` writes the whole result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))

import idle_clients  # noqa: E402
from bench_relay import GATEWAY_CONFIG, TREES, profile, spawn, wait_http  # noqa: E402
from fleet import mint  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

SECRET = GATEWAY_CONFIG["client"]["token"]["hmac_secret_key"]
FD_MARGIN = 200
"""Descriptors a gateway process keeps for itself (listening sockets, logs, the loop)."""
PORTS_PER_ADDRESS = 25_000
"""Connections per client source address (each on its own port from 20,000: no ephemeral-port
search, loadtest/fanout_client.c ``--source-addresses``)."""


def raise_nofile() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE to the hard limit (inherited by every process started here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, hard


def processes(gw: psutil.Process) -> list[psutil.Process]:
    """The gateway and its workers (the supervisor's children)."""
    return [gw, *gw.children(recursive=True)]


def cpu_of(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def rss_of(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def gc_totals(port: int, workers: int) -> dict[str, list[float]]:
    """generation → [collections, seconds] so far (``taskcast_gateway_gc_pause_seconds``); empty
    with several workers (each answers for itself, whichever the kernel picks)."""
    out: dict[str, list[float]] = {}
    if workers > 1:
        return out
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("taskcast_gateway_gc_pause_seconds_"):
                name, _, value = line.rpartition(" ")
                kind = name.split("{")[0].rsplit("_", 1)[-1]
                gen = name.split('generation="')[1].split('"')[0]
                if kind in ("count", "sum"):
                    out.setdefault(gen, [0.0, 0.0])[0 if kind == "count" else 1] = float(value)
    return out


def ladder(args: argparse.Namespace, cap: int) -> list[int]:
    if args.ns:
        return [min(n, cap) for n in args.ns]
    top = min(args.connections, cap)
    return sorted({max(1, round(top * k / args.rungs)) for k in range(1, args.rungs + 1)})


def run(args: argparse.Namespace) -> dict[str, Any]:
    soft, hard = raise_nofile()
    cap = args.gateway_workers * (hard - FD_MARGIN)
    target = max(args.ns) if args.ns else args.connections
    rungs = ladder(args, cap)
    per_client = min(args.per_client, hard - FD_MARGIN)
    k = args.source_addresses
    if k is None:
        k = math.ceil(rungs[-1] / PORTS_PER_ADDRESS)
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-idle."))
    exe = idle_clients.build(workdir)
    port = free_port()
    cfg = json.loads(json.dumps(GATEWAY_CONFIG))
    cfg["http_server"]["port"] = port
    cfg["client"]["ping_interval"] = f"{args.ping_interval:g}s"
    pong = args.pong_timeout if args.pong_timeout is not None else min(8.0, args.ping_interval / 2)
    cfg["client"]["pong_timeout"] = f"{pong:g}s"
    cfg["prometheus"] = {"enabled": True}
    (workdir / "gateway.json").write_text(json.dumps(cfg))
    argv = ["gateway", "--config", str(workdir / "gateway.json")]
    if args.gateway_workers > 1:
        argv += ["--workers", str(args.gateway_workers)]
    result: dict[str, Any] = {
        "config": {
            "connections": target,
            "rungs": rungs,
            "gateway_workers": args.gateway_workers,
            "ping_interval_s": args.ping_interval,
            "pong_timeout_s": pong,
            "window_s": args.window,
            "concurrency": args.concurrency,
            "source_addresses": k,
            "per_client": per_client,
            "gateway_tree": str(TREES.get("gateway", ROOT)),
        },
        "nofile": {"soft_before": soft, "hard": hard},
        "fd_limited": target > cap,
        "rungs": [],
    }
    if target > cap:
        print(
            f"target {target:,} > {args.gateway_workers} gateway process(es) × "
            f"({hard:,} descriptors − {FD_MARGIN}): lowered to {cap:,}",
            flush=True,
        )
    print(f"RLIMIT_NOFILE soft {soft:,} → {hard:,} (hard {hard:,}); source addresses: {k}", flush=True)
    started = time.monotonic()
    gw = spawn(argv, workdir / "gateway.log")
    clients: list[idle_clients.ClientProc] = []
    spy = None
    try:
        wait_http(f"http://127.0.0.1:{port}/health", gw)
        result["gateway_start_s"] = round(time.monotonic() - started, 2)
        gproc = psutil.Process(gw.pid)
        time.sleep(1.0 + 0.5 * args.gateway_workers)  # the workers' start-up settles (pacing)
        procs = processes(gproc)
        rss0 = rss_of(procs)
        c0, t0 = cpu_of(procs), time.monotonic()
        time.sleep(min(args.window, 10.0))
        base = (cpu_of(procs) - c0) / (time.monotonic() - t0)  # the gateway alone, no client
        result.update(gateway_rss0_mib=round(rss0 / 2**20, 1), gateway_alone_cpu_share=round(base, 4))
        opened = 0
        for n in rungs:
            new: list[idle_clients.ClientProc] = []
            chunks = list(range(opened, n, per_client))
            conc = math.ceil(args.concurrency / max(1, len(chunks)))
            c0, t0 = cpu_of(procs), time.monotonic()
            for first in chunks:
                last = min(n, first + per_client)
                tokens = [mint(SECRET, f"u{i}", channels=[f"task_user:t1/u{i}"]) for i in range(first, last)]
                new.append(
                    idle_clients.start(
                        exe, port, tokens, first, workdir, concurrency=conc, source_addresses=k
                    )
                )
            t_conn = time.monotonic()  # tokens minted, every client started
            idle_clients.wait_ready(new)
            connect_s = time.monotonic() - t_conn
            connect_cpu = cpu_of(procs) - c0 - base * (time.monotonic() - t0)
            clients += new
            opened = n
            ready_new = sum(c.ready for c in new)
            time.sleep(2.0)  # idle before the window (pacing)
            if spy is None and args.profile and n == rungs[-1]:
                spy = profile(procs[-1].pid, args.profile)
            load0 = os.getloadavg()[0]
            me = [psutil.Process(c.proc.pid) for c in clients]
            gc0 = gc_totals(port, args.gateway_workers)
            cpu0, me0, t0 = cpu_of(procs), cpu_of(me), time.monotonic()
            outs = idle_clients.window(clients, args.window)
            elapsed = time.monotonic() - t0
            gc1 = gc_totals(port, args.gateway_workers)
            cpu = cpu_of(procs) - cpu0 - base * elapsed
            open_now = sum(int(o["open"]) for o in outs)
            pings = sum(int(o["pings"]) for o in outs)
            r = {
                "connections": open_now,
                "new": ready_new,
                "failed": sum(c.failed for c in new),
                "connect_s": round(connect_s, 2),
                "connects_per_s": round(ready_new / max(connect_s, 1e-9)),
                "connect_cpu_ms_per_conn": round(1e3 * connect_cpu / max(ready_new, 1), 3),
                "rss_mib": round(rss_of(procs) / 2**20, 1),
                "rss_per_conn_kib": round((rss_of(procs) - rss0) / max(open_now, 1) / 1024, 2),
                "idle_cpu_share": round(cpu / elapsed, 4),
                "pings": pings,
                "pings_expected": round(open_now * elapsed / args.ping_interval),
                "us_per_ping": round(1e6 * cpu / max(pings, 1), 1),
                "cores_100k_at_25s": round(cpu / max(pings, 1) * 100_000 / 25.0, 3),
                "client_cpu_share": round((cpu_of(me) - me0) / elapsed, 3),
                "client_rss_per_conn_kib": round(rss_of(me) / max(open_now, 1) / 1024, 2),
                "closed_in_window": sum(int(o["closed_in_step"]) for o in outs),
                # the collector in the window (one process only): collections by generation
                # and their pauses per ping
                "gc_collections": {g: int(gc1[g][0] - gc0.get(g, [0, 0])[0]) for g in gc1},
                "gc_us_per_ping": round(
                    1e6 * sum(gc1[g][1] - gc0.get(g, [0, 0])[1] for g in gc1) / max(pings, 1), 1
                ),
                "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
            }
            print(json.dumps(r), flush=True)
            result["rungs"].append(r)
        return result
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        for c in clients:
            c.stop()
        gw.terminate()
        gw.wait(timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)  # token files: ~25 MB at 100,000


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--connections", type=int, default=19_000, help="target (the last rung)")
    p.add_argument("--rungs", type=int, default=4, help="ladder steps up to --connections")
    p.add_argument("--ns", type=int, nargs="+", default=None, help="explicit rungs instead")
    p.add_argument("--gateway-workers", type=int, default=1, help="gateway processes on the port")
    p.add_argument(
        "--source-addresses",
        type=int,
        default=None,
        help="client source addresses 127.0.0.2… (default: one per 25,000 connections; "
        "0: 127.0.0.1 and the kernel's ports)",
    )
    p.add_argument("--per-client", type=int, default=19_000, help="connections per client process")
    p.add_argument("--ping-interval", type=float, default=25.0, help="client.ping_interval seconds")
    p.add_argument(
        "--pong-timeout",
        type=float,
        default=None,
        help="client.pong_timeout seconds (default: half the ping interval, at most 8)",
    )
    p.add_argument("--window", type=float, default=50.0, help="idle seconds measured per rung")
    p.add_argument("--concurrency", type=int, default=200, help="handshakes in flight in all")
    p.add_argument("--gateway-tree", type=Path, default=ROOT, help="source tree the gateway runs from (A/B)")
    p.add_argument("--profile", type=Path, default=None, help="py-spy raw profile of the last window")
    p.add_argument("--json", type=Path, default=None, help="write the whole result here")
    args = p.parse_args()
    TREES.update(gateway=args.gateway_tree.resolve())
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\ngateway start → ready {result.get('gateway_start_s')} s")
    print(
        "| connections | connect s (per s) | RSS KiB per conn | idle gateway CPU | µs per ping | "
        "100k at 25 s | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for r in result["rungs"]:
        print(
            f"| {r['connections']:,} | {r['connect_s']} ({r['connects_per_s']:,}) | "
            f"{r['rss_per_conn_kib']} | {100 * r['idle_cpu_share']:.1f} % | {r['us_per_ping']} | "
            f"{r['cores_100k_at_25s']:.2f} cores | {r['load'][0]} → {r['load'][1]} |"
        )


if __name__ == "__main__":
    main()
