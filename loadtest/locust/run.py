"""Run one locust scenario against the production topology from local processes.

    .venv/bin/python loadtest/locust/run.py SCENARIO [-u USERS] [-r SPAWN_RATE] [-t SECONDS] [--web]

SCENARIO: idle, reporting, hot, storm, backlog, node_restart (``locustfile_<scenario>.py``).
Starts taskcast/dev/topology.py (throwaway MariaDB/Redis unless ``--redis-url``/``--mysql-url`` or
``TASKCAST_TEST_*_URL`` are set; 2 gateways, Status API, reconciler, 2 relays, nginx, all on 127.0.0.1),
runs locust headless (or with the web UI on 127.0.0.1:8089 with ``--web``), performs the scenario's
fault at fixed points of the run — SIGSTOP/SIGCONT of the relays it started (``backlog``), SIGTERM
and restart of gateway1 (``node_restart``) — and prints locust's statistics plus the scenario summary.
Every run is bounded (``-t``; a hard timeout of t + 60 s on locust) and stops everything it started.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent))

from procs import Services  # noqa: E402

from taskcast.dev.topology import Topology  # noqa: E402

SCENARIOS = ("idle", "reporting", "hot", "storm", "backlog", "node_restart")


def locust_env(topo: Topology, summary: Path, args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKCAST_LT_")}
    env.update(
        TASKCAST_LT_WS_URLS=topo.public_ws_url,
        TASKCAST_LT_SSE_URL=f"{topo.public_url}/connection/sse",
        TASKCAST_LT_API_URL=f"http://127.0.0.1:{topo.internal_port}",
        TASKCAST_LT_API_KEY=topo.api_key,
        TASKCAST_LT_HMAC_SECRET=topo.hmac_secret,
        TASKCAST_LT_STATUS_URL=topo.status_api_url,
        TASKCAST_LT_SERVICE_SECRET=topo.service_secret,
        TASKCAST_LT_SUMMARY=str(summary),
        TASKCAST_LT_OWNERS=str(max(1, args.users // 2)),
    )
    if args.scenario == "storm":
        env["TASKCAST_LT_STORM_AT"] = str(round(args.time * 0.4, 1))
        env["TASKCAST_LT_STORM_PERCENT"] = str(args.storm_percent)
    return env


def _num_clients(topo: Topology, n: int) -> int:
    """Gateway ``n``'s (0-based) connected clients from its own ``/api/info`` entry (live for the
    node answering); -1 when it does not answer."""
    name = f"gateway{n + 1}"
    request = urllib.request.Request(
        f"{topo.gateway_url(n)}/api/info",
        data=b"{}",
        headers={"X-API-Key": topo.api_key, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            nodes = json.loads(response.read())["result"]["nodes"]
    except (OSError, ValueError, KeyError):
        return -1  # not answering (yet)
    return max((int(node.get("num_clients", 0)) for node in nodes if node.get("name") == name), default=0)


def _clients_on(topo: Topology, n: int, stop: threading.Event, within: float, at_least: int = 1) -> bool:
    """Whether gateway ``n`` (0-based) has ``at_least`` connected clients within ``within`` seconds,
    unless ``stop`` is set first."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _num_clients(topo, n) >= at_least:
            return True
        if stop.wait(0.2):  # polling interval of a bounded wait
            return False
    return False


def _locust_rows(prefix: Path) -> dict[tuple[str, str], int]:
    """Request counts per (type, name) in the stats CSV that locust rewrites every second."""
    path = Path(f"{prefix}_stats.csv")
    try:
        with path.open(newline="") as fh:
            return {(r["Type"], r["Name"]): int(r["Request Count"]) for r in csv.DictReader(fh) if r["Type"]}
    except (OSError, KeyError, ValueError):
        return {}  # not written yet, or caught mid-rewrite: read again at the next poll


def _seen(prefix: Path, wanted: tuple[tuple[str, str], ...]) -> bool:
    """Whether locust has counted a request of every ``(type, name prefix)`` in ``wanted``."""
    rows = _locust_rows(prefix)
    return all(
        any(t == kind and n.startswith(name) and c > 0 for (t, n), c in rows.items()) for kind, name in wanted
    )


# What a run that ends after its fault waits for, besides the fault itself: the scenario's effect
# as locust's users counted it (a reconnect after the node's 3001, publications received).
END_AFTER_FAULT = {"node_restart": (("WS", "reconnect recovered="), ("PUSH", "task_project"))}


def fault(
    topo: Topology,
    scenario: str,
    seconds: float,
    log: dict[str, Any],
    stop: threading.Event,
    on_conditions: bool = False,
) -> None:
    """The scenario's fault, on a thread, at fixed fractions of the run (only our own processes).
    ``on_conditions`` (``node_restart``): each step waits for its condition instead, within the
    run's bound: the node is stopped once clients are on it and restarted once the moved clients
    are connected to the other node."""
    if scenario == "node_restart" and on_conditions:
        _restart_on_conditions(topo, seconds, log, stop)
        return
    if scenario == "backlog":
        if stop.wait(seconds * 0.25):
            return
        relays = [p for n, p in topo.procs.items() if n.startswith("relay") and p.popen is not None]
        for p in relays:
            assert p.popen is not None
            os.kill(p.popen.pid, signal.SIGSTOP)
        log["paused_at"] = time.time()
        stop.wait(seconds * 0.3)
        for p in relays:
            assert p.popen is not None
            os.kill(p.popen.pid, signal.SIGCONT)
        log["resumed_at"] = time.time()
    elif scenario == "node_restart":
        # Not at a fixed time after locust's start (a loaded machine may start its users late):
        # once clients are on the node, so that stopping it moves some.
        if not _clients_on(topo, 0, stop, within=seconds * 0.7) or stop.wait(seconds * 0.1):
            return
        node = topo.procs["gateway1"]
        log["stopped_at"] = time.time()
        node.stop()
        log["stop_took_s"] = time.time() - log["stopped_at"]
        if stop.wait(seconds * 0.15):
            return
        node.start()
        node.wait_ready()
        log["restarted_at"] = time.time()


def _restart_on_conditions(
    topo: Topology, seconds: float, log: dict[str, Any], stop: threading.Event
) -> None:
    """node_restart on conditions: stop gateway1 once clients are on it, start it again once the
    clients it had are connected to gateway2, all within ``seconds``."""
    deadline = time.monotonic() + seconds
    if not _clients_on(topo, 0, stop, within=seconds):
        return
    moved, stayed = _num_clients(topo, 0), max(0, _num_clients(topo, 1))
    node = topo.procs["gateway1"]
    log["stopped_at"] = time.time()
    node.stop()
    log["stop_took_s"] = time.time() - log["stopped_at"]
    log["moved"] = moved
    if not _clients_on(topo, 1, stop, within=deadline - time.monotonic(), at_least=stayed + moved):
        return
    node.start()
    node.wait_ready()
    log["restarted_at"] = time.time()


def _number(cell: str) -> float:
    """A locust CSV cell: empty or ``N/A`` (a row without samples, e.g. no request yet) is 0."""
    return 0.0 if cell in ("", "N/A") else float(cell)


def _percentile(histogram: dict[str, int], total: int, fraction: float) -> float:
    """The response time (ms) at ``fraction`` of a locust histogram {rounded ms: count}."""
    if total <= 0:
        return 0.0
    rank = fraction * total
    seen = 0
    for ms, count in sorted(((float(k), v) for k, v in histogram.items()), reverse=False):
        seen += count
        if seen >= rank:
            return ms
    return max(float(k) for k in histogram) if histogram else 0.0


def read_stats(prefix: Path) -> list[dict[str, Any]]:
    """The run's final statistics: ``<prefix>.json`` (locust's ``--json-file``, written once at
    exit with every request counted) when present, else the ``<prefix>_stats.csv`` that locust
    rewrites periodically (which can miss the last second, or everything, on a loaded machine)."""
    json_path = Path(f"{prefix}.json")
    if json_path.exists():
        return _read_stats_json(json_path)
    path = Path(f"{prefix}_stats.csv")
    if not path.exists():
        return []
    rows = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            rows.append(
                {
                    "type": row["Type"],
                    "name": row["Name"],
                    "requests": int(row["Request Count"]),
                    "failures": int(row["Failure Count"]),
                    "p50_ms": _number(row["50%"]),
                    "p95_ms": _number(row["95%"]),
                    "p99_ms": _number(row["99%"]),
                    "max_ms": _number(row["Max Response Time"]),
                    "rps": _number(row["Requests/s"]),
                }
            )
    return rows


def _read_stats_json(path: Path) -> list[dict[str, Any]]:
    rows = []
    for entry in json.loads(path.read_text() or "[]"):
        requests = int(entry.get("num_requests") or 0)
        histogram = {str(k): int(v) for k, v in (entry.get("response_times") or {}).items()}
        timed = sum(histogram.values())
        span = (entry.get("last_request_timestamp") or 0.0) - (entry.get("start_time") or 0.0)
        rows.append(
            {
                "type": entry.get("method") or "",
                "name": entry.get("name") or "",
                "requests": requests,
                "failures": int(entry.get("num_failures") or 0),
                "p50_ms": _percentile(histogram, timed, 0.50),
                "p95_ms": _percentile(histogram, timed, 0.95),
                "p99_ms": _percentile(histogram, timed, 0.99),
                "max_ms": float(entry.get("max_response_time") or 0),
                "rps": round(requests / span, 2) if span > 0 else float(requests),
            }
        )
    return rows


def analyse(scenario: str, summary: dict[str, Any], log: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(summary.get("counters", {}))
    samples = summary.get("samples", [])
    if scenario == "backlog" and "resumed_at" in log and samples:
        late = [t for t, lat in samples if lat > 1000 and t >= log["paused_at"]]
        out["max_latency_ms"] = round(max(lat for _, lat in samples), 1)
        out["caught_up_s_after_resume"] = round(max(late) - log["resumed_at"], 2) if late else 0.0
        out["paused_s"] = round(log["resumed_at"] - log["paused_at"], 2)
    if scenario == "storm" and summary.get("drops"):
        out["drop_at"] = summary["drops"][0]
    out.update({k: round(v, 3) if isinstance(v, float) else v for k, v in log.items()})
    return out


def run_locust(topo: Topology, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One bounded locust run of ``args.scenario`` against a started topology, with its fault."""
    summary_path = workdir / f"summary-{args.scenario}.json"
    prefix = workdir / f"locust-{args.scenario}"
    log: dict[str, Any] = {}
    stop = threading.Event()
    argv = [
        sys.executable, "-m", "locust", "-f", str(HERE / f"locustfile_{args.scenario}.py"),
        "-u", str(args.users), "-r", str(args.spawn_rate), "-t", f"{args.time}s",
        "--stop-timeout", "2", "--csv", str(prefix), "--json-file", str(prefix), "--loglevel", "WARNING",
    ]  # fmt: skip
    if args.web:
        argv += ["--web-host", "127.0.0.1", "--web-port", str(args.web_port), "--autostart"]
        print(f"locust web UI: http://127.0.0.1:{args.web_port} (stops after {args.time} s)", flush=True)
    else:
        argv += ["--headless", "--only-summary"]
    env = locust_env(topo, summary_path, args)
    stderr_path = workdir / f"locust-{args.scenario}.stderr"
    end_after_fault = args.end_after_fault and args.scenario in END_AFTER_FAULT
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(argv, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    thread = threading.Thread(
        target=fault, args=(topo, args.scenario, args.time, log, stop, end_after_fault), daemon=True
    )
    thread.start()
    try:
        if end_after_fault:
            # -t is then the bound: the run ends (SIGTERM: locust writes its statistics and exits)
            # once the fault is over and locust counted its effect.
            wanted = END_AFTER_FAULT[args.scenario]
            while proc.poll() is None and not ("restarted_at" in log and _seen(prefix, wanted)):
                if not thread.is_alive() and "restarted_at" not in log:
                    break  # the fault gave up within its bound: let the run end at -t
                time.sleep(0.2)  # polling interval of a bounded wait (locust's -t bounds it)
            if proc.poll() is None and "restarted_at" in log:
                proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=args.time + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:  # interrupted (a test's time limit, Ctrl-C): no locust outlives us
            proc.kill()
            proc.wait()
        stop.set()
        thread.join(timeout=30)
    err = stderr_path.read_text(errors="replace")
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return {
        "scenario": args.scenario,
        "users": args.users,
        "seconds": args.time,
        "exit_code": proc.returncode,
        "stats": read_stats(prefix),
        "summary": analyse(args.scenario, summary, log),
        "stderr_tail": err[-3000:],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Starts services + topology, runs the scenario, stops everything."""
    services = Services(args.redis_url, args.mysql_url).start()
    workdir = Path(tempfile.mkdtemp(prefix=f"taskcast-locust-{args.scenario}-"))
    workdir.chmod(0o755)  # nginx workers (nobody) spool request bodies under it
    topo = Topology(workdir, services.redis_url, services.mysql_url)
    try:
        topo.start()
        return run_locust(topo, args, workdir)
    finally:
        topo.stop()
        services.stop()


def print_result(res: dict[str, Any]) -> None:
    print(
        f"\n== {res['scenario']}: {res['users']} users, {res['seconds']} s (locust exit {res['exit_code']})"
    )
    print(f"{'type':<6} {'name':<40} {'reqs':>7} {'fails':>6} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>8}")
    for r in res["stats"]:
        print(
            f"{r['type']:<6} {r['name'][:40]:<40} {r['requests']:>7} {r['failures']:>6} {r['p50_ms']:>7.0f} "
            f"{r['p95_ms']:>7.0f} {r['p99_ms']:>7.0f} {r['max_ms']:>8.0f}"
        )
    print("summary:", json.dumps(res["summary"]))


def build_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("-u", "--users", type=int, default=50)
    p.add_argument("-r", "--spawn-rate", type=float, default=50)
    p.add_argument("-t", "--time", type=int, default=30, help="run time, seconds")
    p.add_argument("--storm-percent", type=float, default=30)
    p.add_argument(
        "--end-after-fault",
        action="store_true",
        help="node_restart: restart once the moved clients reconnected and end the run once locust "
        "counted a reconnect and a push (-t is then only the bound)",
    )
    p.add_argument("--web", action="store_true", help="web UI on 127.0.0.1 (the run still ends after -t)")
    p.add_argument("--web-port", type=int, default=8089)
    p.add_argument("--redis-url", default="")
    p.add_argument("--mysql-url", default="")
    p.add_argument("--json", default="", help="write the result here")
    args = p.parse_args(argv)
    if args.users > 2000 or args.time > 1800:
        p.error("bounded runs only: at most 2000 users and 1800 s")
    return args


def main(argv: list[str] | None = None) -> int:
    args = build_args(argv)
    res = run(args)
    print_result(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
