"""Fossil delta compression benchmark: bytes on the wire per delivery and deliveries/s for a
progress-style channel (a ~2 kB JSON state where one field changes per publication), with and
without ``delta: "fossil"`` subscribers.

One gateway (memory engine) with a namespace allowing fossil and ``delta_publish``; ``--clients``
raw WebSocket clients speak the JSON protocol (connect + subscribe, half asking for delta or none
depending on the run); ``--pubs`` publications go through the HTTP API one after another. Bytes
are the WebSocket message payloads the clients receive for publications (frame headers, 2-4
bytes each, not counted). Deliveries/s is clients x pubs over the time from the first publish to
the last delivery. Usage: ``python loadtest/bench_delta.py [--clients 50] [--pubs 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import websockets

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest.procs import clean_env  # noqa: E402
from taskcast.dev.procs import Proc, free_port  # noqa: E402

CHANNEL = "progress:job-1"


def state(n: int) -> bytes:
    steps = [
        {"id": f"step-{i:02d}", "name": f"Process batch {i}", "state": "done" if i < n % 24 else "pending",
         "progress": 100 if i < n % 24 else 0, "attempt": 1, "worker": "worker-7"}
        for i in range(24)
    ]  # fmt: skip
    return orjson.dumps({"task": "job-1", "version": n, "updated": 1_700_000_000 + n, "steps": steps})


async def client(
    url: str, delta: bool, expected: int, counts: list[int], total: int, ready: asyncio.Event
) -> None:
    async with websockets.connect(url, max_size=None) as ws:
        sub: dict[str, object] = {"channel": CHANNEL}
        if delta:
            sub["delta"] = "fossil"
        await ws.send(json.dumps({"id": 1, "connect": {}}) + "\n" + json.dumps({"id": 2, "subscribe": sub}))
        replies = 0
        while replies < 2:
            for line in str(await ws.recv()).split("\n"):
                if line and '"id"' in line:
                    replies += 1
        counts.append(0)
        slot = len(counts) - 1
        if len(counts) == total:
            ready.set()
        got = 0
        pub_bytes = 0
        while got < expected:
            message = await ws.recv()
            if isinstance(message, str) and "{}" in message.split("\n"):
                await ws.send("{}")  # pong
            if '"pub"' in message:
                got += message.count('"pub"')
                pub_bytes += len(message.encode() if isinstance(message, str) else message)
        counts[slot] = pub_bytes


async def run(delta: bool, clients: int, pubs: int, workdir: Path) -> dict[str, float]:
    port, key = free_port(), secrets.token_urlsafe(16)
    config = {
        "client": {"insecure": True},
        "http_api": {"key": key},
        "health": {"enabled": True},
        "http_server": {"address": "127.0.0.1", "port": port},
        "channel": {
            "namespaces": [
                {"name": "progress", "history_size": 100, "history_ttl": "300s",
                 "allowed_delta_types": ["fossil"], "delta_publish": True, "allow_subscribe_for_client": True}
            ]
        },
    }  # fmt: skip
    path = workdir / f"gateway-{port}.json"
    path.write_text(json.dumps(config))
    argv = [sys.executable, "-m", "taskcast", "gateway", "--config", str(path)]
    proc = Proc(
        "gateway", argv, clean_env(), workdir / f"gateway-{port}.log", f"http://127.0.0.1:{port}/health"
    )
    proc.start()
    try:
        proc.wait_ready()
        url = f"ws://127.0.0.1:{port}/connection/websocket"
        counts: list[int] = []
        ready = asyncio.Event()
        tasks = [
            asyncio.create_task(client(url, delta, pubs, counts, clients, ready)) for _ in range(clients)
        ]
        await asyncio.wait_for(ready.wait(), 60)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key}) as api:
            started = time.perf_counter()
            for n in range(pubs):
                r = await api.post(
                    "/api/publish", content=b'{"channel":"%s","data":%s}' % (CHANNEL.encode(), state(n))
                )
                r.raise_for_status()
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - started
        deliveries = clients * pubs
        return {
            "bytes_per_delivery": sum(counts) / deliveries,
            "deliveries_per_s": deliveries / elapsed,
            "state_bytes": float(len(state(pubs // 2))),
        }
    finally:
        proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--pubs", type=int, default=300)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-delta-"))
    for delta in (False, True):
        result = asyncio.run(run(delta, args.clients, args.pubs, workdir))
        print(json.dumps({"delta": "fossil" if delta else "none", "clients": args.clients, "pubs": args.pubs,
                          **{k: round(v, 1) for k, v in result.items()}}))  # fmt: skip


if __name__ == "__main__":
    main()
