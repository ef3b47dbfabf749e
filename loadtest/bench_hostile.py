"""Hostile-client benchmark (issue 28): what one client sending maximal frames as fast as it can
costs a bystander on the same gateway node, and the node's CPU.

For each gateway tree given (``--tree NAME=PATH``, e.g. a ``git worktree`` of the code before a
change and the current one: one run compares them), a gateway process from that tree (memory
engine) serves a bystander: a JSON WebSocket client subscribed to ``news``, which gets a
publication every ``--interval`` seconds through the HTTP API and measures its delivery latency
(publish call to arrival). After a quiet window (the baseline), each attack runs for
``--seconds`` with a hostile client that reconnects each time the gateway cuts it:

* ``pb-before``: Protobuf WebSocket, frames of 65,536 zero bytes (65,536 empty commands) before
  any connect;
* ``pb-after``: the same frames after a successful connect;
* ``json-flood``: JSON, frames of ``--json-frame`` bytes of ``presence_stats`` commands after a
  connect (``websocket.message_size_limit`` is set to fit them);
* ``fossil``: a delta subscriber that publishes, as fast as the replies come, ``{"s":"x"*16384}``
  then ``{"s":"y"+"x"*16383}`` alternately into a fossil delta channel (fossil's worst case);
* ``api-batch``, ``api-batch-parallel``: a server API client (it has the key: authenticated, but
  a bug or a compromised backend) posting, back to back, ``/api/batch`` requests of
  ``--batch-commands`` publishes (1,000: ``http_api.max_batch_commands``' default, the largest a
  bounded gateway accepts) to a channel nobody reads, sequential or ``parallel``;
* ``api-batch-huge``: the same with the largest body the API reads (10 MiB: ~280,000 publishes),
  which a bounded gateway refuses (107) after parsing it.

Each attack (and the quiet baseline) gets a fresh gateway, so none inherits another's backlog.
Per attack it reports the bystander's delivery p50/p99 (and the rise of the p99 over the
baseline; publications not delivered within the window plus ``--drain`` seconds count as
"late", slower than any), the node's CPU seconds during the attack (``/proc/<pid>/stat``), the hostile
connections cut, and the node's CPU per hostile connection (attack CPU / connections: an upper
bound on what one connection cost before it was cut; for ``fossil``, per publication; for the
``api-*`` attacks, per request). Targets:
p99 rise < 50 ms, CPU per cut connection < 100 ms. Linux only. One JSON line per tree and attack,
then a Markdown table (``--markdown``).

Usage: ``python loadtest/bench_hostile.py --tree before=/work/old --tree after=. [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest.procs import clean_env  # noqa: E402
from taskcast.dev.procs import Proc, free_port  # noqa: E402

SECRET = "bench-hostile-secret-0123456789abcdefghij"
ATTACKS = (
    "pb-before",
    "pb-after",
    "json-flood",
    "fossil",
    "api-batch",
    "api-batch-parallel",
    "api-batch-huge",
)
API_BODY_LIMIT = 10 * 1024 * 1024
"""The server API's request body bound (gateway/api/http.py ``MAX_BODY_BYTES``)."""
FOSSIL_SIZE = 16384
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


Attack = Callable[[str, str, dict[str, int]], Awaitable[None]]
"""An attack: (WebSocket URL, API key, counters); returns (or raises) when the gateway cuts it."""


def token(user: str) -> str:
    return jwt.encode({"sub": user}, SECRET, algorithm="HS256")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def pb_connect_frame() -> bytes:
    from gateway.protocol.protobuf import client_pb2 as pb
    from gateway.protocol.protobuf.framing import delimited

    cmd = pb.Command(id=1)
    cmd.connect.token = token("hostile")
    return delimited(cmd)


class Bystander:
    """A JSON client subscribed to ``news`` that timestamps every publication it gets."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent: dict[int, float] = {}
        self.latencies: list[tuple[float, float]] = []  # (arrival, latency)
        self.ready = asyncio.Event()
        self.arrived = asyncio.Event()

    async def run(self) -> None:
        async with websockets.connect(self.url, max_size=None) as ws:
            connect = {"id": 1, "connect": {"token": token("bystander")}}
            await ws.send(
                json.dumps(connect) + "\n" + json.dumps({"id": 2, "subscribe": {"channel": "news"}})
            )
            async for message in ws:
                now = time.perf_counter()
                for line in str(message).split("\n"):
                    if not line:
                        continue
                    if line == "{}":
                        await ws.send("{}")
                        continue
                    msg = json.loads(line)
                    if msg.get("id") == 2:
                        self.ready.set()
                    pub = msg.get("push", {}).get("pub")
                    if pub is not None:
                        sent = self.sent.pop(pub["data"]["n"], None)
                        if sent is not None:
                            self.latencies.append((now, now - sent))
                            self.arrived.set()

    async def publish(self, api: httpx.AsyncClient, interval: float, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            self.sent[n] = time.perf_counter()
            body = {"channel": "news", "data": {"n": n}}
            task = asyncio.ensure_future(api.post("/api/publish", json=body, timeout=30))
            task.add_done_callback(
                lambda t: t.cancelled() or t.exception()
            )  # errors: seen as lost deliveries
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    def window(self, start: float, end: float) -> list[float]:
        return [lat for at, lat in self.latencies if start <= at < end]


async def pb_before(url: str, state: dict[str, int]) -> None:
    async with websockets.connect(url, subprotocols=["centrifuge-protobuf"], max_size=None) as ws:  # type: ignore[list-item]
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(bytes(65536))


async def pb_after(url: str, state: dict[str, int]) -> None:
    async with websockets.connect(url, subprotocols=["centrifuge-protobuf"], max_size=None) as ws:  # type: ignore[list-item]
        await ws.send(pb_connect_frame())
        await ws.recv()
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(bytes(65536))


def json_flood(frame_bytes: int) -> Callable[[str, dict[str, int]], Awaitable[None]]:
    line = b'{"id":7,"presence_stats":{"channel":"news"}}\n'
    frame = (line * (frame_bytes // len(line))).decode()

    async def attack(url: str, state: dict[str, int]) -> None:
        async with websockets.connect(url, max_size=None) as ws:
            await ws.send(json.dumps({"id": 1, "connect": {"token": token("hostile")}}))
            await ws.recv()
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await ws.send(frame)

    return attack


async def fossil(url: str, state: dict[str, int]) -> None:
    payloads = [
        json.dumps({"s": "x" * FOSSIL_SIZE}),
        json.dumps({"s": "y" + "x" * (FOSSIL_SIZE - 1)}),
    ]
    async with websockets.connect(url, max_size=None) as ws:
        connect = {"id": 1, "connect": {"token": token("hostile")}}
        subscribe = {"id": 2, "subscribe": {"channel": "delta:worst", "delta": "fossil"}}
        await ws.send(json.dumps(connect) + "\n" + json.dumps(subscribe))
        cmd_id = 2
        while True:
            cmd_id += 1
            data = payloads[cmd_id % 2]
            await ws.send(f'{{"id":{cmd_id},"publish":{{"channel":"delta:worst","data":{data}}}}}')
            while True:  # until this publish's reply (pushes and pings in between)
                message = str(await ws.recv())
                if message == "{}":
                    await ws.send("{}")
                if f'"id":{cmd_id},' in message:
                    break
            state["publications"] += 1


def api_batch(commands: int, *, parallel: bool = False, body_limit: int = 0) -> Attack:
    """Back-to-back ``/api/batch`` requests of ``commands`` publishes (or, with ``body_limit``, as
    many as fit that many bytes) to ``sink``; each answered request counts as a connection."""
    command = b'{"publish":{"channel":"sink","data":1}}'
    if body_limit:
        commands = (body_limit - 64) // (len(command) + 1)
    body = b'{"parallel":%s,"commands":[' % (b"true" if parallel else b"false")
    body += b",".join([command] * commands) + b"]}"

    async def attack(url: str, key: str, state: dict[str, int]) -> None:
        base = url.replace("ws://", "http://").split("/connection/", 1)[0]
        headers = {"X-API-Key": key, "Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as api:
            while True:
                answer = await api.post("/api/batch", content=body)
                state["connections"] += 1
                state["refused"] += b'"error"' in answer.content[:64]

    return attack


async def hostile(
    attack: Attack,
    url: str,
    key: str,
    stop: asyncio.Event,
    state: dict[str, int],
) -> None:
    """Run ``attack`` again each time the gateway cuts it, until ``stop``."""
    while not stop.is_set():
        try:
            await attack(url, key, state)
        except (ConnectionClosed, InvalidStatus, OSError, httpx.HTTPError):
            pass
        state["connections"] += 1


def gateway_config(port: int, key: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "client": {"token": {"hmac_secret_key": SECRET}},
        "http_api": {"key": key},
        "health": {"enabled": True},
        "http_server": {"address": "127.0.0.1", "port": port},
        "websocket": {"message_size_limit": max(args.json_frame + 4096, 65536 + 4096)},
        "channel": {
            "without_namespace": {"allow_subscribe_for_client": True},
            "namespaces": [
                {"name": "delta", "allowed_delta_types": ["fossil"], "delta_publish": True,
                 "allow_subscribe_for_client": True, "allow_publish_for_client": True,
                 "history_size": 10, "history_ttl": "60s"}
            ],
        },
    }  # fmt: skip


class _Shared:
    """Counters shared with the sender process (``state[...] += 1`` works on it)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def __getitem__(self, name: str) -> int:
        return int(self.values[name].value)

    def __setitem__(self, name: str, value: int) -> None:
        self.values[name].value = value


def _send(attack_name: str, commands: int, url: str, key: str, values: dict[str, Any]) -> None:
    """The sender process: the attack until terminated."""
    args = argparse.Namespace(batch_commands=commands, json_frame=0)
    attack = ATTACK_FUNCTIONS[attack_name](args)
    stop = asyncio.Event()
    asyncio.run(hostile(attack, url, key, stop, _Shared(values)))  # type: ignore[arg-type]


class ApiSender:
    """An ``api-*`` attack in a process of its own: a 10 MiB body is built and sent by the
    attacker's own CPU and event loop, not the bystander's (the other attacks are cheap to send)."""

    def __init__(self, attack_name: str, commands: int, url: str, key: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.values = {name: context.Value("q", 0) for name in ("connections", "refused", "publications")}
        self.process = context.Process(target=_send, args=(attack_name, commands, url, key, self.values))
        self.process.start()

    def stop(self) -> dict[str, int]:
        self.process.terminate()
        self.process.join(10)
        return {name: int(value.value) for name, value in self.values.items()}


def _socket(attack: Callable[[str, dict[str, int]], Awaitable[None]]) -> Attack:
    """A WebSocket attack (it needs no API key)."""

    async def run(url: str, key: str, state: dict[str, int]) -> None:
        await attack(url, state)

    return run


ATTACK_FUNCTIONS: dict[str, Callable[[argparse.Namespace], Attack]] = {
    "pb-before": lambda args: _socket(pb_before),
    "pb-after": lambda args: _socket(pb_after),
    "json-flood": lambda args: _socket(json_flood(args.json_frame)),
    "fossil": lambda args: _socket(fossil),
    "api-batch": lambda args: api_batch(args.batch_commands),
    "api-batch-parallel": lambda args: api_batch(args.batch_commands, parallel=True),
    "api-batch-huge": lambda args: api_batch(0, body_limit=API_BODY_LIMIT),
}


async def run_attack(
    name: str, tree: Path, attack_name: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One gateway from ``tree``, a bystander, and ``attack_name`` (or nothing: ``baseline``)
    for ``args.seconds``; a fresh node per attack, so no attack inherits another's backlog."""
    port, key = free_port(), secrets.token_urlsafe(16)
    path = workdir / f"gateway-{name}-{attack_name}-{port}.json"
    path.write_text(json.dumps(gateway_config(port, key, args)))
    argv = [sys.executable, "-m", "taskcast", "gateway", "--config", str(path)]
    env = clean_env(PYTHONPATH=str(tree))
    log = workdir / f"gateway-{name}-{attack_name}-{port}.log"
    proc = Proc("gateway", argv, env, log, f"http://127.0.0.1:{port}/health", tree)
    proc.start()
    try:
        proc.wait_ready()
        assert proc.popen is not None
        pid = proc.popen.pid
        url = f"ws://127.0.0.1:{port}/connection/websocket"
        bystander = Bystander(url)
        reader = asyncio.create_task(bystander.run())
        await asyncio.wait_for(bystander.ready.wait(), 30)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key}) as api:
            attack = ATTACK_FUNCTIONS[attack_name](args) if attack_name != "baseline" else None
            state = {"connections": 0, "publications": 0, "refused": 0}
            stop = asyncio.Event()
            cpu0, start = cpu_seconds(pid), time.perf_counter()
            publisher = asyncio.create_task(bystander.publish(api, args.interval, stop))
            task, sender = None, None
            if attack_name.startswith("api-"):
                sender = ApiSender(attack_name, args.batch_commands, url, key)
            elif attack is not None:
                task = asyncio.create_task(hostile(attack, url, key, stop, state))
            await asyncio.sleep(args.seconds)
            stop.set()
            end, cpu = time.perf_counter(), cpu_seconds(pid) - cpu0
            if sender is not None:
                state.update(sender.stop())
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await publisher
            published = len(bystander.sent) + len(bystander.latencies)
            # Deliveries published during the window may arrive later: wait for the stragglers.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_drained(bystander, end), args.drain)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
    finally:
        proc.stop()
    lat = sorted(latency for _, latency in bystander.latencies)
    late = published - len(lat)  # not delivered within the window + the drain: slower than any
    ranked = lat + [float("inf")] * late
    p99 = ranked[min(len(ranked) - 1, int(len(ranked) * 0.99))] if ranked else None
    row: dict[str, Any] = {
        "tree": name,
        "attack": attack_name,
        "seconds": round(end - start, 2),
        "published": published,
        "late": late,
        "p50_ms": _ms(ranked[len(ranked) // 2]) if ranked else None,
        "p99_ms": _ms(p99),
        "cpu_s": round(cpu, 3),
        "hostile_connections": state["connections"],
    }
    if attack_name == "fossil":
        row["publications"] = state["publications"]
        row["cpu_ms_per_publication"] = (
            round(1000 * cpu / state["publications"], 1) if state["publications"] else None
        )
    elif attack is not None:
        if attack_name.startswith("api-"):
            row["refused"] = state["refused"]
        cut = state["connections"]
        row["cpu_ms_per_connection"] = round(1000 * cpu / cut, 1) if cut else None
    return row


def _ms(seconds: float | None) -> float | str | None:
    if seconds is None:
        return None
    return round(1000 * seconds, 1) if seconds != float("inf") else "late"


async def _drained(bystander: Bystander, end: float) -> None:
    """Until every publication sent before ``end`` has arrived."""
    while any(at < end for at in list(bystander.sent.values())):
        bystander.arrived.clear()
        await bystander.arrived.wait()


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| tree | attack | published | late | p50 ms | p99 ms | p99 rise ms | node CPU s "
        "| hostile conns cut | CPU ms per conn (fossil: per publication) |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        per = r.get("cpu_ms_per_connection", r.get("cpu_ms_per_publication", ""))
        conns = r["hostile_connections"] if r["attack"] != "fossil" else f"{r.get('publications', 0)} pubs"
        if "refused" in r:
            conns = f"{conns} requests ({r['refused']} refused)"
        lines.append(
            f"| {r['tree']} | {r['attack']} | {r['published']} | {r['late']} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r.get('p99_rise_ms', '')} | {r['cpu_s']} | {conns} | {per if per is not None else ''} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a gateway source tree")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each window")
    parser.add_argument("--interval", type=float, default=0.02, help="bystander publication interval")
    parser.add_argument("--json-frame", type=int, default=1 << 20, help="bytes per JSON flood frame")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--batch-commands", type=int, default=1000, help="publishes per api-batch request")
    parser.add_argument("--drain", type=float, default=10.0, help="seconds to wait for late deliveries")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table at the end")
    args = parser.parse_args(argv)
    args.attacks = [a for a in args.attacks.split(",") if a]
    unknown = set(args.attacks) - set(ATTACKS)
    if unknown:
        parser.error(f"unknown attacks: {sorted(unknown)}")
    trees = [t.split("=", 1) for t in args.tree] or [["current", str(ROOT)]]
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-hostile-"))
    load = os.getloadavg()
    print(json.dumps({"loadavg": [round(x, 2) for x in load], "cpus": os.cpu_count()}), flush=True)
    rows: list[dict[str, Any]] = []
    for name, path in trees:
        for attack_name in ["baseline", *args.attacks]:
            row = asyncio.run(run_attack(name, Path(path).resolve(), attack_name, args, workdir))
            base = next((r for r in rows if r["tree"] == name and r["attack"] == "baseline"), None)
            if base is not None and isinstance(row["p99_ms"], float) and isinstance(base["p99_ms"], float):
                row["p99_rise_ms"] = round(row["p99_ms"] - base["p99_ms"], 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps({"loadavg_after": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    if args.markdown:
        print(markdown(rows))


if __name__ == "__main__":
    main()
