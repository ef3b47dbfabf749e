"""A tiny bounded run of the fan-out benchmark's Redis 2-node server kind (loadtest/bench_fanout.py):
its own throwaway redis-server and two gateway nodes, 100 subscribers split over both, one short
rung. Checks the plumbing (split, merged counts, CPU of all three processes, the markdown block),
not performance. < 30 s."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(
        not (shutil.which("redis-server") and shutil.which("gcc") and shutil.which("taskset")),
        reason="needs redis-server, gcc and taskset",
    ),
]


def test_redis_two_nodes_rung_delivers_to_both_halves(tmp_path: Path) -> None:
    out, js = tmp_path / "perf.md", tmp_path / "perf.json"
    out.write_text("# Performance\n")
    cmd = [sys.executable, str(ROOT / "loadtest" / "bench_fanout.py"), "--redis-block"]
    cmd += ["--servers", "gateway-redis-2nodes", "--ns", "100", "--ladder", "2000", "--profile-rate", "0"]
    cmd += [
        "--warm",
        "0.5",
        "--window",
        "1",
        "--drain",
        "0.5",
        "--budget-s",
        str(int(scaled(90))),
    ]  # the script skips a server with < 30 s left; a loaded machine starts two nodes slowly
    cmd += ["--out", str(out), "--json", str(js)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    (run,) = json.loads(js.read_text())["runs"]
    assert "error" not in run, run
    assert run["connected"] == 100 and run["connected_per_node"] == [50, 50]
    (step,) = run["steps"]
    assert step["pub_errors"] == 0
    assert step["delivery_ratio_after_drain"] >= 0.99
    a, b = step["sides"]
    assert a["delivered_per_s"] > 0 and b["delivered_per_s"] > 0  # node B got its half through Redis
    assert abs(a["delivered_per_s"] + b["delivered_per_s"] - step["delivered_per_s"]) <= 2
    assert set(step["server_cpu_parts_pct"]) == {"node-a", "node-b", "redis"}
    text = out.read_text()
    assert "<!-- fanout:redis:start -->" in text and "<!-- fanout:redis:end -->" in text
