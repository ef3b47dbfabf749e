"""loadtest/bench_idle.py connects idle C clients from several source addresses to a gateway and
writes its result as JSON (the contract loadtest/bench_capacity.py reads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_bench_idle_ladders_idle_clients_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "loadtest/bench_idle.py"),
            "--connections",
            "60",
            "--rungs",
            "2",
            "--source-addresses",
            "3",
            "--ping-interval",
            "1",
            "--window",
            "2",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=True,
    )
    result = json.loads(out.read_text())
    assert result["config"]["source_addresses"] == 3 and result["config"]["rungs"] == [30, 60]
    assert result["nofile"]["hard"] >= result["nofile"]["soft_before"] and not result["fd_limited"]
    assert result["gateway_start_s"] > 0
    first, second = result["rungs"]
    assert (first["connections"], second["connections"]) == (30, 60)
    assert first["failed"] == second["failed"] == 0 and second["closed_in_window"] == 0
    assert second["pings"] > 0 and second["us_per_ping"] > 0 and second["rss_per_conn_kib"] > 0
    assert set(second["gc_collections"]) == {"0", "1", "2"}
