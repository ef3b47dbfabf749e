# ruff: noqa: E501, RUF005  (markdown tables are long lines; list building reads better with +)
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
import datetime as dt
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from taskcast.dev.procs import free_port  # noqa: E402

PY = sys.executable
HOST = "127.0.0.1"
SERVER_CPU = 0
LOAD_CPU = 1
API_KEY = "bench-key"
CHANNEL = "bench"
MSG_LEN = 200
LADDER = [25_000, 50_000, 75_000, 100_000, 125_000, 150_000, 200_000, 300_000, 400_000, 600_000, 800_000]
NCHAN_MODULE = "/usr/lib/nginx/modules/ngx_nchan_module.so"
START, END = "<!-- fanout:start -->", "<!-- fanout:end -->"
NOTES_START, NOTES_END = "<!-- fanout:notes:start -->", "<!-- fanout:notes:end -->"
REDIS_START, REDIS_END = "<!-- fanout:redis:start -->", "<!-- fanout:redis:end -->"
PB_START, PB_END = "<!-- fanout:protobuf:start -->", "<!-- fanout:protobuf:end -->"
PROTOCOLS = ("json", "protobuf")
NOTES_DEFAULT = (
    "_Hand-written analysis goes here; the benchmark keeps this block when it regenerates the section._"
)
mono = time.monotonic_ns

STARTED: list[subprocess.Popen[Any]] = []  # every child this script started (and only those)


def make_data(seq: int) -> bytes:
    """200 bytes of JSON; the send time (CLOCK_MONOTONIC ns, 19 digits) is the first field."""
    head = b'{"t":"%019d","seq":"%09d","pad":"' % (mono(), seq)
    return head + b"x" * (MSG_LEN - len(head) - 2) + b'"}'


assert len(make_data(1)) == MSG_LEN


# --------------------------------------------------------------------------------- processes


def popen(cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
    p = subprocess.Popen(cmd, **kw)
    STARTED.append(p)
    return p


def stop(p: subprocess.Popen[Any] | None, sig: int = signal.SIGTERM) -> None:
    if p is None or p.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        p.send_signal(sig)
    try:
        p.wait(8)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(5)


def wait_or_stop(p: subprocess.Popen[Any], timeout: float) -> None:
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        stop(p, signal.SIGINT)


def stop_all() -> None:
    for p in reversed(STARTED):
        stop(p)


class Server:
    """The process(es) whose CPU and RSS count as "server": ``p`` (the one published to; py-spy
    target) plus ``extra`` named processes (the second gateway node, redis-server)."""

    def __init__(self, popen_: subprocess.Popen[Any], children: bool = False, name: str = "server") -> None:
        self.p = popen_
        self.ps = psutil.Process(popen_.pid)
        self.children = children
        self.name = name
        self.extra: list[tuple[str, subprocess.Popen[Any], psutil.Process]] = []
        self.port2 = 0  # the second node's port (0: one node)

    def add(self, name: str, popen_: subprocess.Popen[Any]) -> None:
        self.extra.append((name, popen_, psutil.Process(popen_.pid)))

    def procs(self) -> list[psutil.Process]:
        ps = [self.ps]
        if self.children:
            with contextlib.suppress(psutil.Error):
                ps += self.ps.children(recursive=True)
        return ps + [x[2] for x in self.extra]

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        with contextlib.suppress(psutil.Error):
            c = p.cpu_times()
            return c.user + c.system
        return 0.0

    def cpu(self) -> float:
        return sum(self._cpu(p) for p in self.procs())

    def cpu_parts(self) -> dict[str, float]:
        """CPU seconds per named process (only meaningful with ``extra``)."""
        main = sum(self._cpu(p) for p in self.procs()[: len(self.procs()) - len(self.extra)])
        return {self.name: main} | {name: self._cpu(ps) for name, _, ps in self.extra}

    def rss(self) -> int:
        r = 0
        for p in self.procs():
            with contextlib.suppress(psutil.Error):
                r += p.memory_info().rss
        return r

    def python_pid(self) -> int:
        return self.p.pid

    def stop(self) -> None:
        stop(self.p)  # the published-to node first, the redis-server last
        for _, p, _ in self.extra:
            stop(p)


#: How long a started server may take to listen / turn healthy: a bound, not an expectation (a
#: process starting beside a test suite on a loaded 2-core machine took over 20 s).
READY_TIMEOUT = 120.0


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = READY_TIMEOUT) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        with socket.socket() as s:
            s.settimeout(0.5)
            try:
                s.connect((HOST, port))
                return True
            except OSError:
                time.sleep(0.1)
    return False


# --------------------------------------------------------------------------------- servers


def gateway_config(
    port: int, history: bool, redis_port: int = 0, node: str = "", compression: bool = False
) -> dict[str, Any]:
    chan: dict[str, Any] = {"allow_subscribe_for_client": True}
    if history:
        chan.update(history_size=100, history_ttl="300s")
    cfg: dict[str, Any] = {
        "http_server": {"address": HOST, "port": port},
        "http_api": {"key": API_KEY},
        "health": {"enabled": True},
        "log": {"level": "error"},
        "client": {"insecure": True},  # defaults otherwise: ping 25 s (answered), queue 1 MiB
        "channel": {"without_namespace": chan},
    }
    if compression:  # permessage-deflate at Centrifugo's defaults (level 1, every message)
        cfg["websocket"] = {"compression": True}
    if redis_port:
        cfg["engine"] = {
            "type": "redis",
            "redis": {"address": f"redis://{HOST}:{redis_port}/0", "prefix": "bench"},
        }
        cfg["node"] = {"name": node}
    return cfg


REDIS2 = "gateway-redis-2nodes"
DEFLATE = "gateway-deflate"
"""The gateway with ``websocket.compression`` on, its subscribers negotiating permessage-deflate
(loadtest/bench_compression.py)."""


def server_kinds(nchan: bool, redis: bool = True) -> list[str]:
    kinds = ["baseline", "gateway", "gateway-history"]
    return kinds + ([REDIS2] if redis else []) + (["nchan"] if nchan else [])


LABEL = {
    "baseline": "websockets.broadcast (baseline)",
    "gateway": "Taskcast gateway",
    "gateway-history": "Taskcast gateway, history on",
    REDIS2: "Taskcast gateway, Redis engine, 2 nodes",
    "nchan": "nginx + nchan (1 worker)",
}


def wait_health(port: int, timeout: float = READY_TIMEOUT) -> bool:
    """GET /health until 200: a Redis-engine node answers 503 until its Redis connections are up."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:  # bounded by `timeout`
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), 1) as s:
            s.settimeout(1)
            s.sendall(f"GET /health HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                return True
        time.sleep(0.2)
    return False


def start_redis2(tmp: Path, log: Any, pin: list[str]) -> tuple[Server, int]:
    """A throwaway redis-server (no persistence) and two gateway nodes on it, all pinned to CPU 0.
    Node A is published to (and profiled); the subscribers are split over A and B."""
    rport = free_port()
    redis = popen(
        pin
        + ["redis-server", "--port", str(rport), "--bind", HOST, "--save", "", "--appendonly", "no"]
        + ["--dir", str(tmp), "--loglevel", "warning", "--daemonize", "no"],
        stdout=log,
        stderr=log,
    )
    if not wait_port(rport, redis):
        stop(redis)
        raise RuntimeError(f"redis-server: port {rport} not listening (see {log.name})")
    nodes: list[tuple[subprocess.Popen[Any], int]] = []
    for name in ("a", "b"):
        port = free_port()
        cfg = tmp / f"{REDIS2}-{name}.json"
        cfg.write_text(json.dumps(gateway_config(port, False, rport, f"node-{name}"), indent=1))
        cmd = pin + [PY, "-m", "taskcast", "gateway", "--config", str(cfg)]
        nodes.append((popen(cmd, cwd=ROOT, stdout=log, stderr=log), port))
    srv = Server(nodes[0][0], name="node-a")
    srv.add("node-b", nodes[1][0])
    srv.add("redis", redis)
    for p, port in nodes:
        if not (wait_port(port, p) and wait_health(port)):
            srv.stop()
            raise RuntimeError(f"{REDIS2}: node on {port} not ready (see {log.name})")
    srv.port2 = nodes[1][1]
    time.sleep(0.5)
    return srv, nodes[0][1]


def start_server(kind: str, tmp: Path, log: Any) -> tuple[Server, int]:
    port = free_port()
    pin = ["taskset", "-c", str(SERVER_CPU)]
    if kind == REDIS2:
        return start_redis2(tmp, log, pin)
    if kind == "baseline":
        p = popen(
            pin + [PY, str(HERE / "baseline_ws_broadcast.py"), "--port", str(port)], stdout=log, stderr=log
        )
        srv = Server(p)
    elif kind.startswith("gateway"):
        cfg = tmp / f"{kind}.json"
        config = gateway_config(port, kind == "gateway-history", compression=kind == DEFLATE)
        cfg.write_text(json.dumps(config, indent=1))
        cmd = pin + [PY, "-m", "taskcast", "gateway", "--config", str(cfg)]
        p = popen(cmd, cwd=ROOT, stdout=log, stderr=log)
        srv = Server(p)
    elif kind == "nchan":
        conf = (HERE / "nchan.conf.tmpl").read_text()
        conf = conf.replace("@RUN@", str(tmp)).replace("@PORT@", str(port)).replace("@MODULE@", NCHAN_MODULE)
        cpath = tmp / "nchan.conf"
        cpath.write_text(conf)
        p = popen(
            pin + ["nginx", "-p", str(tmp), "-c", str(cpath), "-g", "daemon off;"], stdout=log, stderr=log
        )
        srv = Server(p, children=True)
    else:
        raise ValueError(kind)
    if not wait_port(port, p):
        stop(p)
        raise RuntimeError(f"{kind}: port {port} not listening (see {log.name})")
    time.sleep(0.5)
    return srv, port


def nchan_available(install: bool) -> bool:
    if shutil.which("nginx") and os.path.exists(NCHAN_MODULE):
        return True
    if not install:
        return False
    print("installing nginx + libnginx-mod-nchan (apt-get)", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "nginx", "libnginx-mod-nchan"],
    ):
        try:
            subprocess.run(cmd, env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"nchan skipped: {exc}", flush=True)
            return False
    # the package enables a system nginx on port 80; we never touch it, we run our own instance
    return bool(shutil.which("nginx")) and os.path.exists(NCHAN_MODULE)


# --------------------------------------------------------------------------------- load client


def build_client(tmp: Path) -> Path:
    exe = tmp / "fanout_client"
    cmd = ["gcc", "-O2", "-o", str(exe), str(HERE / "fanout_client.c"), "-lz"]
    subprocess.run(cmd, check=True, timeout=120)
    return exe


def start_client(
    exe: Path, port: int, n: int, proto: str, path: str, port2: int = 0, deflate: bool = False
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """One C client process; with ``port2`` its odd connections go to the second node, so the
    deliveries and the latency percentiles come out already merged (from all samples); with
    ``deflate`` every connection offers permessage-deflate."""
    cmd = (
        [
            "taskset",
            "-c",
            str(LOAD_CPU),
            str(exe),
            "--port",
            str(port),
            "-n",
            str(n),
            "--proto",
            proto,
            "--path",
            path,
        ]
        + (["--port2", str(port2)] if port2 else [])
        + (["--deflate"] if deflate else [])
    )
    c = popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert c.stdout is not None
    line = c.stdout.readline()  # bounded: the client gives up on handshakes after 30 s per batch
    if not line:
        raise RuntimeError("load client exited before connecting")
    return c, json.loads(line)


def client_cmd(c: subprocess.Popen[str], text: str) -> None:
    assert c.stdin is not None
    with contextlib.suppress(OSError):
        c.stdin.write(text + "\n")
        c.stdin.flush()


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


# --------------------------------------------------------------------------------- profile summary


def _frame(f: str, line: bool) -> str:
    """'flush (/work/main/gateway/connection/client.py:523)' -> 'Client.flush (gateway/connection/client.py:523)'-ish, short path."""
    if " (" not in f:
        return f
    name, loc = f.split(" (", 1)
    loc = loc.rstrip(")").replace(str(ROOT) + "/", "").split("site-packages/")[-1]
    return f"{name} ({loc if line else loc.rsplit(':', 1)[0]})"


def summarize_profile(raw: str, top: int = 16) -> dict[str, Any]:
    """py-spy raw (collapsed) stacks -> self share per source line, inclusive share per gateway function."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, cnt = line.rpartition(" ")
        if not stack or not cnt.isdigit():
            continue
        c = int(cnt)
        total += c
        frames = stack.split(";")
        self_c[_frame(frames[-1], True)] += c
        for f in {_frame(x, False) for x in frames}:
            if "(gateway/" in f:
                incl[f] += c

    def share(cn: Counter[str]) -> list[tuple[str, float]]:
        return [(f, round(100 * v / total, 1)) for f, v in cn.most_common(top)] if total else []

    return {"samples": total, "self": share(self_c), "inclusive": share(incl)}


# --------------------------------------------------------------------------------- report


def env_info() -> dict[str, Any]:
    def ver(mod: str) -> str | None:
        try:
            from importlib.metadata import version

            return version(mod)
        except Exception:
            return None

    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    nginx_v = (
        subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
        if shutil.which("nginx")
        else None
    )
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git,
        "python": platform.python_version(),
        "websockets": ver("websockets"),
        "uvicorn": ver("uvicorn"),
        "uvloop": ver("uvloop"),
        "orjson": ver("orjson"),
        "nginx": nginx_v,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "loadavg_start": os.getloadavg(),
    }


def ok_steps(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in run.get("steps", []) if not s.get("saturated")]


def f_int(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else ("–" if v is None else str(v))


def f_ms(v: Any) -> str:
    return "–" if v is None or v < 0 else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def json_runs(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of the main tables: JSON subscribers (the Protobuf ones have their own block)."""
    return [r for r in res["runs"] if "error" not in r and r.get("protocol", "json") == "json"]


def render(res: dict[str, Any]) -> str:
    e, p = res["env"], res["params"]
    runs = json_runs(res)
    L: list[str] = [START, "", "## Fan-out: one hot channel, N WebSocket subscribers", ""]
    L += [
        f"Generated by `make bench-fanout` (`loadtest/bench_fanout.py`) on {e['date']}, git `{e['git']}`"
        f"{' — **quick run**' if p['quick'] else ''}. Raw results: `{p['json_rel']}`.",
        "",
    ]
    L += [
        "### Method",
        "",
        f"- Machine: {e['cores']} vCPU ({e['cpu']}), {e['mem_gib']} GiB, Linux {e['kernel']}, Python {e['python']}, "
        f"websockets {e['websockets']}, uvicorn {e['uvicorn']}, uvloop {e['uvloop']}, orjson {e['orjson']}"
        f"{', ' + e['nginx'] if e.get('nginx') else ''}. Load average at start: "
        f"{', '.join(f'{x:.2f}' for x in e['loadavg_start'])}.",
        "- Everything on 127.0.0.1. Server pinned to CPU 0; load client and publisher pinned to CPU 1 "
        "(the method of ../shared/PERFORMANCE-ANCHORS.md, so the numbers are comparable with it).",
        "- Subscribers: `loadtest/fanout_client.c`, one epoll thread, reads promptly (the worst case for the server), "
        "splits every frame on `\\n` (the gateway joins a tick's pushes into one frame), counts every publication, "
        "takes latency on 1 connection in 10 from the CLOCK_MONOTONIC send time at the start of the 200-byte payload, "
        "answers Centrifugo pings (`{}`) and WebSocket pings. Each sends the Centrifugo connect + subscribe in one frame "
        "(`client.insecure: true`, `channel.without_namespace.allow_subscribe_for_client: true`).",
        "- Gateway: `python -m taskcast gateway --config …` exactly as shipped (uvicorn, uvloop, httptools); "
        "history off, then on (`history_size` 100, `history_ttl` 300 s); default ping (25 s) and `client.queue_max_size` (1 MiB).",
        f"- Publisher: gateway and nchan by `POST /api/publish` (`X-API-Key`) / `POST /pub` over {p['http_conns']} "
        "keep-alive HTTP/1.1 connections, open loop (a publication waits only for a free connection). The baseline "
        "(`loadtest/baseline_ws_broadcast.py`: `websockets` 17 asyncio server on uvloop, `broadcast()` of the same push "
        "envelope, one frame serialised per connection) is published to over one WebSocket, fire and forget — cheaper "
        "for the baseline than an HTTP API.",
        f"- Ladder of offered deliveries/s: {', '.join(f'{x // 1000}k' for x in p['ladder'])}; publishes/s = offered / N. "
        f"Each rung: {p['warm']} s warm-up, {p['window']} s measured window, {p['drain']} s drain. Stop at the first "
        "saturated rung: delivered < 90 % of offered, publish rate < 90 % of target, p99 > 1 s, or connections closed.",
        "- Server CPU: psutil user+sys of the server process (nginx: master + worker; Redis engine, 2 nodes: both "
        "gateway processes + redis-server, all on CPU 0) over the window. "
        "*Deliveries per CPU-second* = deliveries in the window / server CPU seconds in the window.",
        "- Idle RSS per connection: server RSS after N subscribed connections and 2 s idle, minus RSS before, / N.",
        "- `busy` = whole-CPU utilisation (CPU 0, CPU 1) during the window, from /proc/stat: CPU 0 busy well above "
        "the server's own CPU % means other work shared the core.",
        "",
    ]
    ns = sorted({r["N"] for r in runs})
    for n in ns:
        L += [f"### N = {n:,}", ""]
        L += [
            "| Server | idle RSS/conn | sustained delivered/s (p50 / p99 ms) | peak delivered/s | stopped because |",
            "|---|---|---|---|---|",
        ]
        for r in [r for r in runs if r["N"] == n]:
            ok = ok_steps(r)
            best = max(ok, key=lambda s: s["delivered_per_s"]) if ok else None
            peak = max(r["steps"], key=lambda s: s["delivered_per_s"]) if r["steps"] else None
            L.append(
                f"| {LABEL[r['server']]} | {r.get('rss_per_conn_kib', '–')} KiB | "
                + (
                    f"{best['delivered_per_s']:,} ({f_ms(best['p50_ms'])} / {f_ms(best['p99_ms'])})"
                    if best
                    else "–"
                )
                + f" | {f_int(peak['delivered_per_s']) if peak else '–'} | {r.get('stopped', 'end of ladder')} |"
            )
        L += [
            "",
            "Per rung:",
            "",
            "| Server | offered/s | pub/s | delivered/s | p50 ms | p99 ms | server CPU % | deliveries / CPU-s | µs / delivery | client CPU % | busy CPU0/CPU1 % |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in [r for r in runs if r["N"] == n]:
            for s in r["steps"]:
                sat = " ⚠" if s.get("saturated") else ""
                L.append(
                    f"| {LABEL[r['server']]} | {s['offered_per_s']:,}{sat} | {s['pub_rate']:,.0f} | {s['delivered_per_s']:,} | "
                    f"{f_ms(s['p50_ms'])} | {f_ms(s['p99_ms'])} | {s['server_cpu_pct']} | {f_int(s['deliveries_per_cpu_s'])} | "
                    f"{s['server_us_per_delivery']} | {s['client_cpu_pct']} | {'/'.join(f'{x:.0f}' for x in s['cpu_busy_pct'][:2])} |"
                )
        L += ["", "⚠ = saturated rung (the ladder stopped there).", ""]
        L += ratio_lines(runs, n)
    L += targets(runs)
    L += render_redis_block(res) if any(r["server"] == REDIS2 for r in runs) else [REDIS_START, REDIS_END, ""]
    L += render_protobuf_block(res) if has_protobuf(res) else [PB_START, PB_END, ""]
    L += ["### Analysis: what limits us, and what to change", "", NOTES_START, NOTES_DEFAULT, NOTES_END, ""]
    L += profile_lines(
        res.get("profile"),
        "### Where the gateway's CPU goes (py-spy)",
        "the gateway (history off)",
        p["profile_rel"],
    )
    L += [
        "### Reproduce",
        "",
        "```",
        "make bench-fanout                                              # full run (JSON + Protobuf), ≈25–30 min, writes this section",
        ".venv/bin/python loadtest/bench_fanout.py --quick --out /tmp/perf.md   # N=1000, short rungs",
        ".venv/bin/python loadtest/bench_fanout.py --with-nchan --out docs/PERFORMANCE.md   # also apt-get nginx+nchan",
        ".venv/bin/python loadtest/bench_fanout.py --protobuf-block --out docs/PERFORMANCE.md   # only the Protobuf block",
        ".venv/bin/python loadtest/bench_fanout.py --redis-block --ns 5000 --servers baseline,gateway,gateway-redis-2nodes "
        "--out docs/PERFORMANCE.md   # only the Redis block",
        "```",
        "",
        "Options and caveats: `loadtest/README.md`.",
        "",
        END,
    ]
    return "\n".join(L)


def profile_lines(prof: dict[str, Any] | None, title: str, what: str, rel: str) -> list[str]:
    if not prof or not prof.get("summary", {}).get("samples"):
        return []
    s, sm = prof["step"], prof["summary"]
    L = [
        title,
        "",
        f"`py-spy record --nonblocking --rate 250` on {what}, N = {s['N']:,}, one extra rung at "
        f"{s['offered_per_s']:,} offered deliveries/s ({s['pub_rate']:.0f} publishes/s): delivered {s['delivered_per_s']:,}/s, "
        f"server CPU {s['server_cpu_pct']} %{cpu_parts_text(s)}, p99 {f_ms(s['p99_ms'])} ms. {sm['samples']:,} non-idle samples "
        "(percentages are of those; time in uvloop/kernel C code is charged to the calling Python line).",
        "",
        "| Source line (self time) | % | | Gateway function (inclusive) | % |",
        "|---|---|---|---|---|",
    ]
    for i in range(max(len(sm["self"]), len(sm["inclusive"]))):
        a_ = sm["self"][i] if i < len(sm["self"]) else ("", "")
        b_ = sm["inclusive"][i] if i < len(sm["inclusive"]) else ("", "")
        L.append(f"| `{a_[0]}` | {a_[1]} | | `{b_[0]}` | {b_[1]} |")
    return L + ["", f"Collapsed stacks: `{rel}` (open with speedscope or flamegraph.pl).", ""]


def cpu_parts_text(s: dict[str, Any]) -> str:
    parts = s.get("server_cpu_parts_pct")
    return f" ({' + '.join(f'{k} {v}' for k, v in parts.items())})" if parts else ""


def pooled(steps: list[dict[str, Any]]) -> float:
    """Deliveries per CPU-second over several rungs: all deliveries / all CPU (equal windows)."""
    cpu = sum(s["server_cpu_pct"] for s in steps) / 100
    return sum(s["delivered_per_s"] for s in steps) / cpu if cpu > 0 else 0.0


def redis_compare(runs: list[dict[str, Any]], n: int) -> dict[str, Any] | None:
    """The Redis 2-node run against the memory engine (``gateway``) of the same run, same N."""
    mem = next((r for r in runs if r["N"] == n and r["server"] == "gateway"), None)
    red = next((r for r in runs if r["N"] == n and r["server"] == REDIS2), None)
    if mem is None or red is None:
        return None
    msteps = {s["offered_per_s"]: s for s in ok_steps(mem)}
    rows = [(msteps[s["offered_per_s"]], s) for s in ok_steps(red) if s["offered_per_s"] in msteps]
    out: dict[str, Any] = {"mem": mem, "red": red, "rows": rows}
    if rows:
        out["pooled_mem"], out["pooled_red"] = pooled([m for m, _ in rows]), pooled([r for _, r in rows])
        out["ratio"] = out["pooled_red"] / out["pooled_mem"] if out["pooled_mem"] else 0.0
        out["per_rung"] = [r["deliveries_per_cpu_s"] / m["deliveries_per_cpu_s"] for m, r in rows]
    return out


def baseline_text(runs: list[dict[str, Any]], n: int) -> str:
    base = next((r for r in runs if r["N"] == n and r["server"] == "baseline"), None)
    ok = ok_steps(base) if base else []
    if not ok:
        return ""
    top = max(ok, key=lambda s: s["delivered_per_s"])
    return (
        f" For scale, `websockets.broadcast()` (baseline) in this run: sustained {top['delivered_per_s']:,}/s at "
        f"{f_int(top['deliveries_per_cpu_s'])} deliveries/CPU-s."
    )


def render_redis_block(res: dict[str, Any]) -> list[str]:
    """The Redis engine + 2 nodes subsection (between its own markers, so a ``--redis-block`` run
    can replace it alone)."""
    e, p = res["env"], res["params"]
    runs = json_runs(res)
    L = [REDIS_START, "", "### Redis engine, two gateway nodes, against the memory engine (issue 4)", ""]
    L += [
        f"Measured on {e['date']}, git `{e['git']}`, {'**quick run**, ' if p['quick'] else ''}load average at start "
        f"{', '.join(f'{x:.2f}' for x in e['loadavg_start'])}; servers in this run: {', '.join(p['servers'])}. "
        f"Raw results: `{p['json_rel']}`.",
        "",
        "- Setup: a throwaway `redis-server` (7, `--save '' --appendonly no`) and two gateway processes "
        '(`engine: {"type": "redis", "redis": {"address": …, "prefix": "bench"}}`, history off like the memory-engine '
        "row), **all three pinned to CPU 0**. The publisher posts to node A's server API only; the C client connects "
        "the even-numbered subscribers to node A and the odd ones to node B (N/2 each, one client process, so the "
        "deliveries add up and the percentiles are of the merged samples; latency sampled on 1 in 10 per node). "
        "Each publication goes node A → Lua `PUBLISH` in Redis → both nodes' PUB/SUB connections → their local subscribers.",
        "- **Server CPU counted** for this row: node A + node B + redis-server (user+sys, psutil), against the single "
        "gateway process of the memory engine. Idle RSS/conn is the sum of the three processes' growth / N.",
        "- Ratio = the Redis run's deliveries per server-CPU-second / the memory engine's, pooled over the rungs both "
        "sustain in this run (all deliveries / all CPU-seconds of those rungs); per-rung ratios alongside.",
        "",
    ]
    for n in sorted({r["N"] for r in runs}):
        c = redis_compare(runs, n)
        if c is None:
            continue
        L += [
            f"N = {n:,} (connected per node: {' / '.join(str(x) for x in c['red'].get('connected_per_node') or [])}; "
            f"idle RSS/conn {c['red'].get('rss_per_conn_kib', '–')} KiB vs {c['mem'].get('rss_per_conn_kib', '–')} KiB):",
            "",
            "| offered/s | memory: delivered/s, p50/p99 ms, CPU %, deliveries/CPU-s | Redis 2 nodes: delivered/s, p50/p99 ms, "
            "CPU % (node A + node B + redis), deliveries/CPU-s | node A / node B delivered/s, p99 ms | ratio |",
            "|---|---|---|---|---|",
        ]
        for m, r in c["rows"]:
            sides = " / ".join(f"{x['delivered_per_s']:,} ({f_ms(x['p99_ms'])})" for x in r.get("sides", []))
            L.append(
                f"| {m['offered_per_s']:,} | {m['delivered_per_s']:,}, {f_ms(m['p50_ms'])}/{f_ms(m['p99_ms'])}, "
                f"{m['server_cpu_pct']} %, {f_int(m['deliveries_per_cpu_s'])} | {r['delivered_per_s']:,}, "
                f"{f_ms(r['p50_ms'])}/{f_ms(r['p99_ms'])}, {r['server_cpu_pct']} %{cpu_parts_text(r)}, "
                f"{f_int(r['deliveries_per_cpu_s'])} | {sides} | "
                f"{r['deliveries_per_cpu_s'] / m['deliveries_per_cpu_s']:.2f}× |"
            )
        ceil = {k: max((s["delivered_per_s"] for s in ok_steps(c[k])), default=0) for k in ("mem", "red")}
        L += [
            "",
            f"Sustained ceiling: memory {ceil['mem']:,}/s ({c['mem'].get('stopped', 'end of ladder')}), "
            f"Redis 2 nodes {ceil['red']:,}/s ({c['red'].get('stopped', 'end of ladder')})."
            + baseline_text(runs, n),
            "",
        ]
    L += ["| Target (issue 4) | Measured | Met? |", "|---|---|---|"]
    for n in sorted({r["N"] for r in runs}):
        c = redis_compare(runs, n)
        if c and c["rows"]:
            pr = c["per_rung"]
            L.append(
                f"| Redis engine, 2 nodes: deliveries per server-CPU-second ≥ 0.7× the memory engine (N = {n:,}) | "
                f"{c['ratio']:.2f}× pooled over {len(pr)} common rungs ({c['pooled_red']:,.0f} vs {c['pooled_mem']:,.0f}); "
                f"per rung {min(pr):.2f}–{max(pr):.2f}× | {'yes' if c['ratio'] >= 0.7 else 'no'} |"
            )
    L += [""]
    L += profile_lines(
        res.get("profile_redis"),
        "#### Where node A's CPU goes (py-spy, Redis engine)",
        "node A (published to; serves N/2 subscribers)",
        p.get("profile_redis_rel", ""),
    )
    return L + [REDIS_END, ""]


def has_protobuf(res: dict[str, Any]) -> bool:
    return any(r.get("protocol") == "protobuf" for r in res["runs"])


def protobuf_pairs(res: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(JSON run, Protobuf run) of the same server kind and N, in run order."""
    ok = [r for r in res["runs"] if "error" not in r]
    pairs = []
    for pb in (r for r in ok if r.get("protocol") == "protobuf"):
        js = next(
            (
                r
                for r in ok
                if r["server"] == pb["server"] and r["N"] == pb["N"] and r.get("protocol", "json") == "json"
            ),
            None,
        )
        if js is not None:
            pairs.append((js, pb))
    return pairs


def ceiling(delivered: int) -> str:
    return f"{delivered:,}/s" if delivered else "no rung sustained"


def render_protobuf_block(res: dict[str, Any]) -> list[str]:
    """The JSON-vs-Protobuf subscribers subsection (issue 17), between its own markers so that a
    ``--protobuf-block`` run can replace it alone."""
    e, p = res["env"], res["params"]
    load_end = e.get("loadavg_end")
    L = [PB_START, "", "### Protobuf subscribers against JSON subscribers (issue 17)", ""]
    L += [
        f"Measured on {e['date']}, git `{e['git']}`, {'**quick run**, ' if p['quick'] else ''}servers "
        f"{', '.join(p['servers'])}. Raw results: `{p['json_rel']}`. Load average (1/5/15 min) at start "
        f"{', '.join(f'{x:.2f}' for x in e['loadavg_start'])}"
        + (f", at the end {', '.join(f'{x:.2f}' for x in load_end)}" if load_end else "")
        + ": **the machine is shared with other jobs and was loaded**, so compare the two protocols of one run "
        "(each Protobuf run follows its JSON run directly), not these figures with other sections.",
        "",
        "- Same server process, publisher and 200-byte payload as the JSON rows. The only change is the subscribers: "
        "the C client offers the `centrifuge-protobuf` subprotocol (a handshake answered without it counts as a "
        "failed connection), sends connect + subscribe as varint-delimited `Command`s in one binary frame, and walks "
        "each varint-delimited `Reply` just enough (`push` → `pub` → `data`) to count the publication and read the "
        "send time at the start of its JSON `data` bytes. Server pings (empty `Reply`) are answered with an empty `Command`.",
        "- Ratio = Protobuf deliveries per server-CPU-second / JSON's at the same offered rate; pooled over the rungs "
        "both sustain (all deliveries / all CPU-seconds of those rungs), or, when there are none, over every rung "
        "both measured. Deliveries per CPU-second stays a cost measure on a saturated rung (CPU the server got, "
        "per delivery), but a server starved of CPU 0 by other work (`server CPU %` far below the `busy` 100 %) "
        "saturates early, so on a loaded machine the ceilings say little.",
        "",
    ]
    for js, pb in protobuf_pairs(res):
        n = js["N"]
        jsteps = {s["offered_per_s"]: s for s in js["steps"]}
        psteps = {s["offered_per_s"]: s for s in pb["steps"]}
        L += [
            f"{LABEL[js['server']]}, N = {n:,} (connected: JSON {js.get('connected', '–')}, Protobuf "
            f"{pb.get('connected', '–')}; idle RSS/conn {js.get('rss_per_conn_kib', '–')} vs "
            f"{pb.get('rss_per_conn_kib', '–')} KiB):",
            "",
            "| offered/s | JSON: delivered/s, p50/p99 ms, server CPU %, deliveries/CPU-s, µs/delivery | "
            "Protobuf: delivered/s, p50/p99 ms, server CPU %, deliveries/CPU-s, µs/delivery | ratio |",
            "|---|---|---|---|",
        ]

        def cell(s: dict[str, Any] | None) -> str:
            if s is None:
                return "–"
            return (
                f"{s['delivered_per_s']:,}{' ⚠' if s.get('saturated') else ''}, {f_ms(s['p50_ms'])}/{f_ms(s['p99_ms'])}, "
                f"{s['server_cpu_pct']} %, {f_int(s['deliveries_per_cpu_s'])}, {s['server_us_per_delivery']}"
            )

        common = []
        for offered in sorted(set(jsteps) | set(psteps)):
            j, b = jsteps.get(offered), psteps.get(offered)
            ratio = "–"
            if j and b and j["deliveries_per_cpu_s"] and b["deliveries_per_cpu_s"]:
                ratio = f"{b['deliveries_per_cpu_s'] / j['deliveries_per_cpu_s']:.2f}×"
                common.append((j, b))
            L.append(f"| {offered:,} | {cell(j)} | {cell(b)} | {ratio} |")
        ceil = {
            k: max((s["delivered_per_s"] for s in ok_steps(r)), default=0)
            for k, r in (("js", js), ("pb", pb))
        }
        pooled_line = ""
        sustained = [(j, b) for j, b in common if not j.get("saturated") and not b.get("saturated")]
        for label, rows in (("both sustain", sustained), ("both measured (saturated ones included)", common)):
            pj, pp = pooled([j for j, _ in rows]), pooled([b for _, b in rows])
            if rows and pj:
                pooled_line = (
                    f" Pooled over the {len(rows)} rung(s) {label}: Protobuf {pp:,.0f} vs JSON {pj:,.0f} "
                    f"deliveries/CPU-s = {pp / pj:.2f}×."
                )
                break
        L += [
            "",
            f"Sustained ceiling: JSON {ceiling(ceil['js'])} ({js.get('stopped', 'end of ladder')}), Protobuf "
            f"{ceiling(ceil['pb'])} ({pb.get('stopped', 'end of ladder')}).{pooled_line}",
            "",
        ]
    L += ["⚠ = saturated rung (its ladder stopped there).", ""]
    failed = [r for r in res["runs"] if r.get("protocol") == "protobuf" and "error" in r]
    L += [f"- {LABEL[r['server']]} N = {r['N']:,}, Protobuf: run failed: `{r['error']}`" for r in failed]
    return L + ([""] if failed else []) + [PB_END, ""]


def ratio_lines(runs: list[dict[str, Any]], n: int) -> list[str]:
    base = next((r for r in runs if r["N"] == n and r["server"] == "baseline"), None)
    if base is None:
        return []
    bsteps = {s["offered_per_s"]: s for s in ok_steps(base)}
    L = [
        f"Ratios against the baseline measured in this run (N = {n:,}); deliveries per server-CPU-second at the same "
        "offered load (rungs where both are unsaturated):",
        "",
        "| Server | " + " | ".join(f"{o // 1000}k" for o in sorted(bsteps)) + " | sustained ceiling |",
        "|---|" + "---|" * (len(bsteps) + 1),
    ]
    bbest = max((s["delivered_per_s"] for s in bsteps.values()), default=0)
    for r in [r for r in runs if r["N"] == n and r["server"] != "baseline"]:
        mine = {s["offered_per_s"]: s for s in ok_steps(r)}
        cells = []
        for o in sorted(bsteps):
            if o in mine and mine[o]["deliveries_per_cpu_s"] and bsteps[o]["deliveries_per_cpu_s"]:
                cells.append(f"{mine[o]['deliveries_per_cpu_s'] / bsteps[o]['deliveries_per_cpu_s']:.2f}×")
            else:
                cells.append("–")
        best = max((s["delivered_per_s"] for s in mine.values()), default=0)
        ceil = f"{best / bbest:.1f}× ({best:,} vs {bbest:,})" if bbest else "–"
        L.append(f"| {LABEL[r['server']]} | " + " | ".join(cells) + f" | {ceil} |")
    return L + [""]


def targets(runs: list[dict[str, Any]]) -> list[str]:
    L = ["### Targets (issue 2)", "", "| Target | Measured | Met? |", "|---|---|---|"]
    nmax = max((r["N"] for r in runs), default=0)
    gw = next((r for r in runs if r["N"] == nmax and r["server"] == "gateway"), None)
    base = next((r for r in runs if r["N"] == nmax and r["server"] == "baseline"), None)
    if gw and base:
        bst = {s["offered_per_s"]: s for s in ok_steps(base)}
        common = [s for s in ok_steps(gw) if s["offered_per_s"] in bst]
        if common:
            top = max(common, key=lambda s: s["offered_per_s"])
            ratio = top["deliveries_per_cpu_s"] / bst[top["offered_per_s"]]["deliveries_per_cpu_s"]
            gpeak = max(s["deliveries_per_cpu_s"] or 0 for s in ok_steps(gw))
            bpeak = max(s["deliveries_per_cpu_s"] or 0 for s in bst.values())
            L.append(
                f"| deliveries per server-CPU-second ≥ 2× raw `websockets.broadcast()` at N = {nmax:,} | "
                f"{ratio:.2f}× at {top['offered_per_s']:,}/s offered (highest rung both sustain: "
                f"{top['deliveries_per_cpu_s']:,} vs {bst[top['offered_per_s']]['deliveries_per_cpu_s']:,}); best "
                f"sustained rung of each: {gpeak:,} vs {bpeak:,} = {gpeak / bpeak:.2f}× | "
                f"{'yes' if ratio >= 2 else 'no'} |"
            )
    for n in sorted({r["N"] for r in runs}):
        g = next((r for r in runs if r["N"] == n and r["server"] == "gateway"), None)
        s100 = next((s for s in (g or {}).get("steps", []) if s["offered_per_s"] == 100_000), None)
        if s100:
            good = not s100.get("saturated") and s100["p99_ms"] <= 100
            L.append(
                f"| p99 ≤ 100 ms at 100k deliveries/s (N = {n:,}) | p99 {f_ms(s100['p99_ms'])} ms, p50 "
                f"{f_ms(s100['p50_ms'])} ms, delivered {s100['delivered_per_s']:,}/s | {'yes' if good else 'no'} |"
            )
        if g and "rss_per_conn_kib" in g:
            L.append(
                f"| RSS per idle connection ≤ 16 KiB (N = {n:,}) | {g['rss_per_conn_kib']} KiB | "
                f"{'yes' if g['rss_per_conn_kib'] <= 16 else 'no'} |"
            )
    return L + [""]


def replace_block(text: str, start: str, end: str, block: str) -> str:
    pre, rest = text.split(start, 1)
    return pre + block + rest.split(end, 1)[1]


def write_redis_block(out: Path, block: str, start: str = REDIS_START, end: str = REDIS_END) -> None:
    """``--redis-block`` (``--protobuf-block`` with PB markers): replace only that subsection of the
    fan-out section (or insert it before the analysis notes), leaving the rest of the section as
    the last full run wrote it."""
    text = out.read_text() if out.exists() else ""
    if start in text and end in text:
        text = replace_block(text, start, end, block.rstrip("\n"))
    elif START in text and END in text:
        anchor = "### Analysis: what limits us" if "### Analysis: what limits us" in text else END
        pre, post = text.split(anchor, 1)
        text = pre + block + "\n" + anchor + post
    else:
        text = text.rstrip("\n") + "\n\n" + START + "\n\n" + block + "\n" + END + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def write_section(out: Path, section: str) -> None:
    """Replace only our section of ``out``; keep the hand-written notes block inside it, and the
    Redis block when this run did not measure the Redis engine."""
    if out.exists():
        text = out.read_text()
        for start, end in ((REDIS_START, REDIS_END), (PB_START, PB_END)):
            empty = start + "\n" + end
            if empty in section and start in text and end in text:
                kept = text.split(start, 1)[1].split(end, 1)[0]
                section = section.replace(empty, start + kept + end)
        if NOTES_START in text and NOTES_END in text:
            notes = text.split(NOTES_START, 1)[1].split(NOTES_END, 1)[0].strip("\n")
            section = section.replace(NOTES_START + "\n" + NOTES_DEFAULT, NOTES_START + "\n" + notes)
        if START in text and END in text:
            pre, rest = text.split(START, 1)
            post = rest.split(END, 1)[1]
            text = pre + section + post
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        text = (
            "# Performance\n\nMeasured on the project machine; every section says how to reproduce it. "
            "Targets are from issue 2.\n\n" + section + "\n"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


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
