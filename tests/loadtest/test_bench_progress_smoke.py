"""loadtest/bench_progress.py runs (SQLite, a tiny burst) and writes its block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_bench_progress_counts_the_publications_of_a_burst(tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    args = [
        "--tasks",
        "2",
        "--events",
        "4",
        "--burst-seconds",
        "0.2",
        "--windows",
        "0,2000",
        "--out",
        str(out),
    ]
    subprocess.run(
        [sys.executable, str(ROOT / "loadtest/bench_progress.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=True,
    )
    text = out.read_text()
    assert "<!-- progress:start -->" in text and "<!-- progress:end -->" in text
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| SQLite |")]
    assert [r[2].strip() for r in rows] == ["0", "2000"]
    # Without a window every report may be published; with a 2 s window a 0.2 s burst is at most two
    # versions per task (the first at once, the last at the window's end; one when the group commit
    # put the whole burst in one transaction), and every last one is delivered.
    assert [r[7].strip() for r in rows] == ["2/2", "2/2"]
    assert 1.0 <= float(rows[1][6]) <= 2.0
