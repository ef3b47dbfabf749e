"""Seed §15's failure scenarios under load, judged on data, not time (issue 31).

The HA topology (``taskcast.dev.topology.Topology(ha=True)``: Redis master + replica + three
Sentinels, MariaDB primary + replica, 2 gateways, 2 Status API replicas, 2 relays, nginx, every
process supervised) runs the demo's producers (``taskcast.demo.run_demo``: real task runs through
the Status API, ``--tasks`` tasks for ``--users`` owners) while browser-like clients follow each owner
(``tests/helpers/follower.py``: connect through nginx, read the snapshot after every (re)connect,
keep the highest version per task). Mid-run, the scenario:

* ``gateway-restart`` — a rolling restart of every gateway: SIGTERM, the supervisor starts it
  again, the next one goes once it is healthy;
* ``redis-failover`` — the Redis master is killed (SIGKILL, not restarted until a Sentinel has
  promoted the replica, then it rejoins as a replica);
* ``mariadb-switch`` — the MariaDB primary switch of docs/deploy.md: the primary stops (SIGTERM,
  kept down), the replica applies what it received and is promoted, and the Status APIs, the
  reconciler and the relays are pointed at it and restarted one at a time;
* ``snapshot-storm`` — ``--storm-share`` of the clients (30 %) reconnect at once, each reading
  the snapshot from the Status API (what a client does when its channel history no longer holds
  what it missed): the read path's p50/p99 and errors are reported.

Pass/fail is about data: **nothing acknowledged lost** (every task's final state as the producer
saw it acknowledged is the Status API's state, and the version there is what every client ends
with) and **every client converges**; reported: the time from the producers' last acknowledgement
to the last client converging, the action's own duration, and the 1-minute load average. A client
that has not converged within ``--converge-timeout`` fails the run.

    .venv/bin/python loadtest/bench_scenarios.py --scenario gateway-restart [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import InvalidHandshake

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from taskcast.demo import status_client  # noqa: E402
from taskcast.demo.runner import run_demo  # noqa: E402
from taskcast.dev.topology import Topology  # noqa: E402
from tests.helpers.follower import RECONNECT_PAUSE_SECONDS, Endpoints, Follower, user_token  # noqa: E402


class TimedFollower(Follower):
    """A :class:`Follower` that times each snapshot read and counts the failed ones, and that
    starts over after a refused handshake too (nginx answers 502 while no gateway is live for it),
    as a browser's client does."""

    def __init__(self, endpoints: Endpoints, user: str) -> None:
        self.reads: list[float] = []
        self.read_errors = 0
        self.refused = 0
        super().__init__(endpoints, user)

    async def _run(self) -> None:
        while True:
            try:
                await super()._run()
            except InvalidHandshake:
                self.refused += 1
                await asyncio.sleep(RECONNECT_PAUSE_SECONDS)

    async def snapshot(self) -> None:
        started = time.perf_counter()
        try:
            await super().snapshot()
        except Exception:
            self.read_errors += 1
            raise
        self.reads.append(time.perf_counter() - started)


async def wait_for(cond: Callable[[], bool], within: float, what: str) -> float:
    """Seconds until ``cond()`` holds; raises TimeoutError after ``within`` seconds."""
    started = time.monotonic()
    while not cond():
        if time.monotonic() - started > within:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)  # polling interval of a bounded wait
    return time.monotonic() - started


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


async def gateway_restart(topo: Topology, args: argparse.Namespace, ctx: dict[str, Any]) -> None:
    sup = topo.supervisor
    assert sup is not None
    for n in range(topo.gateways):
        name = f"gateway{n + 1}"
        before = sup.restarts.get(name, 0)
        topo.procs[name].send_signal(signal.SIGTERM)

        def restarted(name: str = name, before: int = before) -> bool:
            return sup.restarts.get(name, 0) > before

        def up(name: str = name, n: int = n) -> bool:
            return topo.procs[name].running and healthy(topo.gateway_url(n))

        await wait_for(restarted, 60, f"{name} restarted")
        await wait_for(up, 120, f"{name} up")
        # nginx marks a gateway that refused connections failed for its fail_timeout (5 s in
        # deploy/nginx): the next gateway may go only once nginx routes to this one again, or
        # nginx has no live upstream and answers 502 to everyone meanwhile.
        await asyncio.sleep(args.gateway_pause)


async def redis_failover(topo: Topology, args: argparse.Namespace, ctx: dict[str, Any]) -> None:
    assert topo.sentinel is not None and topo.supervisor is not None
    old = await asyncio.to_thread(topo.sentinel.master)
    assert old is not None
    name = "redis-master" if old[1] == topo.sentinel.master_port else "redis-replica"
    topo.supervisor.pause([name])
    topo.procs[name].send_signal(signal.SIGKILL)
    ctx["killed"] = name

    def promoted() -> bool:
        now = topo.sentinel.master()  # type: ignore[union-attr]
        return now is not None and now != old

    ctx["promotion_s"] = await wait_for(promoted, 120, "a Sentinel promoted the replica")
    topo.supervisor.resume([name])  # the old master comes back and is made a replica


async def mariadb_switch(topo: Topology, args: argparse.Namespace, ctx: dict[str, Any]) -> None:
    """docs/deploy.md "Promoting the MariaDB replica", under load: the primary stops (SIGTERM, kept
    down), the replica applies what it received and is promoted, then the Status APIs, the
    reconciler and the relays are pointed at it and restarted one at a time."""
    primary, replica, sup = topo.mariadb, topo.mariadb_replica, topo.supervisor
    assert primary is not None and replica is not None and sup is not None
    primary_name = next(n for n, p in topo.procs.items() if p is primary.process())
    sup.pause([primary_name])
    topo.procs[primary_name].send_signal(signal.SIGTERM)
    await asyncio.to_thread(topo.procs[primary_name].popen.wait, 120)  # type: ignore[union-attr]
    t0 = time.monotonic()

    def applied() -> bool:
        st = replica.replica_status()
        return st.get("Exec_Master_Log_Pos") == st.get(
            "Read_Master_Log_Pos"
        ) and "read all relay log" in st.get("Slave_SQL_Running_State", "")

    await wait_for(applied, 120, "the replica applied what it received")
    await asyncio.to_thread(replica.promote)
    ctx["promoted_after_s"] = round(time.monotonic() - t0, 2)
    old, new = f"127.0.0.1:{primary.port}/", f"127.0.0.1:{replica.port}/"
    names = [n for n in topo.procs if n.startswith(("status-api", "reconciler", "relay"))]
    for name in names:
        proc = topo.procs[name]
        assert proc.env is not None
        proc.env = {k: v.replace(old, new) for k, v in proc.env.items()}
        before = sup.restarts.get(name, 0)
        proc.send_signal(signal.SIGTERM)

        def restarted(name: str = name, before: int = before) -> bool:
            return sup.restarts.get(name, 0) > before

        await wait_for(restarted, 60, f"{name} restarted")
        await asyncio.to_thread(proc.wait_ready, 120)
    ctx["switched"] = names


async def snapshot_storm(topo: Topology, args: argparse.Namespace, ctx: dict[str, Any]) -> None:
    followers: list[TimedFollower] = ctx["followers"]
    storm = followers[: max(1, round(len(followers) * args.storm_share))]
    for f in storm:
        f.reads.clear()
        await f.close()
    fresh = [TimedFollower(ctx["endpoints"], f.user) for f in storm]
    followers[: len(storm)] = fresh
    await wait_for(lambda: all(f.reads or f.read_errors for f in fresh), 120, "every storm client read")
    reads = sorted(r for f in fresh for r in f.reads)
    ctx["storm"] = {
        "clients": len(fresh),
        "reads": len(reads),
        "errors": sum(f.read_errors for f in fresh),
        "p50_ms": 1000 * statistics.median(reads),
        "p99_ms": 1000 * reads[min(len(reads) - 1, int(0.99 * len(reads)))],
    }


ACTIONS: dict[str, Callable[[Topology, argparse.Namespace, dict[str, Any]], Awaitable[None]]] = {
    "gateway-restart": gateway_restart,
    "redis-failover": redis_failover,
    "mariadb-switch": mariadb_switch,
    "snapshot-storm": snapshot_storm,
}


#: A task's outcome when its producer saw every call acknowledged (else the error it gave up on).
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


async def states(topo: Topology, user: str) -> dict[str, tuple[int, str]]:
    """``{taskId: (version, lifecycleStatus)}`` of ``user``'s tasks in the Status API now."""
    headers = {"Authorization": f"Bearer {user_token(user, topo.user_secret)}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        reply = await http.get(f"{topo.public_url}/api/tasks", params={"limit": 100})
        reply.raise_for_status()
    return {t["id"]: (int(t["version"]), t["lifecycleStatus"]) for t in reply.json()["items"]}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"taskcast-bench-{args.scenario}."))
    topo = Topology(workdir, ha=True, heartbeat_timeout_seconds=5.0, ready_timeout_seconds=240.0)
    started = time.monotonic()
    await asyncio.to_thread(topo.start)
    topo.supervise()
    out: dict[str, Any] = {"scenario": args.scenario, "startup_s": round(time.monotonic() - started, 1)}
    users = [f"bench/u{i}" for i in range(args.users)]
    endpoints = Endpoints(topo.public_ws_url, topo.public_url, topo.hmac_secret, topo.user_secret)
    followers = [TimedFollower(endpoints, u) for u in users]
    ctx: dict[str, Any] = {"followers": followers, "endpoints": endpoints}
    try:
        await wait_for(lambda: all(f.connects for f in followers), 120, "every client connected")
        demo = asyncio.create_task(
            run_demo(topo.internal_url, topo.service_secret, tasks=args.tasks, speed=args.speed,
                     stale_after=5.0, reconcile_interval=1.0, users=users, interval=args.interval)
        )  # fmt: skip
        await wait_for(lambda: sum(len(f.versions) for f in followers) >= len(users), 120, "first pushes")
        out["load_at_action"] = round(os.getloadavg()[0], 1)
        t0 = time.monotonic()
        await ACTIONS[args.scenario](topo, args, ctx)
        out["action_s"] = round(time.monotonic() - t0, 1)
        out["load_still_running_after_action"] = not demo.done()
        result = await demo
        acked = time.monotonic()
        followers = ctx["followers"]
        truth = {u: await states(topo, u) for u in users}
        started_tasks = {(o[1], o[2]): o[3] for o in result.outcomes}
        lost = [  # the final states the Status API acknowledged to the producer, not in its data
            (owner, task, outcome)
            for (owner, task), outcome in started_tasks.items()
            if outcome in FINAL and truth[owner].get(task, (0, ""))[1] != outcome
        ]

        def converged() -> bool:
            return all(
                f.versions.get(task) == truth[f.user][task][0]
                for f in followers
                for (owner, task) in started_tasks
                if owner == f.user and task in truth[f.user]
            )

        try:
            out["converge_s"] = round(
                await wait_for(converged, args.converge_timeout, "clients converged"), 2
            )
            out["converged"] = True
        except TimeoutError:
            out["converged"] = False
        out.update(
            tasks=len(started_tasks),
            producer_failures=len(result.failures),
            acknowledged_lost=len(lost),
            lost=lost[:5],
            since_ack_s=round(time.monotonic() - acked, 2),
            restarts=dict(topo.supervisor.restarts) if topo.supervisor else {},
            refused_handshakes=sum(f.refused for f in followers),
            load_end=round(os.getloadavg()[0], 1),
            **{k: v for k, v in ctx.items() if k not in ("followers", "endpoints")},
        )
        out["pass"] = out["converged"] and not lost and not result.failures
        return out
    finally:
        for f in ctx["followers"]:
            await f.close()
        await asyncio.to_thread(topo.stop)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", choices=sorted(ACTIONS), required=True)
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--tasks", type=int, default=40)
    p.add_argument("--speed", type=float, default=10.0, help="the demo's pace multiplier")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between task starts (/ speed)")
    p.add_argument("--storm-share", type=float, default=0.3)
    p.add_argument(
        "--gateway-pause", type=float, default=6.0, help="gateway-restart: seconds between gateways (nginx)"
    )
    p.add_argument("--converge-timeout", type=float, default=120.0)
    p.add_argument(
        "--producer-attempts",
        type=int,
        default=12,
        help="attempts of each producer call on 503/429/transport errors (backoff 0.1 s doubling, "
        "at most 2 s: 12 attempts ride out ~17 s of unavailability; the demo's own default is 5)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="4 users, 16 tasks started 1 s apart: a short run on a shared machine",
    )
    args = p.parse_args()
    if args.quick:  # tasks keep starting for ~16 s: the load outlasts a rolling restart
        args.users, args.tasks, args.interval = 4, 16, 10.0
    status_client.HTTP_ATTEMPTS = args.producer_attempts
    out = asyncio.run(run(args))
    print(json.dumps(out))
    sys.exit(0 if out["pass"] else 1)


if __name__ == "__main__":
    main()
