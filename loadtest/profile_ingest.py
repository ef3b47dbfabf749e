"""Where a Status API worker's CPU goes on the HTTP event path: cProfile of one in-process server.

The Status API app (``status_api.app.create_app``, the same listener as ``status-api serve``) runs
in this process under cProfile on uvloop; ``--tasks`` tasks are created over HTTP (not profiled),
then ``--generators`` generator processes (``loadtest/ingest_http.py --generate``) send each task's
events. Prints the CPU seconds of this process per accepted event and the top functions by own
time and by cumulative time (``--top``); ``--out FILE`` keeps the pstats for ``snakeviz``/``pstats``.

    .venv/bin/python loadtest/profile_ingest.py --url mysql+asyncmy://… [--tasks 1000 --events 3]

cProfile roughly doubles the CPU of the Python code it sees, so read the shares, not the totals;
the unprofiled CPU per event is printed first (one run without the profiler). ``--spy FILE``
samples that unprofiled run with py-spy instead (no inflation of Python code; native frames
charged to their Python caller): ``loadtest/spy_summary.py FILE`` prints its shares.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest_http

from status_api.app import create_app
from status_api.config import build_config
from status_api.server import uvicorn_config

ROOT = Path(__file__).resolve().parents[1]


async def _reset(url: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from status_api.storage.tables import metadata

    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)
    await engine.dispose()


def _generate(port: int, contexts: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="taskcast-profile."))
    start_at = time.time() + 2.0
    gens = []
    for g in range(args.generators):
        path = work / f"gen{g}.json"
        path.write_text(json.dumps(contexts[g :: args.generators]))
        argv = [sys.executable, str(ROOT / "loadtest" / "ingest_http.py"), "--generate", str(path)]
        argv += ["--port", str(port), "--start-at", str(start_at), "--events", str(args.events)]
        argv += ["--concurrency", str(max(1, args.concurrency // args.generators))]
        gens.append(subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT))
    return [json.loads(g.communicate(timeout=900)[0]) for g in gens]


def _start_spy(args: argparse.Namespace) -> subprocess.Popen[bytes] | None:
    """py-spy sampling this process (the server) during the load phase, when ``--spy`` asks."""
    if not getattr(args, "spy", None):
        return None
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [exe, "record", "--pid", str(os.getpid()), "--rate", "250", "--format", "raw"]
    spy = subprocess.Popen([*argv, "--nonblocking", "--output", args.spy], stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the first event
    return spy


async def _serve_and_load(args: argparse.Namespace, profiler: cProfile.Profile | None) -> dict[str, Any]:
    import uvicorn

    await _reset(args.url)
    port = ingest_http._free_port()
    raw = ingest_http.server_config(args.url, port, args.pool)
    raw["database"]["auto_init"] = True
    cfg = build_config(raw)
    app = create_app(cfg)
    server = uvicorn.Server(uvicorn_config(app, cfg.http))
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.05)
    contexts = await ingest_http._create(port, args.tasks)
    me = psutil.Process()
    loop = asyncio.get_running_loop()
    cpu0 = sum(me.cpu_times()[:2])
    spy = _start_spy(args) if profiler is None else None
    if profiler is not None:
        profiler.enable()
    outs = await loop.run_in_executor(None, _generate, port, contexts, args)
    if profiler is not None:
        profiler.disable()
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    cpu = sum(me.cpu_times()[:2]) - cpu0
    server.should_exit = True
    await serving
    group = app.state.components.service.ingestor.group
    sizes = list(group.batch_sizes) if group is not None else [1]
    ok = sum(o["ok"] for o in outs)
    wall = max(o["t_last"] for o in outs) - min(o["t_first"] for o in outs)
    return {
        "batch": sum(sizes) / max(1, len(sizes)),
        "ok": ok,
        "errors": sum(o["errors"] for o in outs),
        "cpu_s": cpu,
        "wall_s": wall,
        "first_error": next((o["first_error"] for o in outs if o["first_error"]), ""),
    }


def main() -> None:
    import uvloop

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="mysql+asyncmy://… (a database the profiler may empty)")
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--events", type=int, default=3, help="events per task")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--out", help="write the pstats here")
    p.add_argument("--no-plain", action="store_true", help="skip the unprofiled run")
    p.add_argument(
        "--spy",
        metavar="FILE",
        help="sample the unprofiled run with py-spy (raw stacks to FILE; loadtest/spy_summary.py reads them)",
    )
    p.add_argument("--no-cprofile", action="store_true", help="skip the cProfile run")
    args = p.parse_args()
    load = os.getloadavg()[0]
    if not args.no_plain:
        plain = uvloop.run(_serve_and_load(args, None))
        per = plain["cpu_s"] / max(1, plain["ok"]) * 1000
        print(
            f"unprofiled: {plain['ok']} events ({plain['errors']} errors {plain['first_error']}) "
            f"{plain['ok'] / plain['wall_s']:.0f}/s, CPU {per:.3f} ms/event, "
            f"batch {plain['batch']:.1f}, load {load:.2f}"
        )
    if args.no_cprofile:
        return
    args.spy = None
    profiler = cProfile.Profile(time.process_time)
    prof = uvloop.run(_serve_and_load(args, profiler))
    per = prof["cpu_s"] / max(1, prof["ok"]) * 1000
    print(f"profiled: {prof['ok']} events, CPU {per:.3f} ms/event, load {os.getloadavg()[0]:.2f}")
    if args.out:
        profiler.dump_stats(args.out)
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats(key).print_stats(args.top)
        print(buf.getvalue())
    _ = sa  # the URL scheme's driver is imported by SQLAlchemy


if __name__ == "__main__":
    main()
