"""loadtest/bench_claim.py runs against a real MariaDB and reports the claim's statements."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.mysql


def test_bench_claim_counts_the_statements_of_a_hinted_claim(mysql_url: str, tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_claim.py"),
            "--mysql-url",
            mysql_url,
            "--rounds",
            "5",
            "--repeat",
            "1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=True,
    )
    (result,) = json.loads(proc.stdout)
    # A smoke test: the benchmark runs and reports. It reads the server's GLOBAL counters, and here
    # the server is the suite's, shared with the tests running beside it: the exact statements of
    # a claim are counted where a test controls what runs (tests/relay/test_claim_round_trips.py).
    for path in ("hit", "miss"):
        counts = result["statements_per_claim"][path]
        assert set(counts) >= {"Com_select", "Com_update", "Com_commit", "Com_rollback", "Questions"}
        assert all(isinstance(v, int | float) and v >= 0 for v in counts.values()), counts
    assert result["statements_per_claim"]["hit"]["Questions"] > 0
    text = out.read_text()
    assert "<!-- claim:start -->" in text and "<!-- claim:end -->" in text
    block = text[text.index("<!-- claim:start -->") : text.index("<!-- claim:end -->")]
    assert re.search(r"\| [0-9.]+ \([0-9.]+ / [0-9.]+ / [0-9.]+ / [0-9.]+\) \|", block), block
