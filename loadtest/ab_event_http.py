"""A/B of the Status API's HTTP cost per event POST between source trees, without the database.

``python loadtest/ab_event_http.py --tree main=/work/main --tree this=. --rounds 3`` serves each
tree with ``taskcast status-api serve --workers 1`` (SQLite, the server of that tree) and sends
``--requests`` event POSTs of a worker's size (~600 bytes, ``Content-Length``, an
``Idempotency-Key``, a coordinator's service JWT) over ``--connections`` keep-alive connections,
one request at a time per connection. Each is refused 422 ``INVALID_EVENT`` (the body is a JSON
array holding the event: the JWT verified, the body parsed, no schema validation, no database), so
what the server spends per request is the HTTP path around the event route — the protocol, the
ASGI cycle and middlewares or the inline path, the route's header decode, metrics, the answer's
write — plus the route's checks before the ingest. Trees run in a palindromic order
(A B B A per round); it prints every run and, per tree, the median of the server's CPU µs per
request (psutil user+sys) and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import jwt
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "loadtest"))

from abba import median_table, named_trees, tree_runs  # noqa: E402
from ingest_http import SECRET, server_config  # noqa: E402

BODY = json.dumps(
    [
        {
            "eventId": "evt-" + "0" * 32,
            "taskId": "00000000-0000-4000-8000-000000000000",
            "taskType": "DOCUMENT_PROCESS",
            "taskAttempt": 1,
            "stepId": "02_parse",
            "operationCode": "DOCUMENT.PARSE",
            "stepAttempt": 1,
            "producerId": "document-parser",
            "sourceSeq": 7,
            "eventType": "STEP_PROGRESS",
            "businessStatus": "PARSING",
            "occurredAt": "2026-09-21T07:10:18.120Z",
            "progress": {"current": 3, "total": 10, "unit": "pages"},
            "data": {"schema": "document-parse-progress/v1", "value": {"pages": 3, "note": "x" * 200}},
        }
    ]
).encode()
TOKEN = jwt.encode(
    {"sub": "task-coordinator", "roles": ["coordinator"], "exp": int(time.time()) + 86400}, SECRET, "HS256"
)
REQUEST = (
    b"POST /internal/v1/task-events HTTP/1.1\r\nhost: 127.0.0.1\r\n"
    b"authorization: Bearer %s\r\ncontent-type: application/json\r\n"
    b"idempotency-key: evt-%s\r\ncontent-length: %d\r\n\r\n%s" % (TOKEN.encode(), b"0" * 32, len(BODY), BODY)
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _client(port: int, n: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(n):
        writer.write(REQUEST)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 422") or b"connection: close" in head.lower():
            raise RuntimeError(head[:300])
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.close()


async def _load(port: int, requests: int, connections: int) -> None:
    await asyncio.gather(*(_client(port, requests // connections) for _ in range(connections)))


def one_run(tree: Path, label: str, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="taskcast-event-http."))
    port = _free_port()
    cfg = server_config(f"sqlite+aiosqlite:///{work}/status.db", port, 5)
    (work / "cfg.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKCAST_")}
    argv = [sys.executable, "-m", "taskcast", "status-api", "serve", "--config", str(work / "cfg.json")]
    argv += ["--workers", "1"]
    server = subprocess.Popen(
        argv,
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("status api not ready")
            time.sleep(0.2)  # polling a process's readiness from a benchmark driver
        proc = psutil.Process(server.pid)
        asyncio.run(_load(port, args.requests // 10, args.connections))  # warm-up
        load = os.getloadavg()[0]
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.perf_counter()
        asyncio.run(_load(port, args.requests, args.connections))
        wall = time.perf_counter() - t0
        cpu = sum(proc.cpu_times()[:2]) - cpu0
    finally:
        server.terminate()
        server.wait(timeout=30)
    n = args.requests // args.connections * args.connections
    out = {
        "tree": label,
        "requests": n,
        "server_us_per_request": round(cpu / n * 1e6, 1),
        "requests_per_s": round(n / wall),
        "load": round((load + os.getloadavg()[0]) / 2, 2),
    }
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", action="append", required=True, metavar="NAME=DIR", help="2 or more")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--connections", type=int, default=16)
    args = p.parse_args()
    trees = named_trees(args.tree)
    runs = tree_runs(trees, args.rounds, lambda name, tree, _: one_run(tree, name, args))
    print(median_table(runs, ("server_us_per_request", "requests_per_s", "load")))


if __name__ == "__main__":
    main()
