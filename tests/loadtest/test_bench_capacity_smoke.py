"""loadtest/bench_capacity.py runs against a real MariaDB and reports CPU per event beside the
database floor (a smoke run: it checks that the benchmark runs and reports, never its figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.mysql


def test_bench_capacity_quick_reports_ingest_and_the_floor(mysql_url: str, tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_capacity.py"),
            "--url",
            mysql_url,
            "--quick",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    ingest, floor = result["ingest"], result["floor"]
    assert ingest["events"] == floor["events"] == 40 and ingest["errors"] == 0
    assert ingest["status_api_cpu_ms_per_event"] > 0 and floor["driver_cpu_ms_per_event"] >= 0
    assert floor["statements"] > 0 and floor["transactions"] > 0
    assert "load_start" in ingest and "load_start" in floor
    text = out.read_text()
    assert "<!-- capacity:start -->" in text and "<!-- capacity:end -->" in text
