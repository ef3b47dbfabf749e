"""Server CPU per server-API request on the inline path: one gateway (memory engine) per tree and
round, one keep-alive HTTP/1.1 connection sending a fixed number of ``POST /api/publish``
(``single``: one in flight; ``pipelined``: ``--depth`` in flight) or ``/api/batch`` of 100
(``batch``) to a channel nobody reads. Reported per tree and mode: the median over ``--rounds``
of the gateway's CPU (user + system, ``/proc/<pid>/stat``) per publication in µs, and requests
per second. Trees alternate round by round, so a change in the machine's load hits both.

``inproc`` (robust on a loaded machine): the gateway's HTTP protocol class in this process, fed
``POST /api/publish`` requests through ``data_received`` over a fake transport (the inline path:
parsing, routing, the publish, the response bytes), in CPU µs per request (``time.process_time``,
the median of 5 blocks of ``--publications``); each tree's in a child process of its own.

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

MODES = ("single", "pipelined", "batch", "inproc")
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


class LoopbackTransport(asyncio.Transport):
    """Takes every write; reports a loopback socket."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.protocol: Any = None

    def write(self, data: Any) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5555)}.get(name, default)

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True


def inline_server() -> tuple[Any, LoopbackTransport]:
    """This interpreter's gateway (API key ``k``) behind its HTTP/1.1 protocol on a
    :class:`LoopbackTransport`: feed requests with ``protocol.data_received``; call on a loop."""
    import uvicorn
    import uvicorn.server

    from gateway.app import build
    from gateway.config.loading import load_settings
    from gateway.http.server import http_protocol

    settings, _ = load_settings(None, {"TASKCAST_HTTP_API_KEY": "k"})
    served = build(settings)
    cls = http_protocol(request_timeout=10.0, inline_handler=served.inline)
    config = uvicorn.Config(served.app, http=cls, ws="none", lifespan="off", log_level="warning")
    config.load()
    protocol = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=uvicorn.server.ServerState(), app_state={}
    )
    transport = LoopbackTransport()
    transport.protocol = protocol
    protocol.connection_made(transport)
    return protocol, transport


async def inproc_child(publications: int) -> None:
    """Child of ``inproc``: this interpreter's gateway (``PYTHONPATH``); prints µs per request."""
    protocol, transport = inline_server()
    payload = request(b"k", b"/api/publish", b'{"channel":"bench","data":{"n":1,"s":"0123456789"}}')
    for _ in range(WARM * 4):
        protocol.data_received(payload)  # type: ignore[attr-defined]
    blocks = []
    for _ in range(5):
        c0 = time.process_time()
        for _ in range(publications):
            protocol.data_received(payload)  # type: ignore[attr-defined]
        blocks.append((time.process_time() - c0) / publications * 1e6)
    assert transport.written > 0
    print(json.dumps({"us_per_publication": statistics.median(blocks)}))


async def inproc_round(tree: Path, a: argparse.Namespace) -> dict[str, Any]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--inproc-child", "--publications", str(a.publications),
        env=clean_env(PYTHONPATH=str(tree)), cwd=str(tree), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await child.communicate()
    us = json.loads(out.decode().splitlines()[-1])["us_per_publication"]
    return {"ok": a.publications, "requests": a.publications, "us_per_publication": us,
            "requests_per_s": 1e6 / us}  # fmt: skip


async def run(a: argparse.Namespace, trees: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-bench-api-"))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    loads = [os.getloadavg()[0]]
    for _ in range(a.rounds):
        for mode in a.modes.split(","):
            for name, tree in trees:
                measure = inproc_round(tree, a) if mode == "inproc" else one_round(tree, mode, a, workdir)
                results.setdefault((name, mode), []).append(await measure)
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
    parser.add_argument("--inproc-child", action="store_true", help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    if a.inproc_child:
        asyncio.run(inproc_child(a.publications))
        return
    if not a.tree:
        a.tree = [f"this={ROOT}"]
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in a.tree)]
    rows = asyncio.run(run(a, trees))
    print(markdown(rows) if a.markdown else "\n".join(json.dumps(r) for r in rows), flush=True)


if __name__ == "__main__":
    main()
