"""Every locust scenario runs headless for a few seconds with a few users against real processes
(the local topology: MariaDB, Redis, 2 gateways, Status API, reconciler, 2 relays, nginx) and must
report requests and no failures. One topology serves all scenarios."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskcast.dev.topology import Topology
from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest"))
sys.path.insert(0, str(ROOT / "loadtest" / "locust"))

pytestmark = [pytest.mark.redis, pytest.mark.mysql]


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, redis_url: str, mysql_url: str) -> Iterator[Topology]:
    # not under pytest's 0700 basetemp: nginx's workers (user nobody) spool request bodies here
    workdir = Path(tempfile.mkdtemp(prefix="taskcast-locust-smoke-"))
    workdir.chmod(0o755)
    topo = Topology(workdir, redis_url=redis_url, mysql_url=mysql_url, ready_timeout_seconds=scaled(60))
    topo.start()
    yield topo
    topo.stop()
    shutil.rmtree(workdir, ignore_errors=True)


def _run(
    topology: Topology, scenario: str, tmp_path: Path, seconds: int = 5, users: int = 4, *extra: str
) -> dict[str, Any]:
    import run as runner  # type: ignore[import-not-found]

    args = runner.build_args([scenario, "-u", str(users), "-r", str(users), "-t", str(seconds), *extra])
    result: dict[str, Any] = runner.run_locust(topology, args, tmp_path)
    return result


@pytest.mark.timeout(240)  # node_restart's run bound (60 s) + locust's hard stop (60 s) + the topology
@pytest.mark.parametrize("scenario", ["idle", "reporting", "hot", "storm", "backlog", "node_restart"])
def test_scenario_reports_requests_and_no_failures(topology: Topology, scenario: str, tmp_path: Path) -> None:
    # locust runs for a fixed time and its faults fire at fractions of it: the run time is scaled
    # like every other bound, so a loaded machine (TASKCAST_TEST_TIME_SCALE) gets a longer run.
    # The floor is generous: at load 10 a 4 s run ended before a reporter's first event.
    # node_restart runs on conditions instead (--end-after-fault): at load 18 its clients were not
    # on the node yet when 70 % of a 16 s window had passed, and the node was never restarted.
    if scenario == "node_restart":
        res = _run(topology, scenario, tmp_path, round(scaled(60)), 4, "--end-after-fault")
    else:
        base = 16 if scenario == "storm" else 10
        res = _run(topology, scenario, tmp_path, seconds=max(base, round(scaled(base))))
    stats = {(r["type"], r["name"]): r for r in res["stats"] if r["type"]}
    failed = [r for r in stats.values() if r["failures"]]
    failures_csv = tmp_path / f"locust-{scenario}_failures.csv"
    why = (failed, failures_csv.read_text()[-2000:] if failures_csv.exists() else "", res["stderr_tail"])
    assert res["exit_code"] == 0, why  # locust exits 1 when any request failed
    assert stats, res["stderr_tail"]
    assert sum(r["requests"] for r in stats.values()) > 0
    assert failed == [], why
    assert stats[("WS", "WS connect")]["requests"] >= 1
    if scenario in ("hot", "storm", "node_restart"):
        assert stats[("PUSH", "task_project")]["requests"] > 0
    if scenario == "hot":
        assert stats[("PUSH", "SSE push")]["requests"] > 0
    if scenario in ("reporting", "backlog"):
        assert stats[("POST", "/internal/v1/task-events")]["requests"] > 0
    if scenario == "storm":
        assert res["summary"].get("dropped", 0) >= 1
        assert res["summary"].get("reconnected", 0) == res["summary"]["dropped"]
    if scenario == "node_restart":
        assert res["summary"].get("reconnected", 0) >= 1
        assert topology.procs["gateway1"].running
