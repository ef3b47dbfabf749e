"""RSS and frozen objects of a gateway under connection churn, for minutes.

One gateway process (memory engine) per tree holds ``--held`` idle WebSocket connections, each
subscribed to a channel of its own, while ``--workers`` clients loop connect → subscribe →
publication delivered → leave (alternately the close handshake, a bare FIN and a reset) for
``--minutes``. Every ``--every`` seconds: the gateway's RSS, ``taskcast_gateway_gc_frozen_objects``,
``taskcast_gateway_gc_thaws_total``, full collections so far and their total pause, and the cycles
done. The question: does anything frozen after a full collection (gateway/gc_pauses.py) pile up
as churn goes on — RSS and the frozen count flat means closed connections leave nothing frozen
behind.

``--tree DIR`` (repeatable): the same run with another checkout, one after the other. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtest.bench_gc import start_gateway  # noqa: E402
from taskcast.dev.procs import free_port  # noqa: E402

API_KEY = "bench-gc-churn-key"
FULL_SUM = 'taskcast_gateway_gc_pause_seconds_sum{generation="2"}'
MASK = b"\x01\x02\x03\x04"
UPGRADE = (
    "GET /connection/websocket HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def frame(payload: bytes, opcode: int = 1) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode]) + (
        bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    )
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(await reader.readexactly(2), "big")
    elif n == 127:
        n = int.from_bytes(await reader.readexactly(8), "big")
    return b0 & 0x0F, await reader.readexactly(n)


async def open_subscribed(port: int, channel: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(UPGRADE.encode())
    await reader.readuntil(b"\r\n\r\n")
    connect = json.dumps({"id": 1, "connect": {}})
    subscribe = json.dumps({"id": 2, "subscribe": {"channel": channel}})
    writer.write(frame(f"{connect}\n{subscribe}".encode()))
    seen = b""
    while b'"id":2' not in seen:
        seen += (await read_frame(reader))[1]
    return reader, writer


async def publish(port: int, channel: str) -> None:
    body = json.dumps({"channel": channel, "data": {"pad": "x" * 200}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /api/publish HTTP/1.1\r\nHost: gw\r\nX-API-Key: {API_KEY}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n".encode()
        + body
    )
    await reader.read()
    writer.close()


async def churn(port: int, args: argparse.Namespace, cycles: list[int], stop: float) -> None:
    async def worker(w: int) -> None:
        n = 0
        while time.monotonic() < stop:
            channel = f"churn-{w}-{n % 4}"
            reader, writer = await open_subscribed(port, channel)
            try:
                await publish(port, channel)
                while b"pad" not in (await read_frame(reader))[1]:
                    pass
                how = n % 3
                if how == 0:
                    writer.write(frame(struct.pack("!H", 1000), opcode=8))
                    while (await read_frame(reader))[0] != 8:
                        pass
                elif how == 2:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            finally:
                writer.close()
            n += 1
            cycles[0] += 1

    await asyncio.gather(*(worker(w) for w in range(args.workers)))


async def answer_pings(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A held connection stays: every ping (``{}``) is answered with a pong (``{}``)."""
    try:
        while True:
            opcode, payload = await read_frame(reader)
            if opcode == 1 and payload.strip() == b"{}":
                writer.write(frame(b"{}"))
            elif opcode == 8:
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("taskcast_gateway_gc_", "centrifugo_node_num_clients")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def run_async(port: int, pid: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    held = []
    for k in range(0, args.held, 200):
        held += await asyncio.gather(
            *(open_subscribed(port, f"held-{i}") for i in range(k, min(args.held, k + 200)))
        )
    pongs = [asyncio.create_task(answer_pings(reader, writer)) for reader, writer in held]
    proc = psutil.Process(pid)
    cycles = [0]
    started = time.monotonic()
    stop = started + args.minutes * 60
    task = asyncio.create_task(churn(port, args, cycles, stop))
    samples: list[dict[str, Any]] = []
    while not task.done():
        m = await asyncio.to_thread(metrics, port)
        samples.append(
            {
                "t_s": round(time.monotonic() - started),
                "cycles": cycles[0],
                "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                "frozen": int(m.get("taskcast_gateway_gc_frozen_objects", -1)),
                "thaws": int(m.get("taskcast_gateway_gc_thaws_total", -1)),
                "full_n": int(m.get('taskcast_gateway_gc_pause_seconds_count{generation="2"}', 0)),
                "full_sum_ms": round(
                    m.get('taskcast_gateway_gc_pause_seconds_sum{generation="2"}', 0) * 1000, 1
                ),
                "clients": int(m.get("centrifugo_node_num_clients", 0)),
                "load1": round(os.getloadavg()[0], 2),
            }
        )
        await asyncio.wait([task], timeout=args.every)
    await task
    for _, writer in held:
        writer.close()
    for pong in pongs:
        pong.cancel()
    return samples


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="bench-gc-churn-"))
    cfg = {
        "http_server": {"address": "127.0.0.1", "port": port},
        "log": {"level": "warn"},
        "engine": {"type": "memory"},
        "client": {"insecure": True, "user_connection_limit": 0},
        "http_api": {"key": API_KEY},
        "prometheus": {"enabled": True},
        "health": {"enabled": True},
    }
    (work / "gw.json").write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    gw = start_gateway(tree, work, port, env)
    try:
        samples = asyncio.run(run_async(port, gw.pid, args))
    finally:
        gw.terminate()
        gw.wait(30)
    return {"tree": str(tree), "held": args.held, "workers": args.workers, "samples": samples}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--held", type=int, default=2000)
    p.add_argument("--workers", type=int, default=20)
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--every", type=float, default=15.0)
    p.add_argument("--tree", action="append", type=Path, default=[])
    args = p.parse_args()
    print(json.dumps([run_tree(t, args) for t in (args.tree or [ROOT])], indent=1))


if __name__ == "__main__":
    main()
