"""``make topology``: start the production shape from local processes (taskcast/dev/topology.py
with ``ha``: Redis Sentinel, MariaDB primary + replica, 2 gateways, 2 Status API replicas, 2
relays, nginx), keep every process running (a process that exits is restarted), run the demo
workload through the internal listener, and print what to open: the board behind nginx for each
demo user, with a user token minted for this run (development only: it is signed with this
run's user secret, written to ``secrets.env`` in the work directory).

    python -m taskcast.dev.topology_cli [--dir DIR] [--no-demo] [--users tenant/a,tenant/b] [--wake redis|udp]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import jwt

from taskcast.demo.runner import DEFAULT_USERS, run_demo
from taskcast.dev.procs import Proc
from taskcast.dev.topology import Topology

#: Lifetime of the printed board tokens.
BOARD_TOKEN_TTL_SECONDS = 12 * 3600


def board_url(topo: Topology, user: str, ttl: float = BOARD_TOKEN_TTL_SECONDS) -> str:
    """The board behind nginx for ``tenant/user``, with a user JWT (``sub``, ``tenant``, ``exp``)
    signed with the topology's user secret and the gateway at the same origin."""
    tenant, _, sub = user.partition("/")
    token = jwt.encode(
        {"sub": sub, "tenant": tenant, "exp": int(time.time() + ttl)}, topo.user_secret, algorithm="HS256"
    )
    return f"{topo.public_url}/board/?{urlencode({'gateway': topo.public_url, 'token': token})}"


def _demo(topo: Topology, users: list[str], stop: threading.Event) -> threading.Thread:
    """The demo workload in a thread of its own (its own event loop), until ``stop``."""

    def run() -> None:
        async def main() -> None:
            done = asyncio.Event()

            async def watch() -> None:
                await asyncio.to_thread(stop.wait)  # the flag comes from the signal handler
                done.set()

            watcher = asyncio.create_task(watch())
            await run_demo(
                topo.internal_url, topo.service_secret, tasks=0, keep_running=2, users=users, stop=done
            )
            watcher.cancel()

        asyncio.run(main())

    thread = threading.Thread(target=run, name="demo", daemon=True)
    thread.start()
    return thread


def _restarted(proc: Proc, code: int | None) -> None:
    print(f"{proc.name} exited ({code}); restarted (log: {proc.log_path})", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start the production topology from local processes.")
    parser.add_argument("--dir", default="", help="work directory (default: a new temp dir)")
    parser.add_argument("--no-demo", action="store_true", help="do not run the demo workload")
    parser.add_argument("--users", default=",".join(DEFAULT_USERS), help="demo owners, tenant/user,…")
    parser.add_argument(
        "--wake",
        choices=["redis", "udp"],
        default="redis",
        help="relay wake-up: Redis PUB/SUB or UDP (no Redis)",
    )
    args = parser.parse_args(argv)
    users = [u.strip() for u in args.users.split(",") if "/" in u] or list(DEFAULT_USERS)
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="taskcast-topology-"))
    topo = Topology(workdir, ha=True, detach=True, wake=args.wake)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        if topo.supervisor is not None:
            topo.supervisor.pause(topo.procs)  # what exits from now on is the shutdown
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    demo: threading.Thread | None = None
    try:
        topo.start()
        topo.supervise(on_restart=_restarted)
        (workdir / "secrets.env").write_text(
            f"TASKCAST_HMAC_SECRET={topo.hmac_secret}\nTASKCAST_API_KEY={topo.api_key}\n"
            f"TASKCAST_SERVICE_SECRET={topo.service_secret}\nTASKCAST_USER_SECRET={topo.user_secret}\n"
        )
        print(f"public (nginx):   {topo.public_url}   websocket {topo.public_ws_url}")
        print(f"internal (nginx): {topo.internal_url}  (/internal/v1, /admin/v1, /metrics, /api server API)")
        print(f"redis:            {topo.redis_url}")
        print(f"work dir:         {workdir}  (logs/, secrets.env)")
        for user in users:
            print(f"board as {user}: {board_url(topo, user)}")
        if not args.no_demo:
            demo = _demo(topo, users, stop)
            print(f"demo: {len(users)} users, 2 unfinished tasks each, until stopped")
        print("running; a process that exits is restarted; Ctrl-C stops everything", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        stop.set()
        if demo is not None:
            demo.join(timeout=10)
        topo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
