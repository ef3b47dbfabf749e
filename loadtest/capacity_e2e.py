"""The seed's §15 capacity model end to end: the ``e2e`` and ``idle`` steps of ``bench_capacity.py``.

**e2e** — the production topology (taskcast/dev/topology.py, deploy/ configs): MariaDB + Redis,
``status-api serve --workers W`` (``--e2e-workers``, default 1; one replica), the reconciler, two
relays woken through Redis (deploy/relay.yaml), ``--gateways`` gateways (default one) and nginx,
which the relays publish through (``gateway_api_url`` = its internal listener, as in docker-compose.yml).

* ``--e2e-tasks`` active tasks (default 20,000) created over the Status API's HTTP API (the same
  use-case code as production), owned round robin by ``--users`` users ``bench/u<i>``.
* Subscribers: every user has a **board** connection (its ``task_user`` channel) and, when any of
  its tasks is watched, a **detail** connection subscribed to the ``task_detail`` channels of its
  watched tasks (``--detail-share`` of all tasks, spread evenly). Both subscriptions are
  server-side (the connection token's ``channels``), as the Status API's session tokens do. Every
  event writes a summary and a detail row, so each change reaches 1 + share clients (2 by default;
  measured at the clients as *deliveries per event*). The clients run in this process
  (``fleet.WSConn``), connected straight to the gateways.
* Producers: a separate process (``loadtest/open_loop.py``) sends ``STEP_PROGRESS`` events over
  keep-alive HTTP, open loop, round robin over the tasks (each task about every tasks/rate
  seconds). First ``--rates[0]`` (667/s: 20,000 tasks every 30 s), then the ladder, rung after rung,
  until a rung accepts < 95 % of the offered rate or its p99 commit→visible exceeds 100 ms; when
  the first rate fails, ``--descend`` until a rung holds. The highest rung that held is the ceiling.
* Each rung: once the Status API, the relays and MariaDB are idle (``--settle``: no backlog of an
  earlier rung), ``--warmup`` seconds not measured, then a ``--window``. Reported: accepted events/s
  (answers within the window), HTTP p50/p99, commit→visible p50/p99 (receipt at the client −
  ``tags.committed_at_ms``, the outbox row's commit clock; same machine, same clock) of the events
  committed in the window, deliveries per second and per event, and CPU (user + sys from /proc)
  per accepted event of every process: each Status API worker, each relay, the gateway(s),
  MariaDB, Redis, nginx, the reconciler, the producer and the clients; the 1-minute load average.

**idle** — ``loadtest/bench_idle.py`` as a subprocess (idle connections on one gateway process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_stages
import ingest_http
from fleet import Stats, WSConn, connect_with_backoff, mint, now_ms, pct
from procs import ROOT, cpu_seconds, listener_pid

from taskcast.dev.topology import Topology

TENANT = "bench"
#: What the path costs: the processes the seed's model runs (the load generator and clients apart).
PATH = ("status-api", "relay", "gateway", "mariadb", "redis")
TARGET_P99_MS = 100.0
TARGET_ACCEPTED = 0.95


def watched(j: int, share: float) -> bool:
    """Whether task ``j``'s detail channel has a watcher: ``share`` of the tasks, spread evenly."""
    return int((j + 1) * share) > int(j * share)


class Clients:
    """The subscribers: a board connection per user, a detail connection per user with watched
    tasks. Records (committed_at_ms, receipt ms) of every publication that carries the tag, and
    (committed_at_ms, published_at_ms, receipt ms) where the relay's send time is tagged too."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.staged: list[tuple[float, float, float]] = []
        self.conns: list[WSConn] = []

    def on_push(self, conn: WSConn, channel: str, pub: dict[str, Any]) -> None:
        tags = pub.get("tags") or {}
        committed = tags.get("committed_at_ms")
        if committed is not None:
            now = now_ms()
            self.samples.append((float(committed), now))
            published = tags.get("published_at_ms")
            if published is not None:
                self.staged.append((float(committed), float(published), now))

    async def connect(self, secret: str, ports: list[int], plan: list[list[str]]) -> dict[str, Any]:
        """One connection per channel list of ``plan`` (round robin over ``ports``)."""
        stats = Stats()
        deadline = time.monotonic() + 120 + len(plan) / 100
        t0 = time.monotonic()

        async def one(i: int, channels: list[str]) -> WSConn:
            sub = channels[0].split("/", 1)[1] if channels[0].startswith("task_user:") else f"watcher{i}"
            token = mint(secret, f"{TENANT}/{sub}", ttl=7200, channels=channels)
            conn, _ = await connect_with_backoff(
                lambda attempt: ports[(i + attempt) % len(ports)],
                {"token": token, "name": "bench-capacity"},
                self.on_push,
                deadline,
                stats,
                initial_jitter=len(plan) / 400,  # ~400 handshakes/s, within connection_rate_limit
            )
            return conn

        self.conns = list(await asyncio.gather(*(one(i, ch) for i, ch in enumerate(plan))))
        return {
            "connections": len(self.conns),
            "seconds": round(time.monotonic() - t0, 1),
            "refused_503": stats.refused_503,
        }

    def close(self) -> None:
        for c in self.conns:
            c.abort()


def subscriptions(contexts: list[dict[str, Any]], users: int, share: float) -> list[list[str]]:
    """Each connection's channels: the boards, then the detail connections (task ``j`` is owned by
    ``u<j % users>``)."""
    boards = [[f"task_user:{TENANT}/u{u}"] for u in range(users)]
    details: list[list[str]] = [[] for _ in range(users)]
    for j, ctx in enumerate(contexts):
        if watched(j, share):
            details[j % users].append(f"task_detail:{TENANT}/{ctx['taskId']}")
    return boards + [d for d in details if d]


class Producer:
    """The producer process (loadtest/open_loop.py), one JSON command and answer at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, contexts_file: Path, port: int, conns: int) -> Producer:
        argv = [str(ROOT / "loadtest/open_loop.py"), "--contexts", str(contexts_file)]
        argv += ["--port", str(port), "--conns", str(conns)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
        )
        return cls(proc)

    async def call(self, cmd: dict[str, Any], wait_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), wait_s)
        if not line:
            raise RuntimeError(f"the producer exited ({await self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


def processes(topo: Topology, extra: dict[str, int | None]) -> dict[str, list[int]]:
    """Name → pids whose CPU counts for it: each Status API worker apart (its supervisor only
    forks and watches), every other topology process with its children, and ``extra``."""
    out: dict[str, list[int]] = {}
    for name, proc in topo.procs.items():
        if proc.popen is None:
            continue
        children = [c.pid for c in psutil.Process(proc.popen.pid).children(recursive=True)]
        if name.startswith("status-api") and children:
            out[f"{name} supervisor"] = [proc.popen.pid]
            for n, pid in enumerate(children):
                out[f"{name} worker{n + 1}"] = [pid]
        else:
            out[name] = [proc.popen.pid, *children]
    out.update({name: [pid] for name, pid in extra.items() if pid})
    return out


def group(name: str) -> str:
    """The part of the path a process belongs to (``status-api1 worker2`` → ``status-api``)."""
    return next((g for g in PATH if name.startswith(g)), name)


async def sleep_until(wall: float) -> None:
    delay = wall - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


class Capacity:
    def __init__(self, args: argparse.Namespace, topo: Topology) -> None:
        self.args, self.topo = args, topo
        self.clients = Clients()
        self.pids: dict[str, list[int]] = {}
        self.per_event = 2.0

    async def setup(self) -> tuple[dict[str, Any], Producer]:
        args, topo = self.args, self.topo
        out: dict[str, Any] = {}
        t = time.monotonic()
        contexts = await ingest_http._create(
            topo.status_port, args.e2e_tasks, topo.service_secret, lambda j: f"u{j % args.users}", conns=32
        )
        out["create_tasks_s"] = round(time.monotonic() - t, 1)
        path = topo.workdir / "contexts.json"
        path.write_text(json.dumps(contexts))
        producer = await Producer.start(path, topo.status_port, args.http_conns)
        t = time.monotonic()
        out["first_events"] = await producer.call({"cmd": "start"}, wait_s=1800)
        out["first_events"]["seconds"] = round(time.monotonic() - t, 1)
        plan = subscriptions(contexts, args.users, args.detail_share)
        out["connect"] = await self.clients.connect(topo.hmac_secret, topo.gateway_ports, plan)
        out["board_connections"] = args.users
        out["detail_connections"] = len(plan) - args.users
        out["watched_tasks"] = sum(watched(j, args.detail_share) for j in range(args.e2e_tasks))
        mysql_port = urlsplit(topo.mysql_url).port or 3306
        redis_port = urlsplit(topo.redis_url).port or 6379
        extra = {
            "mariadb": listener_pid(mysql_port),
            "redis": listener_pid(redis_port),
            "producer": producer.proc.pid,
            "clients": os.getpid(),
        }
        self.pids = processes(topo, extra)
        #: Deliveries each event should make: the owner's board, and the watcher of a watched task.
        self.per_event = 1 + out["watched_tasks"] / max(1, args.e2e_tasks)
        return out, producer

    async def drain(self, since_ms: float, expected: float) -> None:
        """Until the clients hold ``expected`` deliveries committed since ``since_ms`` (bounded by
        ``--drain``)."""
        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline:
            if sum(1 for c, _ in self.clients.samples if c >= since_ms) >= expected:
                return
            await asyncio.sleep(0.2)  # polling the clients' receipts (bounded)

    async def settle(self, share: float = 0.05) -> float:
        """Until the Status API, the relays and MariaDB each use < ``share`` of a core over a second
        (an overloaded rung leaves a backlog of requests its producer gave up on, and outbox rows:
        the next rung must not inherit it); the seconds it took (bounded by ``--settle``)."""
        busy = [n for n in self.pids if group(n) in ("status-api", "relay", "mariadb")]
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.args.settle:
            before = {n: cpu_seconds(self.pids[n]) for n in busy}
            await asyncio.sleep(1.0)  # one second of CPU per process, measured
            if all(cpu_seconds(self.pids[n]) - before[n] < share for n in busy):
                break
        return round(time.monotonic() - t0, 1)

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pids) for name, pids in self.pids.items()}

    async def rung(self, producer: Producer, rate: int) -> dict[str, Any]:
        args = self.args
        settled = await self.settle()
        relays = [f"http://127.0.0.1:{p}/metrics" for p in self.topo.relay_metrics_ports]
        self.clients.samples, self.clients.staged = [], []
        gateways = [f"{self.topo.gateway_url(n)}/metrics" for n in range(len(self.topo.gateway_ports))]
        start_at = time.time() + 1.0
        w0, w1 = start_at + args.warmup, start_at + args.warmup + args.window
        cmd = {
            "cmd": "rung",
            "rate": rate,
            "start_at": start_at,
            "warmup": args.warmup,
            "window": args.window,
        }
        answer = asyncio.create_task(producer.call(cmd, wait_s=args.warmup + args.window + 60))
        await sleep_until(w0)
        load0, cpu0 = os.getloadavg()[0], self.cpu()
        relay0 = [await asyncio.to_thread(e2e_stages.relay_counters, u) for u in relays]
        gc0 = [await asyncio.to_thread(e2e_stages.gc_pauses, u) for u in gateways]
        await sleep_until(w1)
        cpu1, load1 = self.cpu(), os.getloadavg()[0]
        relay1 = [await asyncio.to_thread(e2e_stages.relay_counters, u) for u in relays]
        gc1 = [await asyncio.to_thread(e2e_stages.gc_pauses, u) for u in gateways]
        res = await answer
        await self.drain(w0 * 1000, res["ok"] * self.per_event)
        lat = [seen - c for c, seen in self.clients.samples if w0 * 1000 <= c < w1 * 1000]
        staged = [(p - c, seen - p) for c, p, seen in self.clients.staged if w0 * 1000 <= c < w1 * 1000]
        to_send, send_to_visible = [a for a, _ in staged], [b for _, b in staged]
        accepted = res["accepted_per_s"] * args.window
        per_event = {n: round(1000 * (cpu1[n] - cpu0[n]) / max(accepted, 1), 3) for n in cpu0}
        groups: dict[str, float] = {}
        for name, ms in per_event.items():
            groups[group(name)] = round(groups.get(group(name), 0.0) + ms, 3)
        res.update(
            commit_to_visible_p50_ms=pct(lat, 50),
            commit_to_visible_p99_ms=pct(lat, 99),
            commit_to_relay_send_p50_p99_ms=(pct(to_send, 50), pct(to_send, 99)),
            relay_send_to_visible_p50_p99_ms=(pct(send_to_visible, 50), pct(send_to_visible, 99)),
            gateway_gc=[e2e_stages.gc_delta(a, b) for a, b in zip(gc0, gc1, strict=True)],
            deliveries=len(lat),
            received=len(self.clients.samples),
            deliveries_per_s=round(len(lat) / args.window, 1),
            deliveries_per_event=round(len(lat) / max(accepted, 1), 2),
            cpu_ms_per_event=per_event,
            cpu_share={n: round(100 * (cpu1[n] - cpu0[n]) / args.window, 1) for n in cpu0},
            cpu_ms_per_event_by_part=groups,
            path_cpu_ms_per_event=round(sum(groups.get(g, 0.0) for g in PATH), 3),
            relays=[e2e_stages.relay_delta(a, b) for a, b in zip(relay0, relay1, strict=True)],
            load=(round(load0, 2), round(load1, 2)),
        )
        res["settle_s"] = settled
        res["holds"] = holds(res)
        print(json.dumps({k: v for k, v in res.items() if k != "cpu_share"}), flush=True)
        return res

    async def run(self) -> dict[str, Any]:
        out, producer = await self.setup()
        print(f"setup: {json.dumps(out)}", flush=True)
        out["rungs"] = []
        try:
            rates = (
                self.args.rates
                if self.args.every_rate
                else ladder(self.args.rates, self.args.descend, out["rungs"])
            )
            for rate in rates:
                out["rungs"].append(await self.rung(producer, rate))
        finally:
            await producer.stop()
            self.clients.close()
        passed = [r["offered"] for r in out["rungs"] if r["holds"]]
        out["ceiling"] = max(passed) if passed else None
        out["ceiling_bounded"] = bool(out["rungs"]) and out["rungs"][-1]["holds"]
        return out


def ladder(up: list[int], down: list[int], done: list[dict[str, Any]]) -> Iterator[int]:
    """The rates to offer, given the rungs ``done`` so far: ``up`` (the model's rate first) until a
    rung fails; when the very first one fails, ``down`` until one holds."""
    for rate in up:
        yield rate
        if not done[-1]["holds"]:
            if len(done) == 1:
                for lower in (r for r in down if r < rate):
                    yield lower
                    if done[-1]["holds"]:
                        return
            return


def holds(r: dict[str, Any]) -> bool:
    """A rung holds when ≥ 95 % of the offered events are accepted and p99 commit→visible ≤ 100 ms."""
    p99 = r["commit_to_visible_p99_ms"]
    return bool(r["accepted_per_s"] >= TARGET_ACCEPTED * r["offered"] and p99 == p99 and p99 <= TARGET_P99_MS)


def wildcard_port() -> int:
    """A port free on every address, below the ephemeral range (no outgoing connection takes it):
    nginx listens on 0.0.0.0, and a port free on 127.0.0.1 may be another address's local port
    while a neighbour on the machine holds ~100,000 connections from several source addresses."""
    import random
    import socket

    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nginx binds
            try:
                s.bind(("0.0.0.0", port))
                s.listen()
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


class CapacityTopology(Topology):
    """The production topology with nginx's listeners on :func:`wildcard_port` ports."""

    def _allocate_ports(self) -> None:
        super()._allocate_ports()
        self.public_port, self.internal_port = wildcard_port(), wildcard_port()


def start(topo: Topology, attempts: int = 5) -> None:
    """``topo.start()``, again on failure: on a shared machine a port found free on 127.0.0.1 can
    be taken before it is bound, or be another address's local port (nginx binds 0.0.0.0)."""
    for attempt in range(attempts):
        try:
            topo.start()
            return
        except (RuntimeError, TimeoutError, OSError) as exc:
            if attempt == attempts - 1:
                raise
            print(f"topology start failed ({str(exc).splitlines()[-1][:200]}), again", file=sys.stderr)


def e2e_step(redis_url: str, mysql_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Starts the topology on the given Redis and MariaDB, runs the rungs, stops everything."""
    import uvloop

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * args.users + 2000
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, need)), hard))
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-capacity-e2e."))
    workdir.chmod(0o755)  # nginx's workers (user nobody) spool the relays' large batches under it
    topo = CapacityTopology(
        workdir,
        redis_url,
        mysql_url,
        gateways=args.gateways,
        relays=2,
        status_apis=1,
        status_api_workers=args.e2e_workers,
        heartbeat_timeout_seconds=3600.0,
        relay_root=Path(args.relay_tree).resolve() if args.relay_tree else None,
    )
    result: dict[str, Any] = {
        "tasks": args.e2e_tasks,
        "users": args.users,
        "detail_share": args.detail_share,
        "gateways": args.gateways,
        "status_api_workers": args.e2e_workers,
        "relays": 2,
        "warmup_s": args.warmup,
        "window_s": args.window,
        "http_conns": args.http_conns,
        "load_start": round(os.getloadavg()[0], 2),
    }
    try:
        start(topo)
        result.update(uvloop.run(asyncio.wait_for(Capacity(args, topo).run(), args.budget_s)))
    finally:
        topo.stop()
    result["load_end"] = round(os.getloadavg()[0], 2)
    return result


def idle_argv(args: argparse.Namespace, json_out: Path) -> list[str]:
    """bench_idle.py's command line: idle connections laddered up to ``--idle-connections`` on
    ``--idle-gateway-workers`` gateway processes, from ``--idle-source-addresses`` client addresses;
    its whole result as JSON in ``json_out``."""
    argv = [sys.executable, str(ROOT / "loadtest/bench_idle.py"), "--json", str(json_out)]
    argv += ["--connections", str(args.idle_connections), "--rungs", str(args.idle_rungs)]
    argv += ["--gateway-workers", str(args.idle_gateway_workers)]
    argv += ["--source-addresses", str(args.idle_source_addresses)]
    return [*argv, "--ping-interval", f"{args.idle_ping_interval:g}", "--window", f"{args.idle_window:g}"]


def idle_step(args: argparse.Namespace, run: Callable[..., Any] = subprocess.run) -> dict[str, Any]:
    """Runs bench_idle.py; its rungs (one per ladder step), whether the descriptor limit lowered the
    target, and the load average."""
    with tempfile.TemporaryDirectory(prefix="capacity-idle-") as tmp:
        json_out = Path(tmp) / "idle.json"
        argv = idle_argv(args, json_out)
        load = round(os.getloadavg()[0], 2)
        proc = run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
        result = json.loads(json_out.read_text()) if json_out.exists() else {}
    shown = argv[1:2] + argv[4:]  # without ``--json FILE``
    command = " ".join(shown).replace(str(ROOT) + "/", "")
    out = {
        "command": command,
        "rungs": result.get("rungs", []),
        "fd_limited": result.get("fd_limited", False),
        "nofile": result.get("nofile", {}),
        "load_start": load,
    }
    if proc.returncode != 0:
        out["error"] = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("e2e step (seed §15 end to end)")
    g.add_argument("--e2e-tasks", dest="e2e_tasks", type=int, default=20000, help="active tasks")
    g.add_argument("--users", type=int, default=5000, help="task owners (a board connection each)")
    g.add_argument("--detail-share", type=float, default=1.0, help="share of tasks with a detail watcher")
    g.add_argument("--gateways", type=int, default=1)
    g.add_argument(
        "--e2e-workers",
        dest="e2e_workers",
        type=int,
        default=1,
        help="the Status API's `serve --workers` (1, the service's default: one worker batches more per "
        "transaction, docs/status-api.md)",
    )
    g.add_argument(
        "--rates",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[667, 800, 1000, 1250, 1500, 2000, 2500, 3000],
        help="events/s: the model's rate, then the ladder (stops at the first rung that fails)",
    )
    g.add_argument(
        "--descend",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[500, 400, 300, 200, 100],
        help="events/s tried, highest first, when the first rate fails (until one holds)",
    )
    g.add_argument("--every-rate", action="store_true", help="offer every --rates rung, held or not (an A/B)")
    g.add_argument("--relay-tree", help="run the relays from this checkout (an A/B of the relay; same venv)")
    g.add_argument("--warmup", type=float, default=10.0, help="seconds of each rung not measured")
    g.add_argument("--window", type=float, default=30.0, help="measured seconds of each rung")
    g.add_argument("--drain", type=float, default=10.0, help="bound on waiting for deliveries after a rung")
    g.add_argument("--settle", type=float, default=180.0, help="bound on waiting for a backlog before a rung")
    g.add_argument("--http-conns", type=int, default=128, help="the producer's keep-alive connections")
    g.add_argument("--budget-s", type=float, default=1800.0, help="bound on the whole e2e step")
    g = p.add_argument_group("idle step (loadtest/bench_idle.py)")
    g.add_argument("--idle-connections", type=int, default=100_000, help="target idle connections")
    g.add_argument("--idle-rungs", type=int, default=4, help="ladder steps up to the target")
    g.add_argument(
        "--idle-gateway-workers",
        type=int,
        default=1,
        help="gateway processes (6 hold 100,000 at 20,000 fds each)",
    )
    g.add_argument("--idle-source-addresses", type=int, default=6, help="client addresses 127.0.0.2…")
    g.add_argument("--idle-ping-interval", type=float, default=25.0)
    g.add_argument("--idle-window", type=float, default=30.0)


def quick(args: argparse.Namespace) -> None:
    """A smoke run's sizes: a few tasks and clients, one short rung each step."""
    args.e2e_tasks, args.users, args.rates, args.descend = 40, 10, [20], []
    args.warmup, args.window, args.drain, args.http_conns, args.settle = 1.0, 3.0, 10.0, 8, 2.0
    args.idle_connections, args.idle_rungs, args.idle_ping_interval, args.idle_window = 50, 1, 1.0, 2.0
    args.idle_source_addresses = 2
