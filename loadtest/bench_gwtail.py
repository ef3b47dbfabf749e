"""The gateway's share of the capacity model's tail: the relays' publish requests replayed at the
§15 rate against one gateway, and what its event loop and garbage collector do meanwhile.

Shape (loadtest/capacity_e2e.py's): ``--tasks`` tasks owned round robin by ``--users`` users;
each user has a *board* connection (server-side subscription to ``task_user:bench/u<user>``)
and a *detail* connection (``task_detail:bench/t<task>`` of each of its tasks): 10,000 raw
WebSocket connections for 5,000 users. ``--rate`` events/s (round robin over the tasks), each
event two publications (its owner's ``task_user`` channel and its ``task_detail`` channel, each
with one subscriber) with a ~600-byte state, an idempotency key and the relay's tags, sent as the
relays send them: ``/api/batch`` requests of ``--events-per-request`` events over
``--http-conns`` keep-alive connections, open loop. Gateway: deploy/gateway.json (Redis engine
on a throwaway ``redis-server`` started here, one key prefix per round), ``PYTHONPATH=<tree>``.

Measured over ``--window`` seconds after ``--warmup``, per round:

* gateway and redis-server CPU (psutil user + sys) per publication, µs;
* send → visible: receipt at the client − the request's send time (a ``published_at_ms`` tag
  with sub-millisecond digits; one machine clock) — the e2e's "relay send → visible";
* the event loop's lag: a thread in the gateway schedules a callback every 5 ms
  (``call_soon_threadsafe``) and records when it ran against when it was due (a pause of the
  loop, a collection included, shows in full: the due time is planned, not read);
* every garbage collection of the gateway (``gc.callbacks``): count, total and longest pause by
  generation (wall time of the collection itself);
* with ``--census``: at the start of each full collection, the objects it is about to scan by
  type (``gc.get_objects()``: every tracked object not frozen), taken before the pause is timed.
  Costs a few ms per full collection: a census round is not an A/B round.

``--tree name=DIR`` (repeatable) runs trees A B B A (``--rounds`` per tree); the report is the
median per tree with the 1-minute load at each window's start and end. Prints one JSON line per
round; ``--markdown`` a table. Only loopback processes it starts; all stopped at the end.

    python loadtest/bench_gwtail.py --tree main=/tmp/main --tree this=. --rounds 2 --markdown
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest import abba  # noqa: E402
from loadtest.bench_gateway_publish import Publisher as BatchPublisher  # noqa: E402
from loadtest.bench_gateway_publish import payload, start_gateway, start_redis  # noqa: E402
from loadtest.fleet import Stats, WSConn, connect_with_backoff, mint, pct  # noqa: E402

TENANT = "bench"

#: Injected into the gateway (``sitecustomize``). Lines of ``$BENCH_GWTAIL_LOG``:
#: ``G <wall> <generation> <pause ms> <its CPU ms>``, ``L <wall> <lag ms>``,
#: ``C <wall> <json census>``.
SITECUSTOMIZE = r"""
import asyncio, gc, json, os, threading, time
from collections import Counter
_path = os.environ.get("BENCH_GWTAIL_LOG")
if _path:
    _f = open(_path, "a", buffering=1 << 16)
    _census = os.environ.get("BENCH_GWTAIL_CENSUS") == "1"
    _t = [0.0, 0.0]
    _loop = [None]
    _lags = []
    def _flush_lags():
        while True:
            time.sleep(1.0)
            out, _lags[:] = _lags[:], []
            _f.write("".join(f"L {w:.4f} {ms:.3f}\n" for w, ms in out))
            _f.flush()
    def _probe(loop):
        period = 0.005
        due = time.perf_counter() + period
        offset = time.time() - time.perf_counter()
        def ran(planned):
            now = time.perf_counter()
            _lags.append((planned + offset, (now - planned) * 1000))
        while True:
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                loop.call_soon_threadsafe(ran, due)
            except RuntimeError:
                return
            due = max(due + period, time.perf_counter())
    def _cb(phase, info):
        gen = info["generation"]
        if phase == "start":
            if _loop[0] is None:
                loop = asyncio.events._get_running_loop()
                if loop is not None:
                    _loop[0] = loop
                    threading.Thread(target=_probe, args=(loop,), daemon=True).start()
                    threading.Thread(target=_flush_lags, daemon=True).start()
            if gen == 2 and _census:
                objs = gc.get_objects()
                c = Counter(type(o).__qualname__ for o in objs)
                deep = Counter()
                for o in objs:
                    t = type(o)
                    if t is tuple:
                        deep["tuple(" + ",".join(type(x).__qualname__ for x in o[:4]) + ")"] += 1
                    elif t is list:
                        deep["list[%s]len%d" % (type(o[0]).__qualname__ if o else "", min(len(o), 9))] += 1
                    elif t.__name__ in ("generator", "coroutine"):
                        deep[t.__name__ + ":" + o.__qualname__] += 1
                    elif t is dict:
                        deep["dict{" + ",".join(sorted(map(str, list(o)[:4]))) + "}"] += 1
                young = [len(gc.get_objects(g)) for g in range(3)]
                if os.environ.get("BENCH_GWTAIL_REFERRERS") == "1":
                    empties = [o for o in objs if type(o) is list and not o][:3]
                    gens = [o for o in objs if type(o).__name__ == "generator"][:2]
                    for o in empties + gens:
                        for r in gc.get_referrers(o):
                            if r is objs or r is empties or r is gens:
                                continue
                            desc = type(r).__qualname__
                            if isinstance(r, dict):
                                keys = [k for k, v in r.items() if v is o and isinstance(k, str)]
                                desc += "{" + ",".join(keys) + "}"
                                for rr in gc.get_referrers(r):
                                    if rr is not objs:
                                        desc += " <- " + type(rr).__qualname__
                            deep["REF " + type(o).__name__ + " <- " + desc] += 1
                _f.write("C %.3f %s\n" % (time.time(), json.dumps(
                    {"total": len(objs), "by_gen": young, "frozen": gc.get_freeze_count(),
                     "types": c.most_common(40), "deep": deep.most_common(40)})))
                del objs
            _t[0] = time.perf_counter()
            _t[1] = time.thread_time()
        else:
            wall = (time.perf_counter() - _t[0]) * 1000
            cpu = (time.thread_time() - _t[1]) * 1000
            _f.write(f"G {time.time():.4f} {gen} {wall:.3f} {cpu:.3f}\n")
    gc.callbacks.append(_cb)
"""


class Publisher(BatchPublisher):
    """The relays' requests: each ``events`` events = 2 × ``events`` publish commands (the user's
    and the task's channel), sent open loop by bench_gateway_publish's sender (``run`` at
    2 × the event rate: its rate counts publications)."""

    def __init__(self, port: int, key: str, a: argparse.Namespace) -> None:
        super().__init__(port, key, a.tasks, 2 * a.events_per_request, a.http_conns)
        self.a = a

    def body(self) -> bytes:
        now = f"{time.time() * 1000:.3f}"
        commands = []
        for _ in range(self.a.events_per_request):
            n = self.seq
            self.seq += 1
            task = n % self.a.tasks
            version = n // self.a.tasks + 2
            state = payload(n)
            for channel in (f"task_user:{TENANT}/u{task % self.a.users}", f"task_detail:{TENANT}/t{task}"):
                commands.append({"publish": {
                    "channel": channel,
                    "data": state,
                    "idempotency_key": f"t{task}:{version}:{channel}",
                    "tags": {"task": f"t{task}", "committed_at_ms": now, "published_at_ms": now},
                }})  # fmt: skip
        data = orjson.dumps({"commands": commands})
        return (
            b"POST /api/batch HTTP/1.1\r\nHost: gw\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.key.encode(), len(data), data)
        )


class Clients:
    """The board and detail connections; send → visible of every push while ``recording``."""

    def __init__(self) -> None:
        self.received = 0
        self.recording = False
        self.lat: list[float] = []
        self.sent: list[float] = []
        self.conns: list[WSConn] = []

    def on_push(self, conn: WSConn, channel: str, pub: dict[str, Any]) -> None:
        self.received += 1
        if self.recording:
            sent = pub.get("tags", {}).get("published_at_ms")
            if sent:
                self.lat.append(time.time() * 1000 - float(sent))
                self.sent.append(float(sent))

    async def connect(self, secret: str, port: int, a: argparse.Namespace) -> None:
        stats = Stats()
        deadline = time.monotonic() + 120 + a.users / 25

        async def one(user: int, detail: bool) -> WSConn:
            if detail:
                channels = [f"task_detail:{TENANT}/t{t}" for t in range(user, a.tasks, a.users)]
            else:
                channels = [f"task_user:{TENANT}/u{user}"]
            token = mint(secret, f"{TENANT}/u{user}", ttl=7200, channels=channels)
            conn, _ = await connect_with_backoff(
                lambda attempt: port, {"token": token, "name": "bench"}, self.on_push, deadline, stats,
                initial_jitter=0.5,
            )  # fmt: skip
            return conn

        for k in range(0, a.users, 500):
            users = range(k, min(a.users, k + 500))
            self.conns += await asyncio.gather(*(one(u, d) for u in users for d in (False, True)))

    def close(self) -> None:
        for c in self.conns:
            c.abort()


def parse_log(path: Path, lo: float, hi: float, sent: list[float], lat: list[float]) -> dict[str, Any]:
    """Collections (CPU ms of each), loop lag and census lines of the gateway's log between wall
    times lo and hi; and how many deliveries over 50 ms were in flight during a full collection."""
    gcs: dict[int, list[float]] = {0: [], 1: [], 2: []}
    fulls: list[tuple[float, float]] = []
    lags: list[float] = []
    census: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        kind, wall, rest = line[0], float(line.split(" ", 2)[1]), line.split(" ", 2)[2]
        if not lo <= wall < hi:
            continue
        if kind == "G":
            gen, ms, cpu = rest.split()
            gcs[min(2, int(gen))].append(float(cpu))
            if int(gen) == 2:
                fulls.append((wall * 1000 - float(ms), wall * 1000))
        elif kind == "L":
            lags.append(float(rest))
        elif kind == "C":
            census.append(json.loads(rest))
    out: dict[str, Any] = {
        f"gen{g}": {"n": len(xs), "sum_ms": round(sum(xs), 1), "max_ms": round(max(xs, default=0.0), 1)}
        for g, xs in gcs.items()
    }
    out["lag_ms"] = {
        "n": len(lags),
        "p50": round(pct(lags, 50), 2),
        "p99": round(pct(lags, 99), 2),
        "max": round(max(lags, default=0.0), 1),
        "over_20": sum(1 for x in lags if x > 20),
    }
    slow = [(s, s + d) for s, d in zip(sent, lat, strict=True) if d > 50]
    out["over_50_in_full"] = sum(1 for a, b in slow if any(a < end and start < b for start, end in fulls))
    if census:
        out["census"] = census
    return out


async def one_round(
    name: str,
    tree: str,
    a: argparse.Namespace,
    redis_url: str,
    redis_pid: int,
    workdir: Path,
    n: int,
    site: Path,
) -> dict[str, Any]:
    log = workdir / f"gwtail-{name}-{n}.log"
    proc, port, key, secret = start_gateway(
        tree,
        redis_url,
        workdir,
        f"gateway-{name}-{n}",
        workdir / f"gateway-{name}-{n}.out",
        n,
        PYTHONPATH=f"{site}{os.pathsep}{tree}",
        BENCH_GWTAIL_LOG=str(log),
        BENCH_GWTAIL_CENSUS="1" if a.census else "0",
        BENCH_GWTAIL_REFERRERS="1" if a.referrers else "0",
    )
    clients = Clients()
    publisher = Publisher(port, key, a)
    spy: subprocess.Popen[bytes] | None = None
    try:
        proc.wait_ready()
        assert proc.popen is not None
        pid = proc.popen.pid
        t_connect = time.monotonic()
        await clients.connect(secret, port, a)
        connect_s = time.monotonic() - t_connect
        await publisher.open()
        await publisher.run(2 * a.rate, a.warmup)
        if a.spy:
            out = Path(a.spy_dir) / f"gwtail-{name}-{n}.txt"
            spy = subprocess.Popen(  # noqa: ASYNC220  # started once, before the window
                [a.py_spy, "record", "-p", str(pid), "-d", str(int(a.window)), "-r", "200", "-f", "raw",
                 "-o", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=out.with_suffix(".log").open("wb"),
            )  # fmt: skip
        l0, p0 = abba.load1(), publisher.published
        g0, s0, w0 = abba.cpu_seconds([pid]), abba.cpu_seconds([redis_pid]), time.time()
        clients.recording = True
        await publisher.run(2 * a.rate, a.window)
        await publisher.drain()
        g1, s1, w1 = abba.cpu_seconds([pid]), abba.cpu_seconds([redis_pid]), time.time()
        pubs = publisher.published - p0
        settle = time.monotonic() + 5.0
        while len(clients.lat) < pubs and time.monotonic() < settle:  # noqa: ASYNC110  # polls a counter, bounded
            await asyncio.sleep(0.01)
        clients.recording = False
        await asyncio.sleep(1.5)  # the probe thread writes its lags once a second
        if spy is not None:
            spy.wait(timeout=a.window + 30)
    finally:
        publisher.close()
        clients.close()
        proc.stop()
    lat = clients.lat
    return {
        "tree": name,
        "connect_s": round(connect_s, 1),
        "publications": pubs,
        "received": len(lat),
        "errors": publisher.errors,
        "late": publisher.late,
        "gateway_us": round((g1 - g0) / max(pubs, 1) * 1e6, 1),
        "redis_us": round((s1 - s0) / max(pubs, 1) * 1e6, 1),
        "visible_ms": {
            "p50": round(pct(lat, 50), 1),
            "p99": round(pct(lat, 99), 1),
            "max": round(max(lat, default=0.0), 1),
            "over_50": sum(1 for x in lat if x > 50),
        },
        **parse_log(log, w0, w1, clients.sent, lat),
        "window_s": round(w1 - w0, 1),
        "load": (l0, abba.load1()),
    }


async def main_async(a: argparse.Namespace, trees: list[tuple[str, str]]) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-gwtail-"))
    site = workdir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    redis, redis_url = start_redis(workdir)
    results: list[dict[str, Any]] = []
    try:
        for n, (_, (name, tree)) in enumerate(abba.order(trees, a.rounds)):
            try:
                res = await one_round(name, tree, a, redis_url, redis.pid, workdir, n, site)
            except (OSError, TimeoutError, RuntimeError) as exc:  # a starved round: skipped, said
                print(json.dumps({"tree": name, "failed": f"{type(exc).__name__}: {exc}"}), flush=True)
                continue
            print(json.dumps(res), flush=True)
            results.append(res)
    finally:
        redis.terminate()
        redis.wait(10)
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return results


def census_summary(results: list[dict[str, Any]]) -> str:
    """The types a full collection scanned, summed over the census lines of every round."""
    types: Counter[str] = Counter()
    totals = []
    for r in results:
        for c in r.get("census", []):
            totals.append(c["total"])
            types.update(dict(c["types"]))
    if not totals:
        return ""
    top = ", ".join(f"{t} {n // len(totals)}" for t, n in types.most_common(15))
    mean = sum(totals) // len(totals)
    return f"full collections censused: {len(totals)}; objects scanned (mean) {mean}: {top}"


def report(results: list[dict[str, Any]], a: argparse.Namespace) -> str:
    lines = [
        f"{a.users} users × (board + detail) connections, {a.tasks} tasks, {a.rate:g} events/s × 2 "
        f"publications in `/api/batch` requests of {a.events_per_request} events, {a.window:g} s window; "
        f"medians of {a.rounds} rounds per tree (A B B A)",
        "",
        "| tree | gateway µs/pub | redis µs/pub | send→visible p50 / p99 / max ms "
        "| over 50 ms (during a full collection) | loop lag p99 / max ms "
        "| full collections n, total CPU ms, longest | gen 1 n, total CPU ms "
        "| rounds: gateway µs, p99 | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in dict.fromkeys(r["tree"] for r in results):
        rs = [r for r in results if r["tree"] == name]

        def med(f: Any, rs: list[dict[str, Any]] = rs) -> float:
            xs = sorted(f(r) for r in rs)
            return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

        rounds = " / ".join(f"{r['gateway_us']:.0f}, {r['visible_ms']['p99']}" for r in rs)
        lines.append(
            f"| {name} | {med(lambda r: r['gateway_us']):.1f} | {med(lambda r: r['redis_us']):.1f} "
            f"| {med(lambda r: r['visible_ms']['p50']):.1f} / {med(lambda r: r['visible_ms']['p99']):.1f} / "
            f"{med(lambda r: r['visible_ms']['max']):.1f} "
            f"| {med(lambda r: r['visible_ms']['over_50']):g} ({med(lambda r: r['over_50_in_full']):g}) "
            f"| {med(lambda r: r['lag_ms']['p99']):.1f} / {med(lambda r: r['lag_ms']['max']):.1f} "
            f"| {med(lambda r: r['gen2']['n']):g}, {med(lambda r: r['gen2']['sum_ms']):.1f}, "
            f"{med(lambda r: r['gen2']['max_ms']):.1f} "
            f"| {med(lambda r: r['gen1']['n']):g}, {med(lambda r: r['gen1']['sum_ms']):.1f} "
            f"| {rounds} | {abba.load_spans(rs)} |"
        )
    summary = census_summary(results)
    return "\n".join(lines + ([f"\n{summary}"] if summary else []))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], help="name=DIR (repeat; default: this tree)")
    p.add_argument("--users", type=int, default=5000)
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--rate", type=float, default=667.0, help="events/s offered (2 publications each)")
    p.add_argument("--events-per-request", type=int, default=13, help="events per /api/batch request")
    p.add_argument("--http-conns", type=int, default=4)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--window", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2, help="A B, B A, ... (rounds per tree)")
    p.add_argument("--census", action="store_true", help="type counts at each full collection")
    p.add_argument("--referrers", action="store_true", help="with --census: who holds sampled objects")
    p.add_argument("--spy", action="store_true", help="py-spy the gateway over each window")
    p.add_argument("--spy-dir", default="/tmp")
    p.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop what was started (finally blocks)
    trees = [(name, str(Path(d).resolve())) for name, _, d in (t.partition("=") for t in a.tree)]
    results = asyncio.run(main_async(a, trees or [("this", str(ROOT))]))
    if a.markdown:
        print(report(results, a))


if __name__ == "__main__":
    main()
