# ruff: noqa: E501  (markdown table lines are long)
"""Issue 20 item 3 benchmark: ``--workers 2`` vs 1 on a hot channel.

    .venv/bin/python loadtest/bench_workers.py --out docs/PERFORMANCE.md          # ~3 min
    .venv/bin/python loadtest/bench_workers.py --quick                             # a smoke run

N subscribers of one hot channel (the C epoll client of loadtest/fanout_client.c,
pinned to CPU 1 with this publisher) and a publisher climbing a ladder of offered deliveries/s
(``POST /api/publish``, 200-byte payloads) until delivered < 90 % of offered. The 1-worker gateway
is pinned to CPU 0 (as in bench_fanout.py); the 2-worker gateway may use CPUs 0 and 1, i.e. its
second worker shares CPU 1 with the load client and the publisher: on a 2-core machine this is the
honest figure, not the one an 8- or 16-core machine would show.

The stalled-readers benchmark (overload conflation, seed §13.3) that used to be this script's
``--only conflation`` is loadtest/bench_stalled.py: it runs in its own network namespace with
small TCP buffers, so the gateway's queues really back up.

Results: a section of ``--out`` between ``<!-- workers:start -->`` and ``<!-- workers:end -->``,
raw JSON in ``--json``. Safety: 127.0.0.1 only, bounded loops, only PIDs started here signalled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (str(ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

import bench_fanout as bf  # noqa: E402
import fanout_procs as procs  # noqa: E402
from fleet import git_commit, replace_block  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

START, END = "<!-- workers:start -->", "<!-- workers:end -->"


# ------------------------------------------------------------------------------------ workers


def start_gateway(
    tmp: Path, cfg: dict[str, Any], workers: int, cpus: str, log: Any
) -> tuple[procs.Server, int]:
    port = int(cfg["http_server"]["port"])
    path = tmp / f"gateway-{port}.json"
    path.write_text(json.dumps(cfg))
    cmd = ["taskset", "-c", cpus, procs.PY, "-m", "taskcast", "gateway", "--config", str(path)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    p = procs.popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if not procs.wait_health(port, 60):
        raise RuntimeError("gateway did not become healthy")
    if workers > 1:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(psutil.Process(p.pid).children()) < workers:
            time.sleep(0.2)
        time.sleep(4)  # every worker listening (its first heartbeat); bounded
    return procs.Server(p, children=True, name=f"gateway-w{workers}"), port


async def bench_workers(a: argparse.Namespace, tmp: Path, exe: Path, log: Any) -> list[dict[str, Any]]:
    runs = []
    ladder = [100_000, 200_000, 300_000, 400_000, 500_000, 600_000, 800_000]
    if a.quick:
        ladder = ladder[:3]
    for workers, cpus in ((1, "0"), (2, "0,1")):
        cfg = procs.gateway_config(free_port(), history=False)
        server, port = start_gateway(tmp, cfg, workers, cpus, log)
        client, hello = procs.start_client(exe, port, a.n, "json", "/connection/websocket")
        pub = bf.make_publisher("gateway", port, 16)
        await pub.open()
        await asyncio.sleep(2)
        steps = []
        try:
            for offered in ladder:
                step = await bf.run_step(a, server, client, pub, a.n, max(1, offered // a.n))
                steps.append(step)
                print(f"workers={workers} {bf.fmt_step(step)}", flush=True)
                if bf.saturated(step):
                    break
        finally:
            await pub.close()
            procs.client_cmd(client, "QUIT")
            procs.wait_or_stop(client, 10)
            server.stop()
        best = max((s["delivered_per_s"] for s in steps), default=0)
        runs.append(
            {"workers": workers, "cpus": cpus, "N": a.n, "hello": hello, "steps": steps, "sustained": best}
        )
    return runs


# ------------------------------------------------------------------------------------- report


def render(res: dict[str, Any]) -> str:
    env = res["env"]
    out = [
        START,
        "",
        "## Workers (issue 20 item 3, `loadtest/bench_workers.py`)",
        "",
        f"Run {res['when']} at {env['commit']} on {env['cpus']} CPUs; `uptime` load before: {env['load_before']}, after: {env['load_after']}. "
        "The machine is shared with other sessions' jobs: figures are one run each, not a clean-room measurement.",
        "",
    ]
    if res.get("workers"):
        out += [
            "### Hot channel, `--workers 1` vs `--workers 2`",
            "",
            "| workers | server CPUs | N | offered/s | delivered/s | p50 ms | p99 ms | server CPU % | client CPU % |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for run in res["workers"]:
            for s in run["steps"]:
                out.append(
                    f"| {run['workers']} | {run['cpus']} | {run['N']} | {s['offered_per_s']:,} | {s['delivered_per_s']:,} | "
                    f"{s['p50_ms']} | {s['p99_ms']} | {s['server_cpu_pct']} | {s['client_cpu_pct']} |"
                )
        w1, w2 = (r["sustained"] for r in res["workers"])
        out += [
            "",
            f"Sustained (best rung): 1 worker **{w1:,}/s**, 2 workers **{w2:,}/s** ({w2 / max(1, w1):.2f}×). "
            "The 2-worker server shares CPU 1 with the C load client and the publisher (their CPU % above), so on this "
            "2-core machine the second worker gets what the load generator leaves.",
            "",
        ]
    out += [END]
    return "\n".join(out)


async def amain(a: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "env": {"commit": git_commit(ROOT), "cpus": os.cpu_count(), "load_before": os.getloadavg()},
    }
    with (tmp / "servers.log").open("w") as log:
        try:
            exe = procs.build_client(tmp)
            res["workers"] = await bench_workers(a, tmp, exe, log)
        finally:
            procs.stop_all()
    res["env"]["load_after"] = os.getloadavg()
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="")
    p.add_argument("--json", default="")
    p.add_argument(
        "--only", choices=["", "workers"], default="", help="kept for old command lines: workers is all"
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument("-n", type=int, default=1000, help="hot-channel subscribers")
    p.add_argument("--warm", type=float, default=1.5)
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--drain", type=float, default=2.0)
    a = p.parse_args()
    res = asyncio.run(amain(a))
    section = render(res)
    print(section)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    if a.out:
        replace_block(Path(a.out), START, END, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
