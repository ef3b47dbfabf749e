"""loadtest/bench_claim.py runs against a real MariaDB and reports the claim's statements."""

from __future__ import annotations

import json
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
    hit, miss = result["statements_per_claim"]["hit"], result["statements_per_claim"]["miss"]
    assert (hit["Com_select"], hit["Com_update"], hit["Com_commit"], hit["Com_rollback"]) == (1, 1, 1, 0)
    assert (miss["Com_select"], miss["Com_update"], miss["Com_commit"], miss["Com_rollback"]) == (1, 0, 1, 0)
    assert hit["Questions"] == 3 and miss["Questions"] == 2
    text = out.read_text()
    assert "<!-- claim:start -->" in text and "| 3.0 (1.0 / 1.0 / 1.0 / 0.0) |" in text
