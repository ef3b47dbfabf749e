"""Ingest over real HTTP with the load generator OUT of process (issue 16, item 2/4; part of
``make bench-ingest``, called by bench_ingest.py ``--processes``).

For each worker count W: ``taskcast status-api serve --workers W`` on MariaDB (one port, SO_REUSEPORT),
``--tasks`` tasks created over HTTP (setup, not measured), then ``--generators`` generator processes
(this file with ``--generate``: uvloop, raw keep-alive HTTP/1.1 from loadtest/fleet.py) start at one
agreed wall-clock instant and send each task's events in order (1 reporter per task: STARTED, then
progress), with at most ``--concurrency`` requests in flight in all. Accepted events/s = accepted
events / (last answer − first send) over all generators; latency = send → answer, per event. CPU
seconds of the Status API workers and of MariaDB come from psutil.
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
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import jwt
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import HTTPPool, pct

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret-0123456789abcdef0123456789"


def progress_event(ctx: dict[str, Any], seq: int, *, total: int) -> dict[str, Any]:
    """The benchmarks' worker event: STEP_STARTED at ``seq`` 1, then STEP_PROGRESS ``seq``/``total``
    for the step in ``ctx`` (``taskId``, ``stepId``, ``producerId`` of a created task)."""
    return {
        "eventId": uuid.uuid4().hex,
        "taskId": ctx["taskId"],
        "taskAttempt": 1,
        "stepId": ctx["stepId"],
        "operationCode": "DOCUMENT.PARSE",
        "stepAttempt": 1,
        "producerId": ctx["producerId"],
        "sourceSeq": seq,
        "eventType": "STEP_STARTED" if seq == 1 else "STEP_PROGRESS",
        "businessStatus": "PARSING",
        "occurredAt": "2026-09-21T07:10:18.120Z",
        "progress": {"current": seq, "total": total, "unit": "page"},
    }


def event_request(ctx: dict[str, Any], seq: int, *, total: int) -> tuple[dict[str, Any], dict[str, str]]:
    """:func:`progress_event` and the headers a worker sends it with (its execution token, the
    event id as the idempotency key)."""
    body = progress_event(ctx, seq, total=total)
    return body, {"Authorization": f"Bearer {ctx['executionToken']}", "Idempotency-Key": body["eventId"]}


def server_config(db_url: str, port: int, pool: int) -> dict[str, Any]:
    return {
        "database": {"url": db_url, "pool_size": pool, "max_overflow": pool},
        "http": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "internal_auth": {"mode": "jwt", "jwt_secret": SECRET, "rate_per_second": 0},
        "execution_token": {"secret": SECRET},
        "user_auth": {"mode": "hs", "secret": SECRET},
        "realtime": {"secret": SECRET},
        "reconciler": {"enabled": False},
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int, workers: psutil.Process, n: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            if r.status != 200:
                return False
    except OSError:
        return False
    listening = 0
    for child in workers.children() or [workers]:  # --workers 1 serves in the process itself
        try:
            conns = child.net_connections("tcp")
        except psutil.Error:
            continue
        listening += any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in conns)
    return listening >= n


async def _create(
    port: int,
    tasks: int,
    secret: str = SECRET,
    owner: Callable[[int], str] = lambda j: f"u{j}",
    conns: int = 16,
) -> list[dict[str, Any]]:
    """Creates ``tasks`` one-step tasks of tenant ``bench`` over HTTP (a coordinator's token signed
    with ``secret``; task ``j`` owned by ``owner(j)``) with ``conns`` requests in flight; each
    task's step context (``taskId``, ``stepId``, ``producerId``, ``executionToken``), in order."""
    token = jwt.encode(
        {"sub": "task-coordinator", "roles": ["coordinator"], "exp": int(time.time()) + 7200}, secret, "HS256"
    )
    pool = HTTPPool(port, conns)
    await pool.open()
    headers = {"Authorization": f"Bearer {token}"}

    async def one(j: int) -> dict[str, Any]:
        body = {
            "tenantId": "bench",
            "ownerId": owner(j),
            "product": "DOCUMENT",
            "taskType": "DOCUMENT_PROCESS",
            "title": "bench",
            "statusDefinitionVersion": 1,
            "operationDefinitionVersion": 1,
            "steps": [
                {"stepId": "s00", "operationCode": "DOCUMENT.PARSE", "producerId": "document-parser-1"}
            ],
        }
        status, raw = await pool.request("/internal/v1/tasks", body, headers, wait_s=60)
        if status != 201:
            raise RuntimeError(f"create task: {status} {raw[:200]!r}")
        s = json.loads(raw)["steps"][0]
        return {k: s[k] for k in ("taskId", "stepId", "producerId", "executionToken")}

    gate = asyncio.Semaphore(conns)  # the pool's size: a request waits for no connection

    async def gated(j: int) -> dict[str, Any]:
        async with gate:
            return await one(j)

    try:
        return list(await asyncio.gather(*(gated(j) for j in range(tasks))))
    finally:
        await pool.close()


def stop_server(server: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Stop a Status API this benchmark started (SIGTERM, SIGKILL after 40 s) and close its log."""
    server.terminate()
    try:
        server.wait(timeout=40)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def run_case(db_url: str, workers: int, args: argparse.Namespace, db_pid: int | None) -> dict[str, Any]:
    """One worker count: server up, tasks created, generators run; the result row."""
    import uvloop

    work = Path(tempfile.mkdtemp(prefix="taskcast-ingest-http."))
    port = _free_port()
    cfg = work / "status-api.json"
    cfg.write_text(json.dumps(server_config(db_url, port, args.pool)))
    log = (work / "server.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKCAST_")}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskcast",
            "status-api",
            "serve",
            "--config",
            str(cfg),
            "--workers",
            str(workers),
        ],
        cwd=getattr(args, "server_root", None) or ROOT,
        env={**env, "PYTHONPATH": str(getattr(args, "server_root", None) or ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        sup = psutil.Process(server.pid)
        deadline = time.monotonic() + 180
        while not _ready(port, sup, workers):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"status api not ready: {(work / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)  # polling a process's readiness from a benchmark driver
        contexts = uvloop.run(_create(port, args.tasks))
        shares = [contexts[g :: args.generators] for g in range(args.generators)]
        start_at = time.time() + 3.0  # every generator is up and connected by then
        gens = []
        for g, share in enumerate(shares):
            path = work / f"gen{g}.json"
            path.write_text(json.dumps(share))
            argv = [sys.executable, __file__, "--generate", str(path), "--port", str(port)]
            argv += ["--start-at", str(start_at), "--events", str(args.wide_events)]
            argv += ["--concurrency", str(max(1, args.concurrency // args.generators))]
            gens.append(subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT))
        worker_procs = sup.children() or [sup]
        procs = [*worker_procs, *([psutil.Process(db_pid)] if db_pid else [])]
        spies = _start_spies(worker_procs, work) if args.profile else []
        cpu0 = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
        outs = [json.loads(g.communicate(timeout=600)[0]) for g in gens]
        cpu = {p.pid: sum(p.cpu_times()[:2]) - cpu0[p.pid] for p in procs}
        split = _stop_spies(spies, getattr(args, "spy_out", None))
    finally:
        stop_server(server, log)
    lat = [x for o in outs for x in o["latencies_ms"]]
    ok = sum(o["ok"] for o in outs)
    wall = max(o["t_last"] for o in outs) - min(o["t_first"] for o in outs)
    return {
        "scenario": f"{args.tasks} tasks x 1 reporter, HTTP, {workers} worker(s), "
        f"{args.generators} generator processes, {args.concurrency} in flight",
        "workers": workers,
        "events": ok,
        "errors": sum(o["errors"] for o in outs),
        "first_error": next((o["first_error"] for o in outs if o["first_error"]), ""),
        "seconds": wall,
        "eps": ok / wall if wall > 0 else 0.0,
        "p50": pct(lat, 50),
        "p99": pct(lat, 99),
        "mean": sum(lat) / len(lat) if lat else float("nan"),
        "cpu_workers_s": sum(cpu[p.pid] for p in worker_procs),
        "cpu_mariadb_s": cpu.get(db_pid or -1, 0.0),
        "load": os.getloadavg()[0],
        "profile": split,
    }


# --- py-spy of the workers: where an event's CPU goes -----------------------------------------

#: (category, substrings of a frame): a stack counts for the FIRST category any of its frames
#: matches, so the specific parts (auth, schema, SQL) win over the layers around them (the batch
#: runner, HTTP). SQLAlchemy runs statements in greenlets, whose samples lose the caller's frames:
#: SQL work is therefore matched by SQLAlchemy's and the driver's own frames.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("auth (JWT verify, token cache)", ("jwt/", "status_api/tokens.py", "status_api/auth.py")),
    ("JSON Schema validation", ("jsonschema", "status_api/schemas.py", "fastjsonschema")),
    ("JSON parse (request body)", ("status_api/json_input.py",)),
    ("wake-up publish", ("status_api/wake.py",)),
    ("SQLAlchemy statement building", ("sqlalchemy/sql/", "cache_key", "sqlalchemy/engine/default.py")),
    ("SQL driver + results (asyncmy, SQLAlchemy engine)", ("asyncmy", "sqlalchemy/")),
    ("domain (state machine, projections)", ("status_api/domain/",)),
    ("service (ingest, outbox rows, hashing)", ("status_api/service/", "status_api/storage/")),
    ("JSON encode (responses, payloads)", ("json/encoder", "orjson", "starlette/responses.py")),
    ("group commit (queue, batch runner)", ("status_api/group_commit.py",)),
    ("HTTP (uvicorn, starlette, routes)", ("uvicorn/", "starlette/", "httptools", "status_api/")),
]
IDLE = ("select (selectors.py", "EpollSelector.select", "_run_once (asyncio/base_events.py")


def categorize(raw: str) -> list[tuple[str, float]]:
    """py-spy raw (collapsed) stacks -> (category, % of the non-idle samples), largest first."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.splitlines():
        stack, _, cnt = line.rpartition(" ")
        if not stack or not cnt.isdigit():
            continue
        frames = stack.split(";")
        if any(marker in frames[-1] for marker in IDLE):
            continue  # waiting for the loop's next event, not work
        total += int(cnt)
        name = next((c for c, subs in CATEGORIES if any(s in f for f in frames for s in subs)), "other")
        counts[name] = counts.get(name, 0) + int(cnt)
    return sorted(((c, round(100 * n / total, 1)) for c, n in counts.items()), key=lambda x: -x[1])


def _start_spies(workers: list[psutil.Process], work: Path) -> list[tuple[subprocess.Popen[bytes], Path]]:
    spy = Path(sys.executable).parent / "py-spy"
    out = []
    for w in workers:
        path = work / f"spy-{w.pid}.txt"
        argv = [str(spy), "record", "--nonblocking", "-r", "100", "-f", "raw", "-o", str(path)]
        argv += ["-p", str(w.pid)]
        out.append((subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), path))
    return out


def _stop_spies(
    spies: list[tuple[subprocess.Popen[bytes], Path]], raw_out: str | None = None
) -> list[tuple[str, float]]:
    """Stop the samplers; the categories of their stacks (``raw_out``: the raw stacks there too,
    for ``loadtest/spy_summary.py``)."""
    import signal

    raw = []
    for proc, path in spies:
        proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raw.append(path.read_text() if path.exists() else "")
    if raw_out and spies:
        Path(raw_out).write_text("\n".join(raw))
    return categorize("\n".join(raw)) if spies else []


# --- the generator process ---------------------------------------------------------------------


async def _generate(args: argparse.Namespace, contexts: list[dict[str, Any]]) -> dict[str, Any]:
    pool = HTTPPool(args.port, args.concurrency)
    await pool.open()
    lat: list[float] = []
    ok = errors = 0
    first_error = ""
    t_first = t_last = 0.0

    gate = asyncio.Semaphore(args.concurrency)  # = the pool size: latency excludes waiting here

    async def reporter(ctx: dict[str, Any]) -> None:
        async with gate:
            await send_all(ctx)

    async def send_all(ctx: dict[str, Any]) -> None:
        nonlocal ok, errors, first_error, t_last
        for seq in range(1, args.events + 1):
            body, headers = event_request(ctx, seq, total=1000)
            t = time.perf_counter()
            try:
                status, raw = await pool.request("/internal/v1/task-events", body, headers, wait_s=60)
            except Exception as exc:  # counted and reported, the run goes on
                errors += 1
                first_error = first_error or repr(exc)[:200]
                continue
            if status != 200:
                errors += 1
                first_error = first_error or f"{status} {raw[:200]!r}"
                continue
            ok += 1
            lat.append((time.perf_counter() - t) * 1000)
            t_last = time.time()

    delay = args.start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)  # the agreed start instant of all generators
    t_first = time.time()
    await asyncio.gather(*(reporter(c) for c in contexts))  # the pool bounds what is in flight
    await pool.close()
    return {"ok": ok, "errors": errors, "first_error": first_error, "latencies_ms": lat,
            "t_first": t_first, "t_last": t_last or time.time()}  # fmt: skip


def main() -> None:
    import uvloop

    p = argparse.ArgumentParser(description="generator process of loadtest/ingest_http.py")
    p.add_argument("--generate", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--start-at", type=float, required=True)
    p.add_argument("--events", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=16)
    args = p.parse_args()
    contexts = json.loads(Path(args.generate).read_text())
    print(json.dumps(uvloop.run(_generate(args, contexts))))


if __name__ == "__main__":
    main()
