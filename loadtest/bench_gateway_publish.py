"""Gateway + Redis CPU per publication on the Redis engine, in the capacity model's shape: the
relay's ``/api/batch`` requests (``--batch`` publications each: a ~600-byte task state, an
idempotency key, the relay's tags) to channels with history (deploy/gateway.json's ``task_user``
namespace: history, conflation tag, forced recovery), each channel with ONE WebSocket subscriber
(``--channels`` connections, server-side subscriptions from the token), open loop at ``--rate``
publications/s over ``--http-conns`` keep-alive connections (the relays' loops).

Per tree and round a fresh gateway (deploy/gateway.json, ``PYTHONPATH=<tree>``) on one throwaway
``redis-server`` started here (each round its own key prefix). Measured over ``--window`` seconds
after ``--warmup``: user + system CPU of the gateway process and of redis-server (``/proc``)
divided by the publications answered in the window, in µs; deliveries counted at the clients.
Trees alternate A B B A (``--rounds`` pairs), so the machine's load hits both alike; the report
is the median per tree, with the 1-minute load average at each window's start and end.

    mkdir /tmp/main && git archive main | tar -x -C /tmp/main
    python loadtest/bench_gateway_publish.py --tree main=/tmp/main --tree branch=. --markdown

``--spy SECONDS`` records a py-spy profile (``--spy-dir``) of each round's gateway during its
window (raw collapsed stacks; summarise with loadtest/spy_summary.py). Only loopback processes
it starts; they are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest import abba  # noqa: E402
from loadtest.fleet import HOST, Stats, WSConn, connect_with_backoff, mint  # noqa: E402
from loadtest.procs import clean_env  # noqa: E402
from taskcast.dev.procs import Proc, free_port  # noqa: E402

TENANT = "bench"


def payload(i: int) -> dict[str, Any]:
    """A task.summary-sized state (~600 bytes of JSON)."""
    return {
        "type": "task.summary",
        "taskId": f"t{i:08d}-0000-4000-8000-000000000000",
        "tenantId": TENANT,
        "status": "RUNNING",
        "step": {"key": "render", "label": "Rendering the report", "index": 3, "total": 7},
        "progress": {"current": i % 100, "total": 100, "unit": "pages"},
        "message": f"Rendering page {i % 100} of 100 for the quarterly summary",
        "version": i,
        "updatedAt": "2026-12-02T19:30:00.000Z",
        "createdAt": "2026-12-02T19:00:00.000Z",
        "owner": {"userId": f"u{i}", "display": "Bench User"},
        "labels": {"kind": "report", "priority": "normal", "queue": "default"},
        "attempt": 1,
        "result": None,
        "error": None,
    }


class Publisher:
    """Open loop: every tick, the requests due so far, each ``batch`` publications, over a pool of
    keep-alive connections (one request in flight per connection, as the relay's loops). A
    request's body (``body``, stamped with the send time) is built when a connection is free."""

    def __init__(self, port: int, key: str, channels: int, batch: int, conns: int) -> None:
        self.port, self.key, self.channels, self.batch = port, key, channels, batch
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.conns = conns
        self.seq = 0
        self.published = 0
        self.errors = 0
        self.late = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        for _ in range(self.conns):
            self.idle.put_nowait(await asyncio.open_connection(HOST, self.port))

    def body(self) -> bytes:
        now = str(int(time.time() * 1000))
        commands = []
        for _ in range(self.batch):
            n = self.seq
            self.seq += 1
            channel = f"task_user:{TENANT}/u{n % self.channels}"
            commands.append({"publish": {
                "channel": channel,
                "data": payload(n),
                "idempotency_key": f"t{n}:{n}:{channel}",
                "tags": {"task": f"t{n % self.channels}", "committed_at_ms": now, "published_at_ms": now},
            }})  # fmt: skip
        data = orjson.dumps({"commands": commands})
        return (
            b"POST /api/batch HTTP/1.1\r\nHost: gw\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.key.encode(), len(data), data)
        )

    async def _send(self) -> None:
        reader, writer = await self.idle.get()
        try:
            writer.write(self.body())
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            if head[9:12] == b"200":
                replies = orjson.loads(body)["replies"]
                ok = sum(1 for r in replies if "publish" in r)
                self.published += ok
                self.errors += len(replies) - ok
            else:
                self.errors += self.batch
        finally:
            self.idle.put_nowait((reader, writer))

    async def run(self, rate: float, seconds: float) -> None:
        """Offer ``rate`` publications/s for ``seconds``."""
        interval = self.batch / rate
        start = time.monotonic()
        sent = 0
        while (now := time.monotonic()) - start < seconds:
            due = int((now - start) / interval) + 1
            while sent < due:
                if self.idle.empty():
                    self.late += 1
                task = asyncio.ensure_future(self._send())
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                sent += 1
            await asyncio.sleep(max(0.0, start + sent * interval - time.monotonic()))

    async def drain(self, wait_s: float = 10.0) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=wait_s)

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get_nowait()[1].close()


class Clients:
    def __init__(self) -> None:
        self.received = 0
        self.conns: list[WSConn] = []

    def on_push(self, conn: WSConn, channel: str, pub: dict[str, Any]) -> None:
        self.received += 1

    async def connect(self, secret: str, port: int, channels: int) -> None:
        stats = Stats()
        deadline = time.monotonic() + 60 + channels / 50

        async def one(i: int) -> WSConn:
            token = mint(secret, f"{TENANT}/u{i}", ttl=7200, channels=[f"task_user:{TENANT}/u{i}"])
            conn, _ = await connect_with_backoff(
                lambda attempt: port, {"token": token, "name": "bench"}, self.on_push, deadline, stats,
                initial_jitter=channels / 400,
            )  # fmt: skip
            return conn

        self.conns = list(await asyncio.gather(*(one(i) for i in range(channels))))

    def close(self) -> None:
        for c in self.conns:
            c.abort()


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(200):
        with contextlib.suppress(OSError):
            import socket

            with socket.create_connection((HOST, port), timeout=0.2):
                return proc, f"redis://{HOST}:{port}/0"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def gateway_config(workdir: Path, extra: dict[str, Any]) -> Path:
    base = json.loads((ROOT / "deploy/gateway.json").read_text())
    base.setdefault("client", {})["connection_rate_limit"] = 0
    base["http_api"]["max_batch_commands"] = 1000
    for k, v in extra.items():
        base[k] = v
    path = workdir / "gateway.json"
    path.write_text(json.dumps(base, indent=1))
    return path


def start_gateway(
    tree: str, redis_url: str, workdir: Path, name: str, out: Path, n: int, **env: str
) -> tuple[Proc, int, str, str]:
    """A gateway of ``tree`` (deploy/gateway.json's shape) on the Redis engine at ``redis_url``
    (a key prefix of its own), started: the process (``wait_ready`` it), its port, API key and
    token secret. ``env`` adds to its environment (PYTHONPATH among them)."""
    port, key, secret = free_port(), secrets.token_urlsafe(16), secrets.token_urlsafe(32)
    environ = clean_env(
        CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY=secret,
        CENTRIFUGO_HTTP_API_KEY=key,
        CENTRIFUGO_ENGINE_REDIS_ADDRESS=redis_url,
        CENTRIFUGO_ENGINE_REDIS_PREFIX=f"b{n}{secrets.token_hex(3)}",
        CENTRIFUGO_HTTP_SERVER_ADDRESS="127.0.0.1",
        CENTRIFUGO_HTTP_SERVER_PORT=str(port),
        **env,
    )
    config = gateway_config(workdir, {})
    argv = [sys.executable, "-m", "taskcast", "gateway", "--config", str(config)]
    proc = Proc(name, argv, environ, out, f"http://127.0.0.1:{port}/health", Path(tree.split(os.pathsep)[0]))
    proc.start()
    return proc, port, key, secret


async def one_round(
    name: str, tree: str, a: argparse.Namespace, redis_url: str, redis_pid: int, workdir: Path, n: int
) -> dict[str, Any]:
    proc, port, key, secret = start_gateway(
        tree,
        redis_url,
        workdir,
        f"gateway-{name}-{n}",
        workdir / f"gateway-{name}-{n}.log",
        n,
        PYTHONPATH=tree,
    )
    clients = Clients()
    publisher = Publisher(port, key, a.channels, a.batch, a.http_conns)
    spy: subprocess.Popen[bytes] | None = None
    try:
        proc.wait_ready()
        assert proc.popen is not None
        pid = proc.popen.pid
        await clients.connect(secret, port, a.channels)
        await publisher.open()
        await publisher.run(a.rate, a.warmup)
        if a.spy:
            out = Path(a.spy_dir) / f"{name}-{n}.txt"
            spy_argv = [a.py_spy, "record", "-p", str(pid), "-d", str(int(a.spy)), "-r", "200"]
            spy = subprocess.Popen(  # noqa: ASYNC220  # started once, before the window
                [*spy_argv, "-f", "raw", "-o", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=out.with_suffix(".log").open("wb"),
            )
        l0, p0, r0 = abba.load1(), publisher.published, clients.received
        g0, s0, t0 = abba.cpu_seconds([pid]), abba.cpu_seconds([redis_pid]), time.monotonic()
        await publisher.run(a.rate, a.window)
        await publisher.drain()
        g1, s1, t1 = abba.cpu_seconds([pid]), abba.cpu_seconds([redis_pid]), time.monotonic()
        pubs = publisher.published - p0
        settle = time.monotonic() + 5.0  # deliveries still in flight when the window closed
        while clients.received - r0 < pubs and time.monotonic() < settle:  # noqa: ASYNC110  # polls a counter, bounded
            await asyncio.sleep(0.01)
        recv = clients.received - r0
        if spy is not None:
            spy.wait(timeout=a.spy + 30)
    finally:
        publisher.close()
        clients.close()
        proc.stop()
    return {
        "tree": name,
        "publications": pubs,
        "received": recv,
        "errors": publisher.errors,
        "late": publisher.late,
        "rate": pubs / (t1 - t0),
        "gateway_us": (g1 - g0) / max(pubs, 1) * 1e6,
        "redis_us": (s1 - s0) / max(pubs, 1) * 1e6,
        "load": (l0, abba.load1()),
    }


async def main_async(a: argparse.Namespace, trees: list[tuple[str, str]]) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-gwpub-"))
    redis, redis_url = start_redis(workdir)
    results: list[dict[str, Any]] = []
    try:
        for n, (_, (name, tree)) in enumerate(abba.order(trees, a.rounds)):
            try:
                res = await one_round(name, tree, a, redis_url, redis.pid, workdir, n)
            except (OSError, TimeoutError, RuntimeError) as exc:  # a starved round: skipped, said
                print(json.dumps({"tree": name, "failed": f"{type(exc).__name__}: {exc}"}), flush=True)
                continue
            print(json.dumps(res), flush=True)
            results.append(res)
    finally:
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def report(results: list[dict[str, Any]], a: argparse.Namespace) -> str:
    lines = [
        f"{a.channels} channels × 1 subscriber, `/api/batch` of {a.batch}, {a.rate:g} publications/s "
        f"offered, {a.window:g} s window; µs CPU per publication (median of {a.rounds} rounds per tree)",
        "",
        "| tree | gateway µs/pub | redis µs/pub | gateway+redis | rounds gateway (redis) "
        "| delivered/published | load |",
        "|---|---:|---:|---:|---|---:|---|",
    ]
    for name, m in abba.medians(results, "tree", ["gateway_us", "redis_us"]).items():
        rs = [r for r in results if r["tree"] == name]
        g, s = m["gateway_us"], m["redis_us"]
        rounds = " / ".join(f"{r['gateway_us']:.0f} ({r['redis_us']:.0f})" for r in rs)
        ratio = sum(r["received"] for r in rs) / max(1, sum(r["publications"] for r in rs))
        loads = abba.load_spans(rs)
        lines.append(f"| {name} | {g:.1f} | {s:.1f} | {g + s:.1f} | {rounds} | {ratio:.3f} | {loads} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--tree",
        action="append",
        default=[],
        help="name=path[:extra path...] (the gateway's PYTHONPATH; repeat; default: this tree)",
    )
    p.add_argument("--channels", type=int, default=2000)
    p.add_argument("--batch", type=int, default=4, help="publications per /api/batch request")
    p.add_argument("--rate", type=float, default=1334.0, help="publications/s offered")
    p.add_argument("--http-conns", type=int, default=8)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--window", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2, help="A B, B A, ... (rounds per tree)")
    p.add_argument("--spy", type=float, default=0.0, help="py-spy the gateway for this many seconds")
    p.add_argument("--spy-dir", default="/tmp")
    p.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop what was started (finally blocks)
    a.tree = a.tree or [f"this={ROOT}"]
    trees = [
        (name, os.pathsep.join(str(Path(p).resolve()) for p in paths.split(os.pathsep)))
        for name, paths in (t.split("=", 1) for t in a.tree)
    ]
    results = asyncio.run(main_async(a, trees))
    if a.markdown:
        print(report(results, a))


if __name__ == "__main__":
    main()
