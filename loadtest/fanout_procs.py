# ruff: noqa: RUF005  (command lines read better built with +)
"""The fan-out benchmark's processes (loadtest/bench_fanout.py and the benchmarks built on it:
bench_compression, bench_stalled, bench_workers): the servers under test (the websockets
baseline, gateways with the memory or Redis engine, nginx+nchan), each pinned to ``SERVER_CPU``,
and the C epoll load client (loadtest/fanout_client.c) pinned to ``LOAD_CPU``. Every child started
here is recorded in ``STARTED`` and only those are ever signalled (``stop_all``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fanout_report import REDIS2  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

PY = sys.executable
HOST = "127.0.0.1"
SERVER_CPU = 0
LOAD_CPU = 1
API_KEY = "bench-key"
NCHAN_MODULE = "/usr/lib/nginx/modules/ngx_nchan_module.so"

STARTED: list[subprocess.Popen[Any]] = []  # every child this script started (and only those)

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


DEFLATE = "gateway-deflate"
"""The gateway with ``websocket.compression`` on, its subscribers negotiating permessage-deflate
(loadtest/bench_compression.py)."""


def server_kinds(nchan: bool, redis: bool = True) -> list[str]:
    kinds = ["baseline", "gateway", "gateway-history"]
    return kinds + ([REDIS2] if redis else []) + (["nchan"] if nchan else [])


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
