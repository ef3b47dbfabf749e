# ruff: noqa: E501  (markdown table lines are long)
"""Issue 20 items 4/5: a gateway with 1,000 stalled readers under a 1,000 publications/s
progress stream reaches the *hold* state (seed §13.3), keeps its memory flat, and loses no truth.

    sudo .venv/bin/python loadtest/bench_stalled.py --out docs/PERFORMANCE.md   # ~8 min
    .venv/bin/python loadtest/bench_stalled.py --seconds 60 --readers 200       # a smoke run

**Network.** On loopback the kernel autotunes a socket's send buffer up to ``tcp_wmem`` max
(4 MiB here): a reader that stops reading absorbs minutes of a 2 KB/s stream before the gateway's
own queue backs up, so nothing is held. As root the script re-runs itself inside a new network
namespace (``unshare -n``) with ``net.ipv4.tcp_wmem``/``tcp_rmem`` = ``4096 16384 65536`` there (a
WAN client's small window; the host's settings are untouched); the gateway, the readers and the
publisher all run inside it. ``--no-netns`` skips that (then the hold state may never come).

**Load.** ``--readers`` raw WebSocket clients (4 KiB receive buffers, one child process on CPU 1:
loadtest/stalled_readers.py, which also checks what they got)
each connect, subscribe to their own ``task_user:u<i>`` channel and then never read. The publisher
(CPU 1) sends ``--rate`` publications/s in ``POST /api/batch`` of 100, one per reader per round,
cycling over ``TASKS_PER_USER`` task slots per reader. Each task lives ``TASK_LIFE`` versions and
is tagged as the Status API's relay tags it (status_api/storage/outbox.py ``publication_tags``):
``task=<id>``, plus ``conflate=never`` on its first version (a new task), its terminal state and
every notice (one per reader every ``NOTICE_EVERY`` rounds); progress versions are conflatable.
Every publication carries ~2 KB. The gateway (CPU 0): ``client.queue_conflate_size``
``--conflate-size``, ``client.queue_max_size`` ``--max-size``, pings off (a stalled reader cannot
pong). ``--progress-only``: conflatable progress only (no task starts or ends, no notices), the
stream whose held memory must not grow at all.

**Measured.** Every ``--sample-every`` s: gateway RSS, CPU, held bytes, held connections,
conflated publications, connected clients. After ``--seconds`` the publisher stops, sends one
``conflate=never`` end marker per reader, and the readers resume: each reads until its end marker
and checks, for every task it was sent, that the newest version arrived last (versions only
increase) and that every ``conflate=never`` publication arrived, once, in order.

Results: the section between ``<!-- stalled:start -->`` and ``<!-- stalled:end -->`` of ``--out``
(``--progress-only``: between ``<!-- stalled:progress:start -->`` and ``<!-- stalled:progress:end -->``);
raw JSON in ``--json``. Safety: 127.0.0.1 inside the namespace, bounded loops, only PIDs started
here signalled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (str(ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

import bench_fanout as bf  # noqa: E402
import fanout_procs as procs  # noqa: E402
from fleet import git_commit, replace_block  # noqa: E402

from taskcast.dev.procs import free_port  # noqa: E402

START, END = "<!-- stalled:start -->", "<!-- stalled:end -->"
P_START, P_END = "<!-- stalled:progress:start -->", "<!-- stalled:progress:end -->"
"""Where a ``--progress-only`` run goes (its own block, after the main one's notes)."""
TASKS_PER_USER = 5
TASK_LIFE = 200
"""Versions per task: 1 = new (never), 2..TASK_LIFE-1 = progress (conflatable), TASK_LIFE = terminal (never)."""
NOTICE_EVERY = 200
"""Rounds between two notices (never) to one reader."""
PAD = "x" * 2000
NETNS_SYSCTL = "4096 16384 65536"
BATCH = 100


# ---------------------------------------------------------------------------------- publisher


class Stream:
    """The progress stream: one publication per reader per round, its task slots in turn, and
    what each reader must end up with (newest version per task, every never-conflated seq)."""

    def __init__(self, readers: int, progress_only: bool = False) -> None:
        self.readers = readers
        self.progress_only = progress_only
        """Only conflatable progress: tasks never start or end, no notices (``--progress-only``)."""
        # slot state per reader: [generation, next version]; staggered so terminals spread out
        first = 2 if progress_only else 1
        self.slots = [
            [
                [0, first + (s * TASK_LIFE // TASKS_PER_USER + u * 7) % TASK_LIFE]
                for s in range(TASKS_PER_USER)
            ]
            for u in range(readers)
        ]
        self.terminals: list[list[str]] = [[] for _ in range(readers)]
        self.finals: list[dict[str, int]] = [{} for _ in range(readers)]
        self.nevers: list[list[int]] = [[] for _ in range(readers)]
        self.seq = 0
        self.rounds = 0
        self.kinds = {"new": 0, "progress": 0, "terminal": 0, "notice": 0}

    def publication(self, user: int, rnd: int) -> dict[str, Any]:
        self.seq += 1
        seq = self.seq
        slot = self.slots[user][rnd % TASKS_PER_USER]
        task = f"u{user}-s{rnd % TASKS_PER_USER}-g{slot[0]}"
        if not self.progress_only and (rnd + user) % NOTICE_EVERY == NOTICE_EVERY - 1:
            kind, data = "notice", {"task": task, "notice": seq}
        else:
            version = slot[1]
            kind = "progress"
            if not self.progress_only:
                kind = "new" if version == 1 else "terminal" if version == TASK_LIFE else "progress"
            data = {"task": task, "version": version, "state": kind}
            self.finals[user][task] = version
            if kind == "terminal":
                self.terminals[user].append(task)
                slot[0], slot[1] = slot[0] + 1, 1
            else:
                slot[1] = version + 1
        self.kinds[kind] += 1
        tags = {"task": task}
        if kind != "progress":
            tags["conflate"] = "never"
            data["never"] = True
            self.nevers[user].append(seq)
        data["seq"] = seq
        data["pad"] = PAD
        return {"publish": {"channel": f"task_user:u{user}", "data": data, "tags": tags}}

    def batches(self, rnd: int) -> list[bytes]:
        """One round: one publication per reader, in batches of ``BATCH``."""
        cmds = [self.publication(u, rnd) for u in range(self.readers)]
        self.rounds += 1
        return [json.dumps({"commands": cmds[i : i + BATCH]}).encode() for i in range(0, len(cmds), BATCH)]

    def end_batches(self) -> list[bytes]:
        cmds = [
            {"publish": {"channel": f"task_user:u{u}", "data": {"end": True}, "tags": {"conflate": "never"}}}
            for u in range(self.readers)
        ]
        return [json.dumps({"commands": cmds[i : i + BATCH]}).encode() for i in range(0, len(cmds), BATCH)]

    def expected(self) -> dict[str, Any]:
        return {
            str(u): {"finals": self.finals[u], "nevers": self.nevers[u], "terminals": self.terminals[u]}
            for u in range(self.readers)
        }


# ------------------------------------------------------------------------------------ gateway


def gateway_config(port: int, a: argparse.Namespace) -> dict[str, Any]:
    return {
        "http_server": {"address": procs.HOST, "port": port},
        "http_api": {"key": procs.API_KEY},
        "health": {"enabled": True},
        "prometheus": {"enabled": True},
        "log": {"level": "error"},
        # Stalled readers cannot answer pings: without this they would get 3012 (no pong) after
        # ping_interval + pong_timeout, as in Centrifugo; the run measures the queues, not that rule.
        "client": {
            "insecure": True,
            "queue_conflate_size": a.conflate_size,
            "queue_max_size": a.max_size,
            "ping_interval": "3600s",
            "pong_timeout": "3500s",
        },
        "channel": {
            "namespaces": [
                {
                    "name": "task_user",
                    "history_size": 10,
                    "history_ttl": "300s",
                    "allow_subscribe_for_client": True,
                    "conflation_tag": "task",
                }
            ]
        },
    }


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{procs.HOST}:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for key, name in (
        ("held_bytes", "taskcast_gateway_client_held_bytes"),
        ("held_conns", "taskcast_gateway_client_held_connections"),
        ("conflated", "taskcast_gateway_client_conflated_publications_total"),
        ("clients", "centrifugo_node_num_clients"),
    ):
        m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        out[key] = float(m.group(1)) if m else -1.0
    return out


async def _post(pool: bf.HTTPPool, body: bytes) -> bool:
    try:
        _, w = await asyncio.wait_for(pool.idle.get(), 30)
    except TimeoutError:
        return False
    w.write(pool.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    pool.inflight += 1
    return True


def slope(samples: list[dict[str, Any]], key: str, t_from: float) -> float | None:
    """Least-squares slope of ``key`` per minute over the samples from ``t_from`` s on."""
    pts = [(s["t_s"], s[key]) for s in samples if s["t_s"] >= t_from]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    den = sum((p[0] - mx) ** 2 for p in pts)
    return round(sum((p[0] - mx) * (p[1] - my) for p in pts) / den * 60, 3) if den else None


async def run(a: argparse.Namespace, tmp: Path, log: Any) -> dict[str, Any]:
    port = free_port()
    path = tmp / "gateway.json"
    path.write_text(json.dumps(gateway_config(port, a)))
    gw = procs.popen(
        ["taskset", "-c", "0", procs.PY, "-m", "taskcast", "gateway", "--config", str(path)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    if not procs.wait_health(port, 90):
        raise RuntimeError("gateway did not become healthy")
    server = procs.Server(gw, name="gateway")
    readers = procs.popen(
        ["taskset", "-c", "1", procs.PY, str(HERE / "stalled_readers.py"), str(port), str(a.readers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert readers.stdout is not None and readers.stdin is not None
    loop = asyncio.get_running_loop()
    line = await asyncio.wait_for(loop.run_in_executor(None, readers.stdout.readline), 300)
    if not line.startswith("READY"):
        raise RuntimeError(f"readers failed: {line!r}")
    idle_rss = server.rss()
    stream = Stream(a.readers, a.progress_only)
    # One keep-alive connection per batch of readers, one request in flight on each: a reader's
    # publications (and its end marker) reach the gateway in the order they were made.
    pools = [
        bf.HTTPPool(port, "/api/batch", {"X-API-Key": procs.API_KEY}, b"%s", 1)
        for _ in range((a.readers + BATCH - 1) // BATCH)
    ]
    for pool in pools:
        await pool.open()
    samples: list[dict[str, Any]] = []
    round_s = a.readers / a.rate
    t0 = time.monotonic()
    cpu0, cpu_prev, t_prev = server.cpu(), server.cpu(), t0
    next_sample = t0
    late = 0.0
    rnd = 0
    try:
        while time.monotonic() - t0 < a.seconds:  # bounded by --seconds
            due = t0 + rnd * round_s
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late = max(late, -delay)
            for pool, body in zip(pools, stream.batches(rnd), strict=True):
                if not await _post(pool, body):
                    raise RuntimeError("publisher stuck: no idle connection for 30 s")
            rnd += 1
            now = time.monotonic()
            if now >= next_sample:
                m = await loop.run_in_executor(None, scrape, port)
                cpu = server.cpu()
                samples.append(
                    {
                        "t_s": round(now - t0, 1),
                        "rss_mb": round(server.rss() / 2**20, 1),
                        "cpu_pct": round((cpu - cpu_prev) / max(1e-9, now - t_prev) * 100, 1),
                        "published": stream.seq,
                        **m,
                    }
                )
                cpu_prev, t_prev = cpu, now
                print(f"stalled {samples[-1]}", flush=True)
                next_sample = now + a.sample_every
        elapsed = time.monotonic() - t0
        cpu_s = server.cpu() - cpu0
        for pool, body in zip(pools, stream.end_batches(), strict=True):
            await _post(pool, body)
        for pool in pools:
            await pool.settle(30)
        before = await loop.run_in_executor(None, scrape, port)
        before["rss_mb"] = round(server.rss() / 2**20, 1)
        exp_path, out_path = tmp / "expected.json", tmp / "tally.json"
        exp_path.write_text(json.dumps(stream.expected()))
        readers.stdin.write(f"RESUME {exp_path} {out_path} {a.resume_within}\n")
        readers.stdin.flush()
        line = await asyncio.wait_for(
            loop.run_in_executor(None, readers.stdout.readline), a.resume_within + 120
        )
        if not line.startswith("DONE"):
            raise RuntimeError(f"readers failed after resume: {line!r}")
        tally = json.loads(out_path.read_text())
        after = await loop.run_in_executor(None, scrape, port)
        after["rss_mb"] = round(server.rss() / 2**20, 1)
    finally:
        for pool in pools:
            await pool.close()
        with contextlib.suppress(OSError):
            readers.stdin.close()
        procs.wait_or_stop(readers, 10)
        server.stop()
    return {
        "readers": a.readers,
        "rate": a.rate,
        "seconds": round(elapsed, 1),
        "published": stream.seq,
        "kinds": stream.kinds,
        "pub_ok_batches": sum(p.ok for p in pools),
        "pub_errors": sum(p.errors for p in pools),
        "first_error": next((p.first_error for p in pools if p.first_error), ""),
        "publisher_max_late_s": round(late, 2),
        "idle_rss_mb": round(idle_rss / 2**20, 1),
        "server_cpu_pct": round(cpu_s / max(1e-9, elapsed) * 100, 1),
        "server_cpu_s": round(cpu_s, 1),
        "progress_only": a.progress_only,
        "conflate_size": a.conflate_size,
        "max_size": a.max_size,
        "samples": samples,
        "before_resume": before,
        "after_resume": after,
        "tally": tally,
    }


def analyse(c: dict[str, Any]) -> dict[str, Any]:
    """Warm-up end (first sample with ≥ 95 % of the readers held) and the slopes after it."""
    s = c["samples"]
    hold_t = next((x["t_s"] for x in s if x["held_conns"] >= 0.95 * c["readers"]), None)
    steady_from = (hold_t or 0) + 30
    steady = [x for x in s if x["t_s"] >= steady_from]
    return {
        "hold_reached_s": hold_t,
        "steady_from_s": steady_from,
        "steady_s": round(steady[-1]["t_s"] - steady[0]["t_s"], 1) if len(steady) > 1 else 0,
        "rss_slope_mib_min": slope(s, "rss_mb", steady_from),
        "held_slope_mib_min": round(v / 2**20, 3)
        if (v := slope(s, "held_bytes", steady_from)) is not None
        else None,
        "conflated_per_s": round(slope(s, "conflated", steady_from) / 60, 1) if len(steady) > 2 else None,  # type: ignore[operator]
        "steady_cpu_pct": round(sum(x["cpu_pct"] for x in steady) / len(steady), 1) if steady else None,
        "max_held_bytes": max((x["held_bytes"] for x in s), default=0),
        "min_clients": min((x["clients"] for x in s), default=0),
    }


# ------------------------------------------------------------------------------------- report


def render(res: dict[str, Any]) -> str:
    c, an, env, t = res["run"], res["analysis"], res["env"], res["run"]["tally"]
    never_count = c["kinds"]["new"] + c["kinds"]["terminal"] + c["kinds"]["notice"]
    start, end = (P_START, P_END) if c.get("progress_only") else (START, END)
    title = (
        "### Progress only: the same readers, no never-conflated publications (`--progress-only`)"
        if c.get("progress_only")
        else "## 1,000 stalled readers that reach the hold state (issue 20 items 4/5, seed §13.3, `loadtest/bench_stalled.py`)"
    )
    out = [
        start,
        "",
        title,
        "",
        f"Run {res['when']} at {env['commit']} on {env['cpus']} CPUs; `uptime` load before: {env['load_before']}, "
        f"after: {env['load_after']} (shared machine: other sessions' test suites and `make bench-fanout` ran beside it). "
        f"Network: {env['netns']}.",
        "",
        f"{c['readers']:,} readers that stop reading after subscribing (each its own `task_user:` channel, 4 KiB receive "
        f"buffers); {c['rate']:,} publications/s (`/api/batch` of {BATCH}) of ~2 KB for {c['seconds']} s: "
        f"{c['published']:,} publications ({c['kinds']['progress']:,} progress, {c['kinds']['new']:,} new tasks, "
        f"{c['kinds']['terminal']:,} terminal states, {c['kinds']['notice']:,} notices; {c['pub_errors']} errors, "
        f"publisher at most {c['publisher_max_late_s']} s behind schedule), {TASKS_PER_USER} task slots per reader, "
        f"tasks of {TASK_LIFE} versions, tagged as the relay tags them (`task=<id>`; `conflate=never` on new tasks, "
        f"terminal states, notices). `client.queue_conflate_size` {c['conflate_size']:,}, `client.queue_max_size` "
        f"{c['max_size']:,}, pings off (a stalled reader cannot pong). Gateway CPU {c['server_cpu_pct']} % of one core "
        f"over the run ({c['server_cpu_s']} CPU-s, {c['server_cpu_s'] / max(1, c['published']) * 1e6:.0f} µs per publication); "
        f"idle RSS with the readers connected {c['idle_rss_mb']} MiB.",
        "",
        "| t (s) | gateway RSS MiB | gateway CPU % | held connections | held bytes | conflated (total) | connected clients |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in c["samples"]:
        out.append(
            f"| {s['t_s']} | {s['rss_mb']} | {s['cpu_pct']} | {int(s['held_conns']):,} | {int(s['held_bytes']):,} | "
            f"{int(s['conflated']):,} | {int(s['clients']):,} |"
        )
    b, af = c["before_resume"], c["after_resume"]
    out += [
        "",
        f"* **Hold state**: ≥ 95 % of the readers held from t = {an['hold_reached_s']} s; steady state from "
        f"{an['steady_from_s']} s for {an['steady_s']} s. Held bytes peaked at {int(an['max_held_bytes']):,} "
        f"({an['max_held_bytes'] / max(1, c['readers']):,.0f} per reader; the hard bound is readers × queue_max_size = "
        f"{c['readers'] * c['max_size']:,}). Connected clients never below {int(an['min_clients']):,}.",
        f"* **Slopes over the steady state**: RSS {an['rss_slope_mib_min']} MiB/min; held bytes {an['held_slope_mib_min']} MiB/min; "
        f"conflated {an['conflated_per_s']}/s; gateway CPU {an['steady_cpu_pct']} %. Never-conflated publications "
        f"({never_count:,} in the run, ~2 KB each) must be kept, so held bytes grow by exactly those until the readers read.",
        f"* **Resume**: just before, {int(b['held_conns']):,} connections held {int(b['held_bytes']):,} bytes, RSS {b['rss_mb']} MiB; "
        f"the readers read for {t['resume_s']} s; after: {int(af['held_conns'])} held, {int(af['held_bytes']):,} bytes, RSS {af['rss_mb']} MiB, "
        f"{int(af['clients']):,} connected. {t['reached_end']:,} / {t['readers']:,} readers reached their end marker, "
        f"{t['closed']} connections closed, close codes {t['close_codes'] or 'none'}; {t['publications_received']:,} publications "
        f"received (of {c['published']:,} sent).",
        "",
        "| truth check (all readers) | expected | got |",
        "|---|---:|---:|",
        f"| tasks whose newest version arrived last | {t['tasks_expected']:,} | {t['finals_ok']:,} |",
        f"| … of them still running (newest = a conflatable progress version) | | {t['finals_running_ok']:,} |",
        f"| … of them finished (newest = the terminal state) | | {t['finals_terminal_ok']:,} |",
        f"| tasks with an older newest version / nothing | 0 | {t['finals_stale']:,} / {t['finals_missing']:,} |",
        f"| a task's versions going backwards | 0 | {t['order_violations']:,} |",
        f"| never-conflated publications (new, terminal, notice) | {t['nevers_expected']:,} | {t['nevers_got']:,} |",
        f"| … missing / duplicated / readers with them out of order | 0 / 0 / 0 | {t['nevers_missing']:,} / {t['nevers_duplicated']:,} / {t['nevers_out_of_order']:,} |",
        "",
    ]
    if t["first_problem"]:
        out += [f"First problem seen: {t['first_problem']}", ""]
    out += [end]
    return "\n".join(out)


def write_section(out: Path, section: str) -> None:
    start, end = (P_START, P_END) if section.startswith(P_START) else (START, END)
    replace_block(out, start, end, section)


def reexec_in_netns() -> int:
    """Run this script again inside a new network namespace with small TCP buffers."""
    args = " ".join(shlex.quote(x) for x in [procs.PY, __file__, "--in-netns", *sys.argv[1:]])
    script = (
        "set -e; ip link set lo up; "
        f"sysctl -q -w net.ipv4.tcp_wmem='{NETNS_SYSCTL}' net.ipv4.tcp_rmem='{NETNS_SYSCTL}'; exec {args}"
    )
    return subprocess.call(["unshare", "-n", "bash", "-c", script], cwd=ROOT)


async def amain(a: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {1})  # the publisher beside the readers, off the gateway's CPU
    tmp = Path(tempfile.mkdtemp(prefix="bench-stalled-"))
    netns = (
        f"own network namespace, `net.ipv4.tcp_wmem` = `tcp_rmem` = `{NETNS_SYSCTL}`"
        if a.in_netns
        else "host loopback (default TCP buffers)"
    )
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "env": {
            "commit": git_commit(ROOT),
            "cpus": os.cpu_count(),
            "load_before": [round(x, 2) for x in os.getloadavg()],
            "netns": netns,
        },
    }
    with (tmp / "gateway.log").open("w") as log:
        try:
            res["run"] = await run(a, tmp, log)
        finally:
            procs.stop_all()
    res["env"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    res["analysis"] = analyse(res["run"])
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="")
    p.add_argument("--json", default="")
    p.add_argument("--readers", type=int, default=1000)
    p.add_argument("--rate", type=int, default=1000, help="publications/s")
    p.add_argument("--seconds", type=float, default=420.0)
    p.add_argument("--conflate-size", type=int, default=16384)
    p.add_argument("--max-size", type=int, default=1 << 20)
    p.add_argument("--sample-every", type=float, default=10.0)
    p.add_argument("--resume-within", type=float, default=300.0)
    p.add_argument("--progress-only", action="store_true", help="no new tasks, terminal states or notices")
    p.add_argument("--no-netns", action="store_true")
    p.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if not a.in_netns and not a.no_netns:
        if os.geteuid() != 0:
            print("not root: cannot make a network namespace; use --no-netns", file=sys.stderr)
            return 2
        return reexec_in_netns()
    res = asyncio.run(amain(a))
    section = render(res)
    print(section)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    if a.out:
        write_section(Path(a.out), section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
