"""The Redis engine's own CPU per publication, without HTTP or WebSocket clients: a
``RedisBroker`` in a child process (``PYTHONPATH=<tree>``) publishes ``--batches`` runs of
``--batch`` publications through ``publish_many`` (the server API ``batch`` path) to
``--channels`` channels it is subscribed to, and counts the PUB/SUB deliveries. Reported per tree
and round: the child's CPU (``time.process_time``: publish, pipeline, PUB/SUB receive and decode)
and redis-server's (``/proc``) per publication, in µs. Trees alternate A B B A; medians.

The load-robust companion of loadtest/bench_gateway_publish.py: one process, no client
scheduling, so the machine's load moves it less.

    mkdir /tmp/main && git archive main | tar -x -C /tmp/main
    python loadtest/bench_engine_publish.py --tree main=/tmp/main --tree branch=. --markdown

Only loopback processes it starts; they are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest import abba  # noqa: E402
from loadtest.bench_gateway_publish import payload, start_redis  # noqa: E402
from loadtest.procs import clean_env  # noqa: E402

CHILD = r"""
import asyncio, json, sys, time
import orjson
from gateway.config.schema import RedisSettings
from gateway.engine.base import HistoryOptions, PublishItem
from gateway.engine.redis import build_shards
from gateway.engine.redis_broker import RedisBroker
from gateway.protocol.messages import Publication

url, prefix, channels, batches, batch = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
payloads = [bytes.fromhex(line) for line in sys.stdin.read().split()]


class Count:
    n = 0
    def on_publication(self, channel, pub, position, write_now=False):
        self.n += 1
    def on_join(self, channel, info): pass
    def on_leave(self, channel, info): pass
    def on_control(self, data): pass
    def on_broker_reconnect(self): pass


async def main():
    broker = RedisBroker(build_shards(RedisSettings(address=(url,))), prefix=prefix)
    count = Count()
    broker.set_handler(count)
    runner = asyncio.create_task(broker.run())
    names = [f"task_user:bench/u{i}" for i in range(channels)]
    for name in names:
        await broker.subscribe(name)
    history = HistoryOptions(100, 600.0, 720 * 3600.0)
    tags = {"task": "t1", "committed_at_ms": "1764700000000", "published_at_ms": "1764700000001"}

    async def run(batches, first):
        n = first
        for _ in range(batches):
            items = []
            for _ in range(batch):
                channel = names[n % channels]
                pub = Publication(data=payloads[n % len(payloads)], tags=tags, time=1764700000000)
                items.append(PublishItem(channel, pub, history, f"t{n}:{n}:{channel}"))
                n += 1
            await broker.publish_many(items)
        while count.n < n:
            await asyncio.sleep(0.001)
        return n

    n = await run(max(1, batches // 10), 0)
    t0, c0 = time.perf_counter(), time.process_time()
    sys.stdout.write("go\n"); sys.stdout.flush()
    end = await run(batches, n)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(json.dumps({"publications": end - n, "cpu": cpu, "wall": wall}), flush=True)
    runner.cancel()
    await broker.close()

asyncio.run(main())
"""


def one_round(
    name: str, tree: str, a: argparse.Namespace, url: str, redis_pid: int, n: int
) -> dict[str, Any]:
    import orjson

    payloads = "\n".join(orjson.dumps(payload(i)).hex() for i in range(64))
    l0 = abba.load1()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, f"eb{n}", str(a.channels), str(a.batches), str(a.batch)],
        env=clean_env(PYTHONPATH=tree),
        cwd=tree.split(os.pathsep)[0],  # ``-c`` puts the working directory first on sys.path
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(payloads)
    proc.stdin.close()
    assert proc.stdout.readline().strip() == "go"
    s0 = abba.cpu_seconds([redis_pid])
    result = json.loads(proc.stdout.readline())
    s1 = abba.cpu_seconds([redis_pid])
    proc.wait(30)
    pubs = result["publications"]
    return {
        "tree": name,
        "publications": pubs,
        "engine_us": result["cpu"] / pubs * 1e6,
        "redis_us": (s1 - s0) / pubs * 1e6,
        "per_s": pubs / result["wall"],
        "load": (l0, abba.load1()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], help="name=path[:extra path...] (repeat)")
    p.add_argument("--channels", type=int, default=200)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--batches", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop what was started (finally blocks)
    trees = [
        (name, os.pathsep.join(str(Path(x).resolve()) for x in paths.split(os.pathsep)))
        for name, paths in (t.split("=", 1) for t in (a.tree or [f"this={ROOT}"]))
    ]
    workdir = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    redis, url = start_redis(workdir)
    results = []
    try:
        for n, (_, (name, tree)) in enumerate(abba.order(trees, a.rounds)):
            res = one_round(name, tree, a, url, redis.pid, n)
            print(json.dumps(res), flush=True)
            results.append(res)
    finally:
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    if a.markdown:
        print(
            f"\n`publish_many` of {a.batch} × {a.batches} to {a.channels} subscribed channels; "
            "µs CPU per publication\n"
        )
        print("| tree | engine process µs/pub | redis µs/pub | rounds engine (redis) | load |")
        print("|---|---:|---:|---|---|")
        for name, m in abba.medians(results, "tree", ["engine_us", "redis_us"]).items():
            rs = [r for r in results if r["tree"] == name]
            e, s = m["engine_us"], m["redis_us"]
            rounds = " / ".join(f"{r['engine_us']:.1f} ({r['redis_us']:.1f})" for r in rs)
            loads = abba.load_spans(rs)
            print(f"| {name} | {e:.1f} | {s:.1f} | {rounds} | {loads} |")


if __name__ == "__main__":
    main()
