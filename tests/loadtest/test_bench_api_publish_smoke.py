"""loadtest/bench_api_publish.py runs a gateway per round and reports server CPU per publication
for every mode, each request answered 200 (no timing assertion)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_bench_api_publish_reports_every_mode() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_api_publish.py"),
            "--publications",
            "200",
            "--rounds",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=True,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {r["mode"] for r in rows} == {"single", "pipelined", "batch", "inproc"}
    for row in rows:
        assert row["answered_ok"] == row["requests"] > 0, row
        assert row["us_per_publication"] >= 0 and row["requests_per_s"] > 0, row
