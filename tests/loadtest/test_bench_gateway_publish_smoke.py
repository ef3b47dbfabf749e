"""loadtest/bench_gateway_publish.py and bench_engine_publish.py run a round each on a throwaway
redis-server and report CPU per publication with every publication delivered (no timing
assertion)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


def rows(script: str, *args: str) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtest" / script), *args, "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=True,
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_bench_gateway_publish_delivers_every_publication() -> None:
    args = ("--channels", "20", "--rate", "200", "--warmup", "0.5", "--window", "1")
    [row] = rows("bench_gateway_publish.py", *args)
    assert row["errors"] == 0 and isinstance(row["publications"], int) and row["publications"] > 0, row
    assert row["received"] == row["publications"], row
    assert isinstance(row["gateway_us"], float) and row["gateway_us"] > 0, row


def test_bench_engine_publish_reports_cpu_per_publication() -> None:
    [row] = rows("bench_engine_publish.py", "--channels", "10", "--batches", "50")
    assert row["publications"] == 200, row
    assert isinstance(row["engine_us"], float) and row["engine_us"] > 0, row
