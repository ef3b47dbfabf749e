"""PUB/SUB resubscribe benchmark: how long a Redis broker with many subscribed channels needs to
be ``ready`` again after its PUB/SUB connection is killed (``CLIENT KILL TYPE pubsub``).

Starts a throwaway ``redis-server`` on a free port, builds a ``RedisBroker`` from the code on
``PYTHONPATH`` (so the same script measures two trees: ``PYTHONPATH=/work/main`` vs a branch),
subscribes ``--channels`` channels (with a 10 s io_timeout), sets ``--io-timeout``, then
``--rounds`` times kills the PUB/SUB connection and measures, per round: wall seconds until the
listener is ``ready`` and every channel shows in ``PUBSUB CHANNELS`` again, CPU seconds of this
process in that time, how many PUB/SUB connections the broker opened (1 = the first resubscribe
completed; more = it was aborted and restarted), and the 1-minute load average. A round that does
not finish within ``--limit`` seconds is reported as failed with the subscribed count Redis last
showed.

``--slow STOP,RUN`` reaches Redis over a unix socket (small kernel buffers) and keeps it stopped
(SIGSTOP) STOP seconds out of every STOP+RUN during each round: a Redis that reads slower than the
whole resubscribe can be sent within ``--io-timeout``.

    PYTHONPATH=. python loadtest/bench_resubscribe.py --channels 25000
    PYTHONPATH=. python loadtest/bench_resubscribe.py --channels 25000 --io-timeout 0.1 --slow 0.2,0.002
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

from redis.asyncio import Redis

from gateway.config.schema import RedisSettings
from gateway.engine.redis import build_shards
from gateway.engine.redis_broker import RedisBroker


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _subscribed(admin: Redis, prefix: str) -> int:
    return len(await admin.pubsub_channels(f"{prefix}.client.*"))


async def _slow_redis(pid: int, stopped: float, running_for: float) -> None:
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(stopped)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(running_for)
    finally:
        os.kill(pid, signal.SIGCONT)


async def _round(
    broker: RedisBroker, admin: Redis, prefix: str, args: argparse.Namespace, pid: int
) -> dict[str, object]:
    channels, limit = args.channels, args.limit
    listener = broker._listeners[0]  # the benchmark observes reconnects
    connects = listener.connects
    load = os.getloadavg()[0]
    await admin.client_kill_filter(_type="pubsub")
    slow = None
    if args.slow:
        stopped, running_for = (float(x) for x in args.slow.split(","))
        slow = asyncio.create_task(_slow_redis(pid, stopped, running_for))
    try:
        return await _measure(broker, listener, admin, prefix, channels, limit, connects, load)
    finally:
        if slow is not None:
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow


async def _measure(
    broker: RedisBroker,
    listener: Any,
    admin: Redis,
    prefix: str,
    channels: int,
    limit: float,
    connects: int,
    load: float,
) -> dict[str, object]:
    start, cpu = time.monotonic(), time.process_time()
    seen = 0
    while time.monotonic() - start < limit:
        if listener.connects > connects and listener.ready:
            seen = await _subscribed(admin, prefix)
            if seen >= channels:
                return {
                    "ok": True,
                    "seconds": round(time.monotonic() - start, 3),
                    "cpu_seconds": round(time.process_time() - cpu, 3),
                    "connects": listener.connects - connects,
                    "load1": round(load, 2),
                }
        await asyncio.sleep(0.05)
    seen = await _subscribed(admin, prefix)
    return {
        "ok": False,
        "seconds": limit,
        "subscribed": seen,
        "connects": listener.connects - connects,
        "load1": round(load, 2),
    }


def _start_redis(port: int, workdir: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, "--unixsocket", f"{workdir}/redis.sock", "--unixsocketperm", "700"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="tc-bench-redis-")
    server = _start_redis(port, workdir)
    url = f"redis://127.0.0.1:{port}/0"
    admin = Redis.from_url(url)
    try:
        for _ in range(200):
            try:
                await admin.ping()
                break
            except Exception:  # booting
                await asyncio.sleep(0.05)
        prefix = "bench"
        address = f"unix://{workdir}/redis.sock" if args.slow else url
        settings = RedisSettings(address=(address,), prefix=prefix, io_timeout=10.0)
        broker = RedisBroker(
            build_shards(settings),
            prefix=prefix,
            probe_interval_seconds=args.probe_interval,
            probe_timeout_seconds=3 * args.probe_interval,
        )
        task = asyncio.create_task(broker.run())
        for _ in range(1000):
            if broker.healthy():
                break
            await asyncio.sleep(0.02)
        sem = asyncio.Semaphore(1000)

        async def subscribe(i: int) -> None:
            async with sem:
                await broker.subscribe(f"task:{i}")

        await asyncio.gather(*(subscribe(i) for i in range(args.channels)))
        for shard in broker.shards:  # set up generously, measure with the io_timeout asked for
            shard.io_timeout = args.io_timeout
        rounds = [await _round(broker, admin, prefix, args, server.pid) for _ in range(args.rounds)]
        print(json.dumps({"tree": os.environ.get("PYTHONPATH", ""), "channels": args.channels,
                          "io_timeout": args.io_timeout, "slow": args.slow, "rounds": rounds}))  # fmt: skip
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await broker.close()
    finally:
        await admin.aclose()
        server.kill()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=25_000)
    parser.add_argument("--io-timeout", type=float, default=4.0)
    parser.add_argument("--probe-interval", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=float, default=60.0)
    parser.add_argument("--slow", default="", help="STOP,RUN seconds: SIGSTOP Redis STOP out of STOP+RUN")
    asyncio.run(main(parser.parse_args()))
