"""loadtest/bench_hostile.py runs every attack against a gateway and reports the bystander's
latency and the node's CPU per attack (no timing or count assertions: it only has to run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_bench_hostile_runs_and_reports_each_attack() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_hostile.py"),
            "--seconds",
            "0.5",
            "--json-frame",
            "65536",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=True,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert "loadavg" in lines[0] and "loadavg_after" in lines[-1]
    rows = {row["attack"]: row for row in lines if "attack" in row}
    api = {"api-batch", "api-batch-parallel", "api-batch-huge"}
    assert set(rows) == {"baseline", "pb-before", "pb-after", "json-flood", "fossil"} | api
    for row in rows.values():
        assert {"p99_ms", "cpu_s", "hostile_connections", "published", "late"} <= set(row)
    assert "cpu_ms_per_connection" in rows["pb-before"] and "cpu_ms_per_publication" in rows["fossil"]
    assert all({"refused", "cpu_ms_per_connection"} <= set(rows[name]) for name in api)


def test_bench_fossil_runs_and_reports_each_case() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtest/bench_fossil.py"), "--sizes", "2048", "--repeat", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=True,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {row["case"] for row in rows if "case" in row} >= {"one-byte-edit", "random", "task-json"}
    assert all({"cpu_ms", "delta_bytes"} <= set(row) for row in rows if "case" in row)
