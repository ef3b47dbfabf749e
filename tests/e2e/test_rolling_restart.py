"""The topology with no single point of failure on the data path (``Topology(ha=True)``: Redis
Sentinel, MariaDB primary + replica, 2 gateways, 2 Status API replicas, 2 relays, nginx) under a
rolling restart: a SIGTERM to one gateway while tasks run keeps everything else up, the
supervisor brings the gateway back, and a browser-like client behind nginx (reconnect, then
snapshot, then merge pushes by version) converges on the database state. ``make topology``'s
board URL works with the token it carries."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskcast.demo import run_demo
from taskcast.dev.topology import Topology, topology_nodes
from taskcast.dev.topology_cli import board_url
from tests.helpers.follower import Endpoints, Follower
from tests.support import scaled, wait_until

pytestmark = pytest.mark.timeout(scaled(400))

USER = "ha/alice"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    topo = Topology(
        tmp_path_factory.mktemp("ha"),
        ha=True,
        heartbeat_timeout_seconds=2.0,
        ready_timeout_seconds=scaled(120),
    )
    try:
        topo.start()
        topo.supervise()
        yield topo
    finally:
        topo.stop()


def _endpoints(topo: Topology) -> Endpoints:
    return Endpoints(topo.public_ws_url, topo.public_url, topo.hmac_secret, topo.user_secret)


async def test_a_gateway_sigterm_mid_run_keeps_the_topology_up_and_clients_converge(topology: Topology):
    follower = Follower(_endpoints(topology), USER)
    try:
        await wait_until(lambda: follower.connects > 0, 30, "the client connected")
        demo = asyncio.create_task(
            run_demo(topology.internal_url, topology.service_secret, tasks=4, speed=10.0, stale_after=2.0,
                     reconcile_interval=1.0, users=(USER,), interval=0.3)
        )  # fmt: skip
        gateway = topology.procs["gateway1"]
        await wait_until(lambda: len(follower.versions) > 0, 60, "first pushes")
        gateway.send_signal(signal.SIGTERM)
        await wait_until(lambda: topology.supervisor.restarts.get("gateway1") == 1, 60, "gateway1 restarted")
        await wait_until(lambda: gateway.running and _healthy(topology), 60, "gateway1 healthy again")
        result = await demo
        assert not result.failures, result.failures
        others = {n: p.running for n, p in topology.procs.items() if n != "gateway1"}
        assert all(others.values()), others
        assert topology.supervisor.restarts == {"gateway1": 1}
        nodes = await topology_nodes(topology, within=scaled(30))
        assert {n["name"] for n in nodes} == {"gateway1", "gateway2"}

        truth = await follower.truth()
        started = {o[2] for o in result.outcomes}
        assert started <= truth.keys()
        await wait_until(
            lambda: all(follower.versions.get(t) == truth[t] for t in started), 60, "the client converged"
        )
    finally:
        await follower.close()


def _healthy(topo: Topology) -> bool:
    try:
        return httpx.get(f"{topo.gateway_url(0)}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


async def test_the_printed_board_url_opens_the_board_and_its_token_reads_the_user_api(topology: Topology):
    url = board_url(topology, USER)
    query: dict[str, Any] = dict(httpx.URL(url).params)
    assert query["gateway"] == topology.public_url
    async with httpx.AsyncClient(timeout=scaled(10), follow_redirects=True) as http:
        page = await http.get(url)
        assert page.status_code == 200 and "<html" in page.text.lower()
        tasks = await http.get(
            f"{topology.public_url}/api/tasks", headers={"Authorization": f"Bearer {query['token']}"}
        )
        assert tasks.status_code == 200, tasks.text
        session = await http.get(
            f"{topology.public_url}/api/realtime/session",
            headers={"Authorization": f"Bearer {query['token']}"},
        )
        assert session.status_code == 200 and session.json()["token"], session.text


@pytest.mark.node
def test_the_printed_board_url_goes_live_in_chromium_behind_nginx(topology: Topology) -> None:
    """The board at the printed URL, in headless Debian chromium: the badge reaches LIVE through
    nginx (the realtime connection at the same origin, not port 8000) and the user's tasks show."""
    if shutil.which("node") is None or not Path(CHROMIUM).exists():
        pytest.fail("node or chromium missing: run `bash scripts/bootstrap.sh`")
    result = asyncio.run(
        run_demo(topology.internal_url, topology.service_secret, tasks=1, speed=20.0, users=(USER,))
    )
    assert not result.failures, result.failures
    within = scaled(60)
    script = Path(__file__).with_name("board_live.mjs")
    argv = ["node", str(script), board_url(topology, USER), str(int(within * 1000))]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=within + scaled(30))
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["live"] and seen["rows"] > 0 and not seen["errors"], seen
    assert "RECOVERING" not in seen["history"][-1:], seen


async def test_the_mariadb_replica_follows_the_primary(topology: Topology):
    assert topology.mariadb is not None and topology.mariadb_replica is not None
    primary = topology.mariadb.sql("SELECT @@gtid_binlog_pos").strip()
    await wait_until(
        lambda: topology.mariadb_replica.sql("SELECT @@gtid_slave_pos").strip() == primary,  # type: ignore[union-attr]
        60,
        "replica caught up",
    )
    status = topology.mariadb_replica.replica_status()
    assert status["Slave_IO_Running"] == "Yes" and status["Slave_SQL_Running"] == "Yes", status
    assert topology.mariadb_replica.sql("SELECT @@read_only").strip() == "1"


def _ready(topology: Topology, name: str, within: float) -> None:
    """Wait until the restarted ``name`` serves again (its health URL, or its server's own check)."""
    if name.startswith(("redis-", "sentinel")):
        assert topology.sentinel is not None
        topology.sentinel.wait_ready(within)
    elif name.startswith("mariadb"):
        server = topology.mariadb if name == "mariadb1" else topology.mariadb_replica
        assert server is not None
        server.wait_ready(within)
    else:
        topology.procs[name].wait_ready(within)


async def test_a_rolling_restart_of_every_process_leaves_a_working_system(topology: Topology):
    """Each process in turn (services included): SIGTERM, the supervisor starts it again, it is
    ready before the next one goes. Afterwards tasks run and a client converges."""
    assert topology.supervisor is not None
    names = [n for n in topology.procs if n != "gateway1"]  # gateway1 had its turn above
    for name in names:
        before = topology.supervisor.restarts.get(name, 0)
        topology.procs[name].send_signal(signal.SIGTERM)
        await wait_until(
            lambda name=name, before=before: topology.supervisor.restarts.get(name, 0) > before,  # type: ignore[union-attr]
            60,
            f"{name} restarted",
        )
        await asyncio.to_thread(_ready, topology, name, scaled(120))
    assert all(p.running for p in topology.procs.values())
    status = topology.mariadb_replica.replica_status()  # type: ignore[union-attr]
    await wait_until(
        lambda: topology.mariadb_replica.replica_status().get("Slave_IO_Running") == "Yes",  # type: ignore[union-attr]
        60,
        f"the replica reconnected to the restarted primary (was {status.get('Slave_IO_Running')})",
    )

    follower = Follower(_endpoints(topology), USER)
    try:
        result = await run_demo(
            topology.internal_url, topology.service_secret, tasks=2, speed=10.0, stale_after=2.0,
            reconcile_interval=1.0, users=(USER,), interval=0.3,
        )  # fmt: skip
        assert not result.failures, result.failures
        truth = await follower.truth()
        started = {o[2] for o in result.outcomes}
        await wait_until(
            lambda: all(follower.versions.get(t) == truth[t] for t in started), 60, "the client converged"
        )
    finally:
        await follower.close()
