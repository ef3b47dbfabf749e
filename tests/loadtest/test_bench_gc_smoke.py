"""loadtest/bench_gc.py runs a gateway with clients and reports its collections and deliveries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_bench_gc_reports_deliveries_and_collections(tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_gc.py"),
            "--clients",
            "50",
            "--window",
            "2",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=True,
    )
    (result,) = json.loads(proc.stdout)
    assert result["deliveries"] == 20  # 10/s for 2 s, each to one connected client
    assert result["full_collection_ms"] is not None and result["objects"] > 0
    assert result["gc_connect"]["0"]["n"] > 0  # 50 handshakes allocate enough for young collections
    text = out.read_text()
    assert "<!-- gc:start -->" in text and f"| {ROOT.name} | 20 |" in text
