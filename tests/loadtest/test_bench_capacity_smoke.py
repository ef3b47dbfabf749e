"""loadtest/bench_capacity.py runs against a real MariaDB and Redis and reports every step: CPU per
event beside the database floor, the seed's model end to end through the production topology
(accepted events, commit→visible at the clients, deliveries per event, CPU per event per process)
and idle connections (a smoke run: it checks that the benchmark runs and reports, never its figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.mysql


@pytest.mark.timeout(400)  # the subprocess bound below: four steps of a whole topology
def test_bench_capacity_quick_reports_every_step(mysql_url: str, redis_url: str, tmp_path: Path) -> None:
    out, raw = tmp_path / "perf.md", tmp_path / "capacity.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_capacity.py"),
            "--url",
            mysql_url,
            "--redis-url",
            redis_url,
            "--quick",
            "--out",
            str(out),
            "--json",
            str(raw),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(400),
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(raw.read_text()) == result
    ingest, floor = result["ingest"], result["floor"]
    assert ingest["events"] == floor["events"] == 40 and ingest["errors"] == 0
    assert ingest["status_api_cpu_ms_per_event"] > 0 and floor["driver_cpu_ms_per_event"] >= 0
    assert floor["statements"] > 0 and floor["transactions"] > 0
    assert "load_start" in ingest and "load_start" in floor

    e2e = result["e2e"]
    assert e2e["board_connections"] == 10 and e2e["detail_connections"] == 10 and e2e["watched_tasks"] == 40
    assert e2e["first_events"]["errors"] == 0
    (rung,) = e2e["rungs"]
    assert rung["offered"] == 20 and rung["ok"] == rung["sent"] > 0 and rung["errors"] == 0
    # every accepted event reaches its owner's board and the task's watcher, measured at the clients
    # (window edges: an event is counted by its answer, a delivery by its commit clock)
    assert 1.5 <= rung["deliveries_per_event"] <= 2.5
    assert rung["commit_to_visible_p50_ms"] > 0
    processes = set(rung["cpu_ms_per_event"])
    assert {"gateway1", "relay1", "relay2", "mariadb", "redis", "producer", "clients"} <= processes
    assert any(name.startswith("status-api") for name in processes)
    assert set(rung["cpu_ms_per_event_by_part"]) >= {"status-api", "relay", "gateway", "mariadb", "redis"}
    assert rung["path_cpu_ms_per_event"] > 0 and len(rung["load"]) == 2

    (idle,) = result["idle"]["rungs"]
    assert idle["connections"] == 50 and idle["failed"] == 0 and idle["rss_per_conn_kib"] > 0

    text = out.read_text()
    for marker in ("capacity", "capacity:e2e"):
        assert f"<!-- {marker}:start -->" in text and f"<!-- {marker}:end -->" in text
