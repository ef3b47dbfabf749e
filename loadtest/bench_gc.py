"""Garbage-collector pauses of a gateway holding many connections, and what they do to delivery.

One gateway process (memory engine, history on) per tree; ``--clients`` raw WebSocket clients
(``loadtest/fleet.py``), each subscribed server-side to its own channel, connect; then ``--rate``
publications/s go to random clients through ``/api/publish`` for ``--window`` seconds. Measured:

* publish → delivered (send time in ``tags``, receipt in the client process; one machine clock):
  p50 / p99 / max and how many deliveries took over 50 ms;
* every garbage collection of the gateway's main thread during the connect phase and the window,
  by generation: count, longest, total (a ``gc.callbacks`` hook injected with ``sitecustomize``,
  CPU time of the thread, so the machine's load does not inflate it);
* the cost of one full collection at the end of the window (``SIGUSR1`` → ``gc.collect()``, CPU),
  the objects it scanned and the objects frozen out of it (``gc.get_freeze_count()``).

10,000 clients need an fd limit above 10,000 for the client process and the gateway (``ulimit -n``;
one client process holds up to ~19,000 at 20,000).

``--tree DIR`` (repeatable) runs the same with another checkout (A/B in one run, trees alternating
``--repeat`` times). Prints JSON; ``--out`` replaces the ``gc`` block of a markdown file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))
import fleet  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

SECRET = "bench-gc-secret-0123456789abcdef0123"
API_KEY = "bench-gc-key"
#: Injected into the gateway: logs "<wall> <generation> <cpu ms>" per collection, and on SIGUSR1
#: the CPU cost of one full collection ("full <cpu ms> <objects>").
SITECUSTOMIZE = """
import gc, os, signal, time
_log = os.environ.get("BENCH_GC_LOG")
if _log:
    _f = open(_log, "a", buffering=1)
    _t = [0.0]
    def _cb(phase, info):
        if phase == "start":
            _t[0] = time.thread_time()
        else:
            _f.write(f"{time.time():.3f} {info['generation']} {(time.thread_time() - _t[0]) * 1000:.3f}\\n")
    gc.callbacks.append(_cb)
    import threading
    def _measure():
        # On a thread of its own: a signal handler may run inside a collection's callback, where
        # gc.collect() returns at once; retry until a full collection really ran.
        while True:
            before = gc.get_stats()[2]["collections"]
            t = time.thread_time(); gc.collect(); d = (time.thread_time() - t) * 1000
            if gc.get_stats()[2]["collections"] > before:
                break
            time.sleep(0.01)
        _f.write(f"full {d:.3f} {len(gc.get_objects())} {gc.get_freeze_count()}\\n")
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=_measure).start())
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else float("nan")


def start_gateway(tree: Path, work: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``taskcast gateway`` of ``tree`` with ``work/gw.json`` (output in ``work/gw.log``), returned
    once its ``/health`` on ``port`` answers 200; stopped, with the log's tail raised, when it does
    not within 120 s."""
    gw = subprocess.Popen(
        [sys.executable, "-m", "taskcast", "gateway", "--config", str(work / "gw.json")],
        env=env,
        cwd=tree,
        stdout=(work / "gw.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return gw
        except OSError:
            pass
        if time.monotonic() > deadline or gw.poll() is not None:
            gw.kill()
            gw.wait()
            raise RuntimeError(f"gateway did not start: {(work / 'gw.log').read_text()[-2000:]}")
        time.sleep(0.2)


def run_tree(tree: Path, args: argparse.Namespace, site: Path) -> dict[str, Any]:
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="bench-gc-"))
    cfg = {
        "http_server": {"address": "127.0.0.1", "port": port},
        "log": {"level": "warn"},
        "engine": {"type": "memory"},
        "client": {"token": {"hmac_secret_key": SECRET}},
        "http_api": {"key": API_KEY},
        "health": {"enabled": True},
        "channel": {
            "namespaces": [
                {"name": "user", "history_size": 100, "history_ttl": "300s", "force_recovery": True}
            ]
        },
    }
    (work / "gw.json").write_text(json.dumps(cfg))
    gclog = work / "gc.log"
    env = {**os.environ, "PYTHONPATH": f"{site}:{tree}", "BENCH_GC_LOG": str(gclog)}
    gw = start_gateway(tree, work, port, env)
    try:
        started = time.time()
        lat, window_start, window_end = asyncio.run(drive(port, args))
        gw.send_signal(signal.SIGUSR1)
        wait_full = time.monotonic() + 60
        while "full " not in gclog.read_text() and time.monotonic() < wait_full:
            time.sleep(0.2)
    finally:
        gw.terminate()
        gw.wait(30)
    rows = [line.split() for line in gclog.read_text().splitlines()]
    full = next((r for r in rows if r[0] == "full"), None)
    gcs = [(float(t), int(g), float(ms)) for t, g, ms in (r for r in rows if r[0] != "full")]

    def phase(lo: float, hi: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for g in (0, 1, 2):
            xs = [ms for t, gg, ms in gcs if gg == g and lo <= t < hi]
            out[str(g)] = {
                "n": len(xs),
                "max_ms": round(max(xs, default=0.0), 1),
                "sum_ms": round(sum(xs), 1),
            }
        return out

    return {
        "tree": str(tree),
        "clients": args.clients,
        "deliveries": len(lat),
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "max_ms": round(max(lat, default=float("nan")), 1),
        "over_50ms": sum(1 for x in lat if x > 50),
        "gc_connect": phase(started, window_start),
        "gc_window": phase(window_start, window_end),
        "full_collection_ms": float(full[1]) if full else None,
        "objects": int(full[2]) if full else None,
        "frozen": int(full[3]) if full and len(full) > 3 else None,
    }


async def drive(port: int, args: argparse.Namespace) -> tuple[list[float], float, float]:
    lat: list[float] = []
    published = int(args.window * args.rate)
    all_in = asyncio.Event()

    def on_push(_conn: Any, _channel: str, pub: dict[str, Any]) -> None:
        sent = pub.get("tags", {}).get("sent")
        if sent:
            lat.append(fleet.now_ms() - float(sent))
            if len(lat) >= published:
                all_in.set()

    stats = fleet.Stats()
    conns: list[Any] = []
    deadline = time.monotonic() + 600

    async def one(i: int) -> None:
        token = fleet.mint(SECRET, f"c{i}", channels=[f"user:c{i}"])
        conn, _ = await fleet.connect_with_backoff(
            lambda _a: port, {"token": token}, on_push, deadline, stats
        )
        conns.append(conn)

    for k in range(0, args.clients, 250):
        await asyncio.gather(*(one(i) for i in range(k, min(args.clients, k + 250))))
    pool = fleet.HTTPPool(port, 4)
    await pool.open()
    window_start = time.time()
    period = 1.0 / args.rate
    next_at = time.monotonic()
    for j in range(published):
        body = {
            "channel": f"user:c{random.randrange(args.clients)}",
            "data": {"j": j, "pad": "x" * 400},
            "tags": {"sent": str(fleet.now_ms())},
        }
        await pool.request("/api/publish", body, {"X-API-Key": API_KEY})
        next_at += period
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    # Every publication reaches its one client: drain until all are in (bounded), not for a window.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_in.wait(), 30.0)
    window_end = time.time()
    for conn in conns:
        conn.abort()
    await pool.close()
    return lat, window_start, window_end


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, load: tuple[float, ...]) -> str:
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "<!-- gc:start -->",
        "## Garbage-collector pauses (`loadtest/bench_gc.py`)",
        "",
        f"Generated {date}; one gateway (memory engine), {args.clients} raw WebSocket clients on personal "
        f"channels, then {args.rate:g} publications/s for {args.window:g} s; trees alternating "
        f"{args.repeat}×; load average at start {load[0]:.2f} (2 CPUs). Collection times are CPU of the "
        "gateway's main thread (`gc.callbacks`); publish → delivered is wall clock.",
        "",
        "| tree | deliveries | p50 / p99 / max ms | over 50 ms "
        "| full collections while connecting: n, longest ms | in the window: n, longest ms "
        "| young (gen 1) longest ms | one full collection, ms (objects scanned; frozen) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c, w = r["gc_connect"], r["gc_window"]
        lines.append(
            f"| {Path(r['tree']).name} | {r['deliveries']} | {r['p50_ms']} / {r['p99_ms']} / {r['max_ms']} "
            f"| {r['over_50ms']} | {c['2']['n']}, {c['2']['max_ms']} | {w['2']['n']}, {w['2']['max_ms']} "
            f"| {max(c['1']['max_ms'], w['1']['max_ms'])} | {r['full_collection_ms']} ({r['objects']}; "
            f"{r.get('frozen')}) |"
        )
    lines.append("<!-- gc:end -->")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--clients", type=int, default=2500)
    p.add_argument("--rate", type=float, default=10.0)
    p.add_argument("--window", type=float, default=120.0)
    p.add_argument("--tree", action="append", type=Path, default=[])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    site = Path(tempfile.mkdtemp(prefix="bench-gc-site-"))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    load = os.getloadavg()
    results = [run_tree(t, args, site) for _ in range(args.repeat) for t in (args.tree or [ROOT])]
    print(json.dumps(results, indent=1))
    if args.out:
        fleet.replace_block(args.out, "<!-- gc:start -->", "<!-- gc:end -->", markdown(results, args, load))


if __name__ == "__main__":
    main()
