# ruff: noqa: E501  (markdown tables are long lines; list building reads better with +)
"""Fan-out benchmark: one hot channel, N WebSocket subscribers, a publisher at rising rates.

    .venv/bin/python loadtest/bench_fanout.py --out docs/PERFORMANCE.md     # full run (make bench-fanout)
    .venv/bin/python loadtest/bench_fanout.py --quick --out /tmp/perf.md    # N=1000, short rungs

For each N (1000, 5000) and each server — the raw ``websockets.broadcast()`` baseline
(loadtest/baseline_ws_broadcast.py), the Taskcast gateway with history off, the gateway with history
on (size 100, ttl 300 s) and nginx+nchan when installed — this script starts the server pinned to
CPU 0, connects N subscribers with the C epoll client (loadtest/fanout_client.c, compiled into a
temp dir, pinned to CPU 1 with this publisher), measures idle RSS per connection, then climbs a
ladder of offered deliveries/s (publishes/s = offered / N) until saturation: delivered < 90 % of
offered, publish rate < 90 % of target, or p99 > 1 s. Each rung: warm-up, measured window, drain.

The gateway is published to through its server API (``POST /api/publish``, ``X-API-Key``) over a
pool of keep-alive HTTP/1.1 connections (open loop: a publication waits only for a free
connection); the baseline over one WebSocket (fire and forget); nchan by HTTP POST like the
gateway. Every payload is 200 bytes of JSON whose first field is the CLOCK_MONOTONIC send time.

``--protocol json,protobuf`` (the default) runs every gateway server twice: subscribers on the JSON
protocol, then on Centrifugo's Protobuf protocol (the C client offers ``centrifuge-protobuf`` and
parses the varint-delimited binary Replies); the publisher and the payload are the same. The
Protobuf runs fill their own block (JSON vs Protobuf at each N, deliveries/s and per-CPU cost);
every other table is of the JSON runs. ``--protobuf-block`` measures and rewrites only that block.

Results: a section of ``--out`` between ``<!-- fanout:start -->`` and ``<!-- fanout:end -->``
(the rest of the file is kept), the raw JSON next to it (``--json``), and a py-spy profile of the
gateway on one extra rung (``--profile-rate``) when py-spy is installed.

Safety: 127.0.0.1 only; every loop is bounded in count and time; a global ``--budget-s`` deadline
(plus a hard alarm); only the PIDs started here are signalled, and all are stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fanout_procs import (  # noqa: E402
    API_KEY,
    DEFLATE,
    HOST,
    LOAD_CPU,
    PY,
    Server,
    build_client,
    client_cmd,
    nchan_available,
    popen,
    server_kinds,
    start_client,
    start_server,
    stop,
    stop_all,
    wait_or_stop,
)
from fanout_report import (  # noqa: E402  (sys.path holds loadtest/ when run as a script)
    PB_END,
    PB_START,
    REDIS2,
    env_info,
    render,
    render_protobuf_block,
    render_redis_block,
    summarize_profile,
    write_redis_block,
    write_section,
)

CHANNEL = "bench"
MSG_LEN = 200
LADDER = [25_000, 50_000, 75_000, 100_000, 125_000, 150_000, 200_000, 300_000, 400_000, 600_000, 800_000]
PROTOCOLS = ("json", "protobuf")
mono = time.monotonic_ns


def make_data(seq: int) -> bytes:
    """200 bytes of JSON; the send time (CLOCK_MONOTONIC ns, 19 digits) is the first field."""
    head = b'{"t":"%019d","seq":"%09d","pad":"' % (mono(), seq)
    return head + b"x" * (MSG_LEN - len(head) - 2) + b'"}'


assert len(make_data(1)) == MSG_LEN


# --------------------------------------------------------------------------------- publishers


class HTTPPool:
    """Open-loop HTTP/1.1 keep-alive publisher over ``size`` connections."""

    def __init__(self, port: int, path: str, headers: dict[str, str], wrap: bytes, size: int) -> None:
        self.port, self.size = port, size
        head = f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = head.encode()
        self.pre, _, self.post = wrap.partition(b"%s")
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.readers: list[asyncio.Task[None]] = []
        self.ok = self.errors = 0
        self.first_error = ""
        self.inflight = 0
        self.settled = asyncio.Event()

    async def open(self) -> None:
        for _ in range(self.size):
            r, w = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 5)
            conn = (r, w)
            self.idle.put_nowait(conn)
            self.readers.append(asyncio.create_task(self._reader(conn)))

    async def _reader(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        r, _ = conn
        while True:  # ends when the connection closes or the task is cancelled at close()
            try:
                head = await r.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            length = 0
            for ln in head.split(b"\r\n"):
                if ln[:15].lower() == b"content-length:":
                    length = int(ln[15:])
            body = await r.readexactly(length) if length else b""
            status = head[9:12]
            if status in (b"200", b"201", b"202") and b'"error"' not in body:
                self.ok += 1
            else:
                self.errors += 1
                self.first_error = self.first_error or (head[:40] + body[:200]).decode(errors="replace")
            self.inflight -= 1
            if self.inflight == 0:
                self.settled.set()
            self.idle.put_nowait(conn)

    async def send(self, seq: int, wait_s: float) -> bool:
        try:
            _, w = await asyncio.wait_for(self.idle.get(), wait_s)
        except TimeoutError:
            return False
        body = self.pre + make_data(seq) + self.post
        w.write(self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.inflight += 1
        return True

    async def settle(self, wait_s: float) -> None:
        if self.inflight > 0:
            self.settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled.wait(), wait_s)

    async def close(self) -> None:
        for t in self.readers:
            t.cancel()
        while not self.idle.empty():
            _, w = self.idle.get_nowait()
            w.close()


class WSPub:
    """One raw WebSocket connection to the baseline's /pub; each publication is one text frame."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.ok = self.errors = 0
        self.first_error = ""

    async def open(self) -> None:
        self.r, self.w = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 5)
        self.w.write(
            f"GET /pub HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(self.r.readuntil(b"\r\n\r\n"), 5)
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(head[:80])

    async def send(self, seq: int, wait_s: float) -> bool:
        data = make_data(seq)
        self.w.write(bytes((0x81, 0x80 | 126)) + len(data).to_bytes(2, "big") + b"\0\0\0\0" + data)
        self.ok += 1
        if self.w.transport.get_write_buffer_size() > 1 << 20:
            await asyncio.wait_for(self.w.drain(), wait_s)
        return True

    async def settle(self, wait_s: float) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.w.drain(), wait_s)

    async def close(self) -> None:
        self.w.close()


def make_publisher(kind: str, port: int, conns: int) -> HTTPPool | WSPub:
    if kind == "baseline":
        return WSPub(port)
    if kind == "nchan":
        return HTTPPool(port, "/pub", {}, b"%s", conns)
    wrap = b'{"channel":"%s","data":%%s}' % CHANNEL.encode()
    return HTTPPool(port, "/api/publish", {"X-API-Key": API_KEY}, wrap, conns)


async def publish(pub: HTTPPool | WSPub, rate: int, t0: int, seconds: float) -> tuple[int, float]:
    interval = 1e9 / rate
    n = int(rate * seconds)
    hard = t0 + int((seconds + 2) * 1e9)
    sent = 0
    for i in range(n):  # bounded in count, and in time by `hard`
        d = t0 + int(i * interval) - mono()
        if d > 0:
            await asyncio.sleep(d / 1e9)
        elif i % 32 == 0:
            await asyncio.sleep(0)
        if not await pub.send(i, max(0.01, (hard - mono()) / 1e9)):
            break
        sent += 1
        if mono() > hard:
            break
    return sent, (mono() - t0) / 1e9


# --------------------------------------------------------------------------------- one rung


async def run_step(
    a: argparse.Namespace,
    server: Server,
    client: subprocess.Popen[str],
    pub: HTTPPool | WSPub,
    n: int,
    rate: int,
    profile_to: Path | None = None,
) -> dict[str, Any]:
    warm, dur, drain = a.warm, a.window, a.drain
    t0 = mono() + 300_000_000
    client_cmd(client, f"GO {t0} {warm} {dur} {drain}")
    w0 = t0 + int(warm * 1e9)
    w1 = w0 + int(dur * 1e9)
    me = psutil.Process()
    pub_task = asyncio.create_task(publish(pub, rate, t0, warm + dur))
    await asyncio.sleep(max(0, (w0 - mono()) / 1e9))
    spy = None
    if profile_to is not None:
        spy = popen(
            [
                "taskset",
                "-c",
                str(LOAD_CPU),
                str(Path(PY).parent / "py-spy"),
                "record",
                "--nonblocking",
                "--rate",
                "250",
                "--format",
                "raw",
                "-d",
                str(int(dur)),
                "-p",
                str(server.python_pid()),
                "-o",
                str(profile_to),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    psutil.cpu_percent(percpu=True)
    parts0 = server.cpu_parts() if server.extra else {}
    c0, p0 = server.cpu(), sum(me.cpu_times()[:2])
    await asyncio.sleep(max(0, (w1 - mono()) / 1e9))
    c1, p1, rss1 = server.cpu(), sum(me.cpu_times()[:2]), server.rss()
    parts1 = server.cpu_parts() if server.extra else {}
    busy = psutil.cpu_percent(percpu=True)
    sent, pub_elapsed = await pub_task
    await pub.settle(drain)
    loop = asyncio.get_running_loop()
    assert client.stdout is not None
    line = await asyncio.wait_for(loop.run_in_executor(None, client.stdout.readline), drain + 30)
    if not line:
        raise RuntimeError("load client died")
    r = json.loads(line)["result"]
    if spy is not None:
        await loop.run_in_executor(None, wait_or_stop, spy, 20.0)
    cpu_s = c1 - c0
    step = {
        "N": n,
        "pub_per_s": rate,
        "offered_per_s": rate * n,
        "published": sent,
        "pub_rate": round(sent / max(1e-9, pub_elapsed), 1),
        "pub_ok": pub.ok,
        "pub_errors": pub.errors,
        "delivered_per_s": round(r["win"] / dur),
        "delivery_ratio_after_drain": round(r["total"] / max(1, sent * n), 4),
        "p50_ms": r["p50_ms"],
        "p90_ms": r["p90_ms"],
        "p99_ms": r["p99_ms"],
        "max_ms": r["max_ms"],
        "lat_samples": r["lat_n"],
        "server_cpu_pct": round(cpu_s / dur * 100, 1),
        "deliveries_per_cpu_s": round(r["win"] / cpu_s) if cpu_s > 0 else None,
        "server_us_per_delivery": round(cpu_s / max(1, r["win"]) * 1e6, 2),
        "server_rss_mb": round(rss1 / 2**20, 1),
        "client_cpu_pct": r["client_cpu_pct"],
        "publisher_cpu_pct": round((p1 - p0) / dur * 100, 1),
        "cpu_busy_pct": [round(x, 1) for x in busy],
        "open": r["open"],
        "closed_in_step": r["closed_in_step"],
        "bad": r["bad"],
        "wire_bytes_per_delivery": round(r.get("wire_bytes", 0) / max(1, r["win"]), 1),
        "deflated_frames": r.get("deflated_frames", 0),
        "per_sec": r["per_sec"],
    }
    if server.extra:  # several server processes: CPU % of each, and what each node's half received
        step["server_cpu_parts_pct"] = {k: round((parts1[k] - parts0[k]) / dur * 100, 1) for k in parts1}
    if server.port2:
        step["sides"] = [
            {"node": node, "delivered_per_s": round(x["win"] / dur)} | {k: x[k] for k in ("p50_ms", "p99_ms")}
            for node, x in zip(("node-a", "node-b"), r["sides"], strict=True)
        ]
    pub.ok = pub.errors = 0
    return step


def saturated(s: dict[str, Any]) -> str:
    if s["delivered_per_s"] < 0.9 * s["offered_per_s"]:
        return "delivered < 90% of offered"
    if s["pub_rate"] < 0.9 * s["pub_per_s"]:
        return "publish rate < 90% of target"
    if (s["p99_ms"] or 0) > 1000:
        return "p99 > 1 s"
    if s["closed_in_step"]:
        return "connections closed"
    return ""


def fmt_step(s: dict[str, Any]) -> str:
    parts = s.get("server_cpu_parts_pct")
    return (
        f"  M={s['pub_per_s']:>5}/s offered={s['offered_per_s']:>7} delivered={s['delivered_per_s']:>7}/s "
        f"pub={s['pub_rate']:>7} p50={s['p50_ms']:.1f}ms p99={s['p99_ms']:.1f}ms srv={s['server_cpu_pct']}% "
        + (f"({' '.join(f'{k}={v}' for k, v in parts.items())}) " if parts else "")
        + f"del/cpu-s={s['deliveries_per_cpu_s']} cli={s['client_cpu_pct']}% pubcpu={s['publisher_cpu_pct']}% "
        f"busy={s['cpu_busy_pct']} err={s['pub_errors']} closed={s['closed_in_step']}"
        + (
            " sides=" + "/".join(f"{x['delivered_per_s']}@p99 {x['p99_ms']:.0f}ms" for x in s["sides"])
            if s.get("sides")
            else ""
        )
    )


async def bench_server(
    a: argparse.Namespace,
    kind: str,
    n: int,
    tmp: Path,
    exe: Path,
    ladder: list[int],
    deadline: float,
    profile: dict[str, Any] | None,
    protocol: str = "json",
) -> dict[str, Any]:
    """One server kind at N subscribers speaking ``protocol`` (``json`` or ``protobuf``; only the
    gateway kinds speak Protobuf), up the ladder until saturation."""
    out: dict[str, Any] = {"server": kind, "N": n, "protocol": protocol, "steps": []}
    tag = f"{kind}{'-pb' if protocol == 'protobuf' else ''}"
    log = open(tmp / f"{tag}-{n}.log", "ab")  # noqa: SIM115, ASYNC230 - closed in finally; a local file
    server = client = None
    pub: HTTPPool | WSPub | None = None
    try:
        server, port = start_server(kind, tmp, log)
        await asyncio.sleep(1.0)
        rss_base = server.rss()
        t = time.monotonic()
        proto = "raw" if kind == "nchan" else ("protobuf" if protocol == "protobuf" else "centrifugo")
        path = "/sub" if kind == "nchan" else "/connection/websocket"
        client, ready = start_client(exe, port, n, proto, path, server.port2, deflate=kind == DEFLATE)
        out["connect_s"] = round(time.monotonic() - t, 2)
        out["connected"], out["connect_failed"] = ready["ready"], ready["failed"]
        if server.port2:
            out["connected_per_node"] = ready.get("ready_side")
        await asyncio.sleep(2.0)
        rss_idle = server.rss()
        out["rss_base_mb"] = round(rss_base / 2**20, 1)
        out["rss_idle_mb"] = round(rss_idle / 2**20, 1)
        out["rss_per_conn_kib"] = round((rss_idle - rss_base) / max(1, out["connected"]) / 1024, 1)
        print(
            f"[{tag} N={n}] connected={out['connected']} failed={out['connect_failed']} in {out['connect_s']}s "
            f"rss/conn={out['rss_per_conn_kib']} KiB",
            flush=True,
        )
        if out["connected"] < n * 0.99:
            out["stopped"] = "not all subscribers connected"
            return out
        pub = make_publisher(kind, port, a.http_conns)
        await pub.open()
        out["publisher"] = (
            "WebSocket /pub (1 conn)" if kind == "baseline" else f"HTTP keep-alive x{a.http_conns}"
        )
        for target in ladder:
            if time.time() + a.warm + a.window + a.drain + 5 > deadline:
                out["stopped"] = "global deadline"
                break
            step = await run_step(a, server, client, pub, n, max(1, round(target / n)))
            if kind.startswith("gateway") and step["pub_errors"] and not out.get("pub_error"):
                out["pub_error"] = pub.first_error
            step["saturated"] = saturated(step)
            out["steps"].append(step)
            print(fmt_step(step), flush=True)
            if step["saturated"]:
                out["stopped"] = step["saturated"]
                break
        if profile is not None and time.time() + a.window + 30 < deadline:
            prof_path = tmp / f"profile-{kind}-{n}.txt"
            step = await run_step(a, server, client, pub, n, max(1, round(profile["rate"] / n)), prof_path)
            print("  [py-spy]" + fmt_step(step)[1:], flush=True)
            profile.update(step=step, raw=prof_path.read_text() if prof_path.exists() else "")
    finally:
        if pub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pub.close(), 3)
        if client is not None:
            client_cmd(client, "QUIT")
            stop(client)
        if server is not None:
            server.stop()
        log.close()
        await asyncio.sleep(1.0)
    return out


# --------------------------------------------------------------------------------- main


async def amain(a: argparse.Namespace) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if max(a.ns) * 1 + 200 > want:
        print(f"warning: RLIMIT_NOFILE {want} is low for N={max(a.ns)}", flush=True)
    if os.cpu_count() and os.cpu_count() >= 2:  # type: ignore[operator]
        os.sched_setaffinity(0, {LOAD_CPU})
    deadline = time.time() + a.budget_s
    tmp = Path(tempfile.mkdtemp(prefix="taskcast-fanout-"))
    exe = build_client(tmp)
    nchan = a.with_nchan or a.nchan_if_installed
    nchan = nchan and nchan_available(install=a.with_nchan)
    redis = shutil.which("redis-server") is not None
    if not redis:
        print(f"redis-server not installed: {REDIS2} skipped (apt-get install redis-server)", flush=True)
    kinds = [k for k in server_kinds(nchan, redis) if not a.servers or k in a.servers.split(",")]
    out = Path(a.out)
    default_json = (
        "fanout-redis-results.json"
        if a.redis_block
        else ("fanout-protobuf-results.json" if a.protobuf_block else "fanout-results.json")
    )
    json_path = Path(a.json) if a.json else out.parent / "perf" / default_json
    prof_path = json_path.parent / "fanout-gateway-profile.txt"
    prof_paths = {"gateway": prof_path, REDIS2: json_path.parent / "fanout-gateway-redis-profile.txt"}
    prof_keys = {"gateway": "profile", REDIS2: "profile_redis"}
    if a.redis_block or a.protobuf_block:  # leave the full run's gateway profile alone
        del prof_keys["gateway"]
    rel = lambda p: os.path.relpath(p.resolve(), out.resolve().parent)  # noqa: E731
    res: dict[str, Any] = {
        "env": env_info(),
        "params": {
            "quick": a.quick,
            "ns": a.ns,
            "ladder": a.ladder,
            "warm": a.warm,
            "window": a.window,
            "drain": a.drain,
            "http_conns": a.http_conns,
            "servers": kinds,
            "protocols": a.protocols,
            "json_rel": rel(json_path),
            "profile_rel": rel(prof_path),
            "profile_redis_rel": rel(prof_paths[REDIS2]),
        },
        "runs": [],
    }
    print(json.dumps(res["env"]), flush=True)
    spy_ok = (Path(PY).parent / "py-spy").exists() and a.profile_rate > 0
    if not spy_ok and a.profile_rate > 0:
        print("py-spy not installed in the venv: no profile (.venv/bin/pip install py-spy)", flush=True)
    try:
        runs = [
            (n, kind, protocol)
            for n in a.ns
            for kind in kinds
            for protocol in a.protocols
            if protocol == "json" or kind.startswith("gateway")
        ]
        for n, kind, protocol in runs:
            if time.time() + 30 > deadline:
                print("global deadline reached", flush=True)
                break
            profile = (
                {"rate": a.profile_rate}
                if (spy_ok and kind in prof_keys and n == max(a.ns) and protocol == "json")
                else None
            )
            try:
                r = await bench_server(a, kind, n, tmp, exe, a.ladder, deadline, profile, protocol)
            except Exception as exc:
                r = {"server": kind, "N": n, "protocol": protocol, "error": repr(exc), "steps": []}
                print(f"[{kind}/{protocol} N={n}] ERROR {exc!r} (logs in {tmp})", flush=True)
            res["runs"].append(r)
            if profile and profile.get("raw"):
                summary = summarize_profile(profile["raw"])
                res[prof_keys[kind]] = {"step": profile["step"], "summary": summary}
                prof_paths[kind].parent.mkdir(parents=True, exist_ok=True)
                prof_paths[kind].write_text(profile["raw"])
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(res, indent=1))
    finally:
        stop_all()
    res["env"]["loadavg_end"] = os.getloadavg()
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(res, indent=1))
    if a.redis_block:
        write_redis_block(out, "\n".join(render_redis_block(res)))
    elif a.protobuf_block:
        write_redis_block(out, "\n".join(render_protobuf_block(res)), PB_START, PB_END)
    else:
        write_section(out, render(res))
    print(f"wrote {out} and {json_path}; logs in {tmp}", flush=True)
    if not a.keep_tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        default=str(ROOT / "docs" / "PERFORMANCE.md"),
        help="markdown file; only the fanout section is replaced",
    )
    ap.add_argument(
        "--json",
        default="",
        help="raw results (default: <out dir>/perf/fanout-results.json; --redis-block: fanout-redis-results.json)",
    )
    ap.add_argument(
        "--redis-block",
        action="store_true",
        help=f"write only the Redis-engine block of the section (default servers: gateway,{REDIS2})",
    )
    ap.add_argument(
        "--protobuf-block",
        action="store_true",
        help="write only the Protobuf-vs-JSON block of the section (default servers: gateway)",
    )
    ap.add_argument(
        "--protocol",
        default="json,protobuf",
        help="comma list of subscriber protocols (json, protobuf); Protobuf runs the gateway kinds only",
    )
    ap.add_argument("--quick", action="store_true", help="N=1000 only, short rungs, short ladder")
    ap.add_argument("--ns", default="", help="comma list of subscriber counts (default 1000,5000)")
    ap.add_argument("--ladder", default="", help="comma list of offered deliveries/s")
    ap.add_argument(
        "--servers", default="", help=f"subset of baseline,gateway,gateway-history,{REDIS2},nchan"
    )
    ap.add_argument(
        "--with-nchan", action="store_true", help="apt-get install nginx + libnginx-mod-nchan if missing"
    )
    ap.add_argument(
        "--no-nchan", dest="nchan_if_installed", action="store_false", help="skip nchan even if installed"
    )
    ap.add_argument("--warm", type=float, default=1.5)
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--drain", type=float, default=2.0)
    ap.add_argument("--http-conns", type=int, default=8, help="keep-alive connections of the HTTP publisher")
    ap.add_argument(
        "--profile-rate", type=int, default=200_000, help="offered deliveries/s of the py-spy rung (0 = none)"
    )
    ap.add_argument("--budget-s", type=float, default=1800, help="global deadline (JSON + Protobuf runs)")
    ap.add_argument(
        "--keep-tmp", action="store_true", help="keep the temp dir (configs, server logs, client binary)"
    )
    a = ap.parse_args()
    if a.redis_block and a.protobuf_block:
        ap.error("--redis-block and --protobuf-block write different blocks: pick one")
    if a.redis_block and not a.servers:
        a.servers = f"gateway,{REDIS2}"
    if a.protobuf_block and not a.servers:
        a.servers = "gateway"
    a.protocols = [x for x in a.protocol.split(",") if x]
    if not a.protocols or any(x not in PROTOCOLS for x in a.protocols):
        ap.error(f"--protocol takes a comma list of {', '.join(PROTOCOLS)}")
    if a.protobuf_block and a.protocols != list(PROTOCOLS):
        ap.error("--protobuf-block compares json with protobuf: leave --protocol at its default")
    if a.redis_block and "--protocol" not in sys.argv:
        a.protocols = ["json"]  # the Redis block compares engines, on JSON
    a.ns = [int(x) for x in a.ns.split(",")] if a.ns else ([1000] if a.quick else [1000, 5000])
    if a.ladder:
        a.ladder = [int(float(x)) for x in a.ladder.split(",")]
    else:
        a.ladder = [25_000, 50_000, 100_000, 200_000, 400_000] if a.quick else LADDER
    if a.quick:
        a.warm, a.window, a.drain = min(a.warm, 1.0), min(a.window, 3.0), min(a.drain, 1.5)
    if not all(0 < n <= 20_000 for n in a.ns) or len(a.ladder) > 20:
        ap.error("N must be in 1..20000 and the ladder at most 20 rungs")

    def on_alarm(*_: Any) -> None:
        raise SystemExit("hard budget exceeded")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit("terminated")))
    signal.alarm(int(a.budget_s) + 180)
    import uvloop

    try:
        return uvloop.run(amain(a))
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
