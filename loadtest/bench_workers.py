# ruff: noqa: E501  (markdown table lines are long)
"""Issue 20 items 3 and 4 benchmarks: ``--workers 2`` vs 1 on a hot channel, and the memory of a
gateway whose readers all stopped reading (overload conflation, seed §13.3).

    .venv/bin/python loadtest/bench_workers.py --out docs/PERFORMANCE.md          # both, ~6 min
    .venv/bin/python loadtest/bench_workers.py --only workers --quick              # a smoke run

**workers**: N subscribers of one hot channel (the C epoll client of loadtest/fanout_client.c,
pinned to CPU 1 with this publisher) and a publisher climbing a ladder of offered deliveries/s
(``POST /api/publish``, 200-byte payloads) until delivered < 90 % of offered. The 1-worker gateway
is pinned to CPU 0 (as in bench_fanout.py); the 2-worker gateway may use CPUs 0 and 1, i.e. its
second worker shares CPU 1 with the load client and the publisher: on a 2-core machine this is the
honest figure, not the one an 8- or 16-core machine would show.

**conflation**: 1,000 stalled readers (raw sockets, 4 KiB receive buffers, in a child process on
CPU 1 that connects, subscribes to its own ``task_user:`` channel, then never reads again) and a
progress stream of 1,000 publications/s spread over their channels (5 tasks per user, 2 KB each,
tagged ``task=<id>`` as the relay tags them) for ``--conflate-seconds``. The gateway's RSS, held
bytes, held connections, conflated publications and connected clients are sampled every few
seconds: RSS grows while the socket buffers and the first ``client.queue_conflate_size`` of each
connection fill, then stays flat; nobody is disconnected.

Results: a section of ``--out`` between ``<!-- workers:start -->`` and ``<!-- workers:end -->``,
raw JSON in ``--json``. Safety: 127.0.0.1 only, bounded loops, only PIDs started here signalled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (str(ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

import bench_fanout as bf  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

START, END = "<!-- workers:start -->", "<!-- workers:end -->"
READERS = 1000
TASKS_PER_USER = 5
PAD = "x" * 2000


# ------------------------------------------------------------------------------------ workers


def start_gateway(tmp: Path, cfg: dict[str, Any], workers: int, cpus: str, log: Any) -> tuple[bf.Server, int]:
    port = int(cfg["http_server"]["port"])
    path = tmp / f"gateway-{port}.json"
    path.write_text(json.dumps(cfg))
    cmd = ["taskset", "-c", cpus, bf.PY, "-m", "taskcast", "gateway", "--config", str(path)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    p = bf.popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if not bf.wait_health(port, 60):
        raise RuntimeError("gateway did not become healthy")
    if workers > 1:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(psutil.Process(p.pid).children()) < workers:
            time.sleep(0.2)
        time.sleep(4)  # every worker listening (its first heartbeat); bounded
    return bf.Server(p, children=True, name=f"gateway-w{workers}"), port


async def bench_workers(a: argparse.Namespace, tmp: Path, exe: Path, log: Any) -> list[dict[str, Any]]:
    runs = []
    ladder = [100_000, 200_000, 300_000, 400_000, 500_000, 600_000, 800_000]
    if a.quick:
        ladder = ladder[:3]
    for workers, cpus in ((1, "0"), (2, "0,1")):
        cfg = bf.gateway_config(free_port(), history=False)
        server, port = start_gateway(tmp, cfg, workers, cpus, log)
        client, hello = bf.start_client(exe, port, a.n, "json", "/connection/websocket")
        pub = bf.make_publisher("gateway", port, 16)
        await pub.open()
        await asyncio.sleep(2)
        steps = []
        try:
            for offered in ladder:
                step = await bf.run_step(a, server, client, pub, a.n, max(1, offered // a.n))
                steps.append(step)
                print(f"workers={workers} {bf.fmt_step(step)}", flush=True)
                if bf.saturated(step):
                    break
        finally:
            await pub.close()
            bf.client_cmd(client, "QUIT")
            bf.wait_or_stop(client, 10)
            server.stop()
        best = max((s["delivered_per_s"] for s in steps), default=0)
        runs.append(
            {"workers": workers, "cpus": cpus, "N": a.n, "hello": hello, "steps": steps, "sustained": best}
        )
    return runs


# --------------------------------------------------------------------------------- conflation


def readers_main(port: int, count: int) -> None:
    """Child process: ``count`` WebSocket clients that subscribe to ``task_user:u<i>`` and then
    never read; prints ``READY <n>`` and waits for stdin to close."""

    def frame(obj: dict[str, Any]) -> bytes:
        data = json.dumps(obj).encode()
        n = len(data)
        head = bytes((0x81, 0x80 | n)) if n < 126 else bytes((0x81, 0x80 | 126)) + n.to_bytes(2, "big")
        return head + b"\0\0\0\0" + data  # a zero mask: the payload goes as is

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 256)), hard))
    socks = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(10)
        s.connect((bf.HOST, port))
        s.sendall(
            f"GET /connection/websocket HTTP/1.1\r\nHost: {bf.HOST}:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("handshake refused")
            got += chunk
        s.sendall(
            frame({"id": 1, "connect": {}}) + frame({"id": 2, "subscribe": {"channel": f"task_user:u{i}"}})
        )
        reply = b""
        while reply.count(b'"id":') < 2:
            reply += s.recv(65536)
        socks.append(s)  # from here on never read again
    print(f"READY {len(socks)}", flush=True)
    sys.stdin.read()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{bf.HOST}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for name in (
        "taskcast_gateway_client_held_bytes",
        "taskcast_gateway_client_held_connections",
        "taskcast_gateway_client_conflated_publications_total",
        "centrifugo_node_num_clients",
    ):
        m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


async def bench_conflation(a: argparse.Namespace, tmp: Path, log: Any) -> dict[str, Any]:
    port = free_port()
    cfg = {
        "http_server": {"address": bf.HOST, "port": port},
        "http_api": {"key": bf.API_KEY},
        "health": {"enabled": True},
        "prometheus": {"enabled": True},
        "log": {"level": "error"},
        # Stalled readers cannot answer pings: without this they would get 3012 (no pong) after
        # ping_interval + pong_timeout, as in Centrifugo; the run measures memory, not that rule.
        "client": {
            "insecure": True,
            "queue_conflate_size": a.conflate_size,
            "ping_interval": "3600s",
            "pong_timeout": "3500s",
        },
        "channel": {
            "namespaces": [
                {
                    "name": "task_user",
                    "history_size": 10,
                    "history_ttl": "300s",
                    "allow_subscribe_for_client": True,
                    "conflation_tag": "task",
                }
            ]
        },
    }
    server, _ = start_gateway(tmp, cfg, 1, "0", log)
    readers = bf.popen(
        ["taskset", "-c", "1", bf.PY, __file__, "--readers-child", str(port), str(READERS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert readers.stdout is not None
    line = await asyncio.wait_for(
        asyncio.get_running_loop().run_in_executor(None, readers.stdout.readline), 180
    )
    if not line.startswith("READY"):
        raise RuntimeError(f"readers failed: {line!r}")
    samples: list[dict[str, Any]] = []
    idle_rss = server.rss()
    pool = bf.HTTPPool(port, "/api/batch", {"X-API-Key": bf.API_KEY}, b"%s", 4)
    await pool.open()
    rate, batch = a.conflate_rate, 100
    seq = 0
    t0 = time.monotonic()
    next_sample = t0
    cpu0 = server.cpu()
    try:
        for tick in range(int(a.conflate_seconds * rate / batch)):  # bounded
            due = t0 + tick * batch / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            commands = []
            for _ in range(batch):
                user = seq % READERS
                task = (seq // READERS) % TASKS_PER_USER
                data = {"task": f"u{user}-t{task}", "version": seq, "pad": PAD}
                commands.append(
                    {
                        "publish": {
                            "channel": f"task_user:u{user}",
                            "data": data,
                            "tags": {"task": f"u{user}-t{task}"},
                        }
                    }
                )
                seq += 1
            body = json.dumps({"commands": commands}).encode()
            if not await _send_raw(pool, body):
                break
            now = time.monotonic()
            if now >= next_sample:
                m = await asyncio.get_running_loop().run_in_executor(None, scrape, port)
                samples.append({"t_s": round(now - t0, 1), "rss_mb": round(server.rss() / 2**20, 1), **m})
                print(f"conflation {samples[-1]}", flush=True)
                next_sample = now + a.sample_every
        await pool.settle(5)
    finally:
        await pool.close()
        cpu_s = server.cpu() - cpu0
        elapsed = time.monotonic() - t0
        with contextlib.suppress(OSError):
            assert readers.stdin is not None
            readers.stdin.close()
        bf.wait_or_stop(readers, 10)
        server.stop()
    return {
        "readers": READERS,
        "rate": rate,
        "seconds": round(elapsed, 1),
        "published": seq,
        "pub_errors": pool.errors,
        "first_error": pool.first_error,
        "idle_rss_mb": round(idle_rss / 2**20, 1),
        "server_cpu_pct": round(cpu_s / max(1e-9, elapsed) * 100, 1),
        "conflate_size": a.conflate_size,
        "samples": samples,
    }


async def _send_raw(pool: bf.HTTPPool, body: bytes) -> bool:
    try:
        _, w = await asyncio.wait_for(pool.idle.get(), 10)
    except TimeoutError:
        return False
    w.write(pool.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    pool.inflight += 1
    return True


# ------------------------------------------------------------------------------------- report


def render(res: dict[str, Any]) -> str:
    env = res["env"]
    out = [
        START,
        "",
        "## Workers and overload conflation (issue 20 items 3–4, `loadtest/bench_workers.py`)",
        "",
        f"Run {res['when']} at {env['commit']} on {env['cpus']} CPUs; `uptime` load before: {env['load_before']}, after: {env['load_after']}. "
        "The machine is shared with other sessions' jobs: figures are one run each, not a clean-room measurement.",
        "",
    ]
    if res.get("workers"):
        out += [
            "### Hot channel, `--workers 1` vs `--workers 2`",
            "",
            "| workers | server CPUs | N | offered/s | delivered/s | p50 ms | p99 ms | server CPU % | client CPU % |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for run in res["workers"]:
            for s in run["steps"]:
                out.append(
                    f"| {run['workers']} | {run['cpus']} | {run['N']} | {s['offered_per_s']:,} | {s['delivered_per_s']:,} | "
                    f"{s['p50_ms']} | {s['p99_ms']} | {s['server_cpu_pct']} | {s['client_cpu_pct']} |"
                )
        w1, w2 = (r["sustained"] for r in res["workers"])
        out += [
            "",
            f"Sustained (best rung): 1 worker **{w1:,}/s**, 2 workers **{w2:,}/s** ({w2 / max(1, w1):.2f}×). "
            "The 2-worker server shares CPU 1 with the C load client and the publisher (their CPU % above), so on this "
            "2-core machine the second worker gets what the load generator leaves.",
            "",
        ]
    c = res.get("conflation")
    if c:
        out += [
            "### 1,000 stalled readers under a progress stream (seed §13.3)",
            "",
            f"{c['readers']} readers that never read after subscribing (each its own `task_user:` channel, 4 KiB receive "
            f"buffers), {c['rate']:,} publications/s of 2 KB over {TASKS_PER_USER} tasks per reader, tagged `task=<id>`, "
            f"for {c['seconds']} s ({c['published']:,} publications, {c['pub_errors']} errors); "
            f"`client.queue_conflate_size` {c['conflate_size']:,}; history 10 per channel (full after 10 s); pings "
            f"off (a stalled reader cannot pong; Centrifugo's 3012 rule would otherwise close it); gateway CPU {c['server_cpu_pct']} %; idle RSS with the "
            f"readers connected {c['idle_rss_mb']} MiB.",
            "",
            "| t (s) | gateway RSS MiB | held bytes | held connections | conflated (total) | connected clients |",
            "|---|---|---|---|---|---|",
        ]
        for s in c["samples"]:
            out.append(
                f"| {s['t_s']} | {s['rss_mb']} | {int(s['taskcast_gateway_client_held_bytes']):,} | "
                f"{int(s['taskcast_gateway_client_held_connections'])} | "
                f"{int(s['taskcast_gateway_client_conflated_publications_total']):,} | {int(s['centrifugo_node_num_clients'])} |"
            )
        out.append("")
    out += [END]
    return "\n".join(out)


def write_section(out: Path, section: str) -> None:
    text = out.read_text() if out.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)


def commit() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    return "?"


async def amain(a: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "env": {"commit": commit(), "cpus": os.cpu_count(), "load_before": os.getloadavg()},
    }
    with (tmp / "servers.log").open("w") as log:
        try:
            if a.only in ("", "workers"):
                exe = bf.build_client(tmp)
                res["workers"] = await bench_workers(a, tmp, exe, log)
            if a.only in ("", "conflation"):
                res["conflation"] = await bench_conflation(a, tmp, log)
        finally:
            bf.stop_all()
    res["env"]["load_after"] = os.getloadavg()
    return res


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--readers-child":
        readers_main(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="")
    p.add_argument("--json", default="")
    p.add_argument("--only", choices=["", "workers", "conflation"], default="")
    p.add_argument("--quick", action="store_true")
    p.add_argument("-n", type=int, default=1000, help="hot-channel subscribers")
    p.add_argument("--warm", type=float, default=1.5)
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--drain", type=float, default=2.0)
    p.add_argument("--conflate-seconds", type=float, default=90.0)
    p.add_argument("--conflate-rate", type=int, default=1000)
    p.add_argument("--conflate-size", type=int, default=16384)
    p.add_argument("--sample-every", type=float, default=5.0)
    a = p.parse_args()
    res = asyncio.run(amain(a))
    section = render(res)
    print(section)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    if a.out:
        write_section(Path(a.out), section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
