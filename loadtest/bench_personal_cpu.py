"""Fixed-work CPU per publication for the personal-channel scenario, robust on a loaded machine:
the shared perfbench harness's pieces (/work/shared/bench installed at /tmp/perfcheck/bench:
server start pinned to CPU 0, ``cclient`` with N one-channel subscribers, its keep-alive
publisher pool), with a fixed NUMBER of publications sent as fast as the pool allows instead of a
rate ladder. Reported: server CPU seconds over the send divided by the publications (``raw``),
and the same after subtracting the server's idle CPU rate (measured on the same connections just
before) times the elapsed time (``net``: what the publications themselves cost, independent of
how fast a starved publisher could send them).

    cd /tmp/perfcheck/bench && ulimit -n 20000 && ../venv/bin/python \\
        /work/main/loadtest/bench_personal_cpu.py --server taskcast --taskcast-bin <wrapper> \\
        --mode batch --publications 20000

``--mode single`` posts ``/api/publish`` per publication; ``batch`` sends ``/api/batch`` of 100
(loadtest/bench_personal_batch.py's pool); ``--server nchan`` measures nchan's single publishes.
Prints one JSON line. Only loopback processes it starts; they are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
from typing import Any

WARM_PUBLICATIONS = 2000
IDLE_SECONDS = 3.0


async def measure(
    bench: Any, batch_pool: Any, a: argparse.Namespace, spec: dict[str, Any], server: Any
) -> dict[str, Any]:
    """The fixed-work measurement against a started server with its subscribers connected."""
    make_message = importlib.import_module("common").make_message
    if a.mode == "batch":
        pub = batch_pool("cent", bench.HTTP_POOL_PERSONAL, a.n)
    else:
        pub = bench.make_pub(spec, a.n)
    await pub.open(spec["port"])
    for i in range(WARM_PUBLICATIONS):
        await pub.send(make_message(i), i)
    await pub.drain(10)
    c0, t0 = server.cpu(), time.monotonic()
    await asyncio.sleep(IDLE_SECONDS)
    idle_rate = (server.cpu() - c0) / (time.monotonic() - t0)
    ok0 = pub.ok
    c0, t0 = server.cpu(), time.monotonic()
    for i in range(a.publications):
        await pub.send(make_message(i), i)
        if i % 64 == 0:
            await asyncio.sleep(0)
    if a.mode == "batch":
        await pub._flush()
    await pub.drain(20)
    cpu, elapsed = server.cpu() - c0, time.monotonic() - t0
    await pub.close()
    return {
        "server": a.server,
        "mode": a.mode,
        "publications": a.publications,
        "answered_ok": pub.ok - ok0,
        "errors": pub.err,
        "elapsed_s": round(elapsed, 2),
        "publications_per_s": round(a.publications / elapsed),
        "server_cpu_s": round(cpu, 3),
        "idle_cpu_pct": round(idle_rate * 100, 2),
        "us_per_publication_raw": round(cpu / a.publications * 1e6, 1),
        "us_per_publication_net": round((cpu - idle_rate * elapsed) / a.publications * 1e6, 1),
        "load1": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="taskcast", choices=["taskcast", "nchan"])
    parser.add_argument("--taskcast-bin", default="", help="taskcast executable (a wrapper for a tree)")
    parser.add_argument("--mode", default="single", choices=["single", "batch"])
    parser.add_argument("--publications", type=int, default=6000)
    parser.add_argument("-n", type=int, default=5000, help="subscribers, one channel each")
    parser.add_argument("--port", type=int, default=19309)
    parser.add_argument("--harness", default=os.getcwd(), help="perfbench directory (bench.py)")
    parser.add_argument("--run-dir", default="/tmp/bench-personal-cpu")
    a = parser.parse_args()
    a.harness = os.path.abspath(a.harness)
    sys.path.insert(0, a.harness)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.chdir(a.harness)
    bench: Any = importlib.import_module("bench")
    batch_pool = importlib.import_module("bench_personal_batch")._batch_pool(bench, 100)
    os.sched_setaffinity(0, {int(bench.LOAD_CPU)})
    bench.CLIENT = "c"
    bench.TASKCAST_BIN = os.path.abspath(a.taskcast_bin) if a.taskcast_bin else None
    run_dir = os.path.abspath(a.run_dir)
    os.makedirs(run_dir, exist_ok=True)
    specs = bench.server_specs(
        run_dir, os.path.join(a.harness, "..", "node"), {"taskcast": a.port, "nchan": a.port}
    )
    spec = specs[a.server]
    with open(os.path.join(run_dir, f"{a.server}.log"), "ab") as log:
        server = bench.start_server(a.server, spec, run_dir, log)
        clients: list[Any] = []
        try:
            clients, _ = bench.start_clients(
                spec["port"], a.n, 1, False, bench.client_args(spec, personal=True)
            )
            print(json.dumps(asyncio.run(measure(bench, batch_pool, a, spec, server))), flush=True)
        finally:
            bench.stop_clients(clients)
            server.stop()


if __name__ == "__main__":
    main()
