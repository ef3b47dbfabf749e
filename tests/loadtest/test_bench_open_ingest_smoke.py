"""loadtest/bench_open_ingest.py runs the Status API at an open-loop rate on a real MariaDB and
Redis and reports CPU per event, events per transaction and latency (a smoke run: it checks that
the benchmark runs and reports, never its figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.mysql


@pytest.mark.timeout(200)  # the subprocess bound below
def test_bench_open_ingest_reports_a_rung(mysql_url: str, redis_url: str, tmp_path: Path) -> None:
    raw = tmp_path / "rows.json"
    argv = [sys.executable, str(ROOT / "loadtest/bench_open_ingest.py"), "--url", mysql_url]
    argv += ["--redis-url", redis_url, "--arm", f'one={ROOT}:1:{{"ingest": {{"commit_delay_ms": 5}}}}']
    argv += ["--rates", "40", "--rounds", "1", "--tasks", "10", "--warmup", "0.5", "--window", "1.5"]
    argv += ["--json", str(raw)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=scaled(200), check=True)
    (row,) = json.loads(raw.read_text())
    assert row["arm"] == "one" and row["workers"] == 1 and row["rate"] == 40
    assert row["errors"] == 0 and row["accepted_per_s"] > 0 and row["events_per_tx"] > 0
    assert row["api_ms_per_event"] > 0 and row["p50_ms"] > 0 and len(row["load"]) == 2
    assert "| one | 40 | 1 |" in proc.stdout
