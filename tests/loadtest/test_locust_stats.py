"""Reading locust's statistics. The final ``--json-file`` is preferred: the periodic stats CSV can
miss every request on a loaded machine (the smoke test saw "4 WS connect" in locust's summary and
an empty CSV). A CSV row without samples has ``N/A`` percentiles (a request type that
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


def test_final_json_is_preferred_over_the_periodic_csv(tmp_path: Path) -> None:
    import json

    import run as runner  # type: ignore[import-not-found]

    (tmp_path / "x_stats.csv").write_text(HEADER)  # the periodic CSV never caught a request
    entry = {
        "name": "WS connect", "method": "WS", "num_requests": 4, "num_failures": 0,
        "start_time": 100.0, "last_request_timestamp": 102.0, "max_response_time": 740,
        "response_times": {"670": 1, "700": 1, "710": 1, "740": 1},
    }  # fmt: skip
    (tmp_path / "x.json").write_text(json.dumps([entry]))
    [row] = runner.read_stats(tmp_path / "x")
    assert (row["type"], row["name"], row["requests"], row["failures"]) == ("WS", "WS connect", 4, 0)
    assert (row["p50_ms"], row["p99_ms"], row["max_ms"], row["rps"]) == (700.0, 740.0, 740.0, 2.0)
