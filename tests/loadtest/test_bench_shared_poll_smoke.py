"""loadtest/bench_shared_poll.py runs a tiny case and reports the shared polls and deliveries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_bench_shared_poll_reports_one_poll_per_key_and_every_delivery() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtest/bench_shared_poll.py"), "--cases", "10x2x5", "--repeat", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=True,
    )
    (result,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert result["keys_asked_per_interval"] == 5 and result["keys_asked_if_each_connection_polled"] == 20
    assert result["deliveries_per_answer"] == 20
