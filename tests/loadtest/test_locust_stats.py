"""Reading locust's stats CSV: a row without samples has ``N/A`` percentiles (a request type that
got no answer yet on a loaded machine) and must read as 0, not crash the whole smoke run."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest" / "locust"))

HEADER = "Type,Name,Request Count,Failure Count,50%,95%,99%,Max Response Time,Requests/s\n"


def test_rows_without_samples_read_as_zero(tmp_path: Path) -> None:
    import run as runner  # type: ignore[import-not-found]

    rows_csv = "WS,WS connect,0,0,N/A,N/A,N/A,0,0.0\nPOST,/api,3,0,12,20,21,22.5,1.5\n"
    (tmp_path / "x_stats.csv").write_text(HEADER + rows_csv)
    rows = runner.read_stats(tmp_path / "x")
    assert rows[0] == {
        "type": "WS", "name": "WS connect", "requests": 0, "failures": 0,
        "p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "rps": 0.0,
    }  # fmt: skip
    assert (rows[1]["p99_ms"], rows[1]["rps"]) == (21.0, 1.5)
