"""Server CPU per server-API request on the inline path: one gateway (memory engine) per tree and
round, one keep-alive HTTP/1.1 connection sending a fixed number of ``POST /api/publish``
(``single``: one in flight; ``pipelined``: ``--depth`` in flight) or ``/api/batch`` of 100
(``batch``) to a channel nobody reads. Reported per tree and mode: the median over ``--rounds``
of the gateway's CPU (user + system, ``/proc/<pid>/stat``) per publication in µs, and requests
per second. Trees alternate round by round, so a change in the machine's load hits both.

    mkdir /tmp/before && git archive main | tar -x -C /tmp/before
    python loadtest/bench_api_publish.py --tree before=/tmp/before --tree after=. --markdown

Only loopback processes it starts; they are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest.procs import clean_env  # noqa: E402
from taskcast.dev.procs import Proc, free_port  # noqa: E402

MODES = ("single", "pipelined", "batch")
BATCH = 100
WARM = 500


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request(key: bytes, path: bytes, body: bytes) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: gw\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path, key, len(body), body)
    )


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status


async def send(port: int, key: bytes, mode: str, requests: int, depth: int) -> int:
    """Send ``requests`` requests; returns how many were answered 200."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if mode == "batch":
        commands = b",".join(b'{"publish":{"channel":"bench","data":{"n":%d}}}' % i for i in range(BATCH))
        payload = request(key, b"/api/batch", b'{"commands":[%s]}' % commands)
    else:
        payload = request(key, b"/api/publish", b'{"channel":"bench","data":{"n":1,"s":"0123456789"}}')
    ok = 0
    in_flight = depth if mode == "pipelined" else 1
    try:
        sent = 0
        for _ in range(min(in_flight, requests)):
            writer.write(payload)
            sent += 1
        for _ in range(requests):
            ok += await read_response(reader) == 200
            if sent < requests:
                writer.write(payload)
                sent += 1
    finally:
        writer.close()
    return ok


async def one_round(tree: Path, mode: str, a: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    port, key = free_port(), secrets.token_urlsafe(16)
    config = {"http_api": {"key": key}, "health": {"enabled": True},
              "http_server": {"address": "127.0.0.1", "port": port}}  # fmt: skip
    path = workdir / f"gateway-{port}.json"
    path.write_text(json.dumps(config))
    argv = [sys.executable, "-m", "taskcast", "gateway", "--config", str(path)]
    proc = Proc("gateway", argv, clean_env(PYTHONPATH=str(tree)), workdir / f"gateway-{port}.log",
                f"http://127.0.0.1:{port}/health", tree)  # fmt: skip
    proc.start()
    try:
        proc.wait_ready()
        assert proc.popen is not None
        pid = proc.popen.pid
        requests = a.publications // BATCH if mode == "batch" else a.publications
        await send(port, key.encode(), mode, WARM // (BATCH if mode == "batch" else 1) or 1, a.depth)
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        ok = await send(port, key.encode(), mode, requests, a.depth)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    finally:
        proc.stop()
    return {
        "ok": ok,
        "requests": requests,
        "us_per_publication": cpu / a.publications * 1e6,
        "requests_per_s": requests / elapsed,
    }


async def run(a: argparse.Namespace, trees: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-api-"))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    loads = [os.getloadavg()[0]]
    for _ in range(a.rounds):
        for mode in a.modes.split(","):
            for name, tree in trees:
                results.setdefault((name, mode), []).append(await one_round(tree, mode, a, workdir))
        loads.append(os.getloadavg()[0])
    rows = []
    for (name, mode), runs in results.items():
        rows.append(
            {
                "tree": name,
                "mode": mode,
                "rounds": len(runs),
                "answered_ok": sum(r["ok"] for r in runs),
                "requests": sum(r["requests"] for r in runs),
                "us_per_publication": round(statistics.median(r["us_per_publication"] for r in runs), 1),
                "requests_per_s": round(statistics.median(r["requests_per_s"] for r in runs)),
                "load1": f"{min(loads):.1f}-{max(loads):.1f}",
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| tree | mode | µs server CPU per publication | requests/s | answered 200 | load (1 min) |",
           "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: (MODES.index(r["mode"]), r["tree"])):
        out.append(
            f"| {r['tree']} | {r['mode']} | {r['us_per_publication']} | {r['requests_per_s']:,} "
            f"| {r['answered_ok']}/{r['requests']} | {r['load1']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a gateway source tree")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--publications", type=int, default=6000, help="per round and mode")
    parser.add_argument("--depth", type=int, default=16, help="requests in flight (pipelined)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    a = parser.parse_args(argv)
    if not a.tree:
        a.tree = [f"this={ROOT}"]
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in a.tree)]
    rows = asyncio.run(run(a, trees))
    print(markdown(rows) if a.markdown else "\n".join(json.dumps(r) for r in rows), flush=True)


if __name__ == "__main__":
    main()
