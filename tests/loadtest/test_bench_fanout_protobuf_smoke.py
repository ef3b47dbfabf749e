"""A tiny bounded ``--protobuf-block`` run of the fan-out benchmark (loadtest/bench_fanout.py): the
memory-engine gateway, 100 subscribers on JSON then on Protobuf (the C client's binary framing:
``centrifuge-protobuf`` subprotocol, varint-delimited Commands and Replies), one short rung each.
Checks the plumbing (every subscriber ready, every publication counted, the send time read out of
the Protobuf Publication's data, the markdown block), not performance. About 30 s."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import scaled

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("taskset")), reason="needs gcc and taskset"
)


def test_protobuf_subscribers_count_every_publication_and_its_latency(tmp_path: Path) -> None:
    out, js = tmp_path / "perf.md", tmp_path / "perf.json"
    out.write_text("# Performance\n\nkept\n")
    cmd = [sys.executable, str(ROOT / "loadtest" / "bench_fanout.py"), "--protobuf-block"]
    cmd += ["--ns", "100", "--ladder", "2000", "--profile-rate", "0", "--budget-s", "60"]
    cmd += ["--warm", "0.5", "--window", "1", "--drain", "0.5", "--out", str(out), "--json", str(js)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    runs = json.loads(js.read_text())["runs"]
    assert [(r["server"], r["protocol"]) for r in runs] == [("gateway", "json"), ("gateway", "protobuf")]
    for run in runs:
        assert "error" not in run, run
        assert run["connected"] == 100 and run["connect_failed"] == 0, run
        (step,) = run["steps"]
        assert step["pub_errors"] == 0 and step["bad"] == 0, step
        assert step["delivery_ratio_after_drain"] >= 0.99, step
        assert step["lat_samples"] > 0 and step["p99_ms"] >= 0, step  # the send time was read
    text = out.read_text()
    assert text.startswith("# Performance\n\nkept\n")
    assert "<!-- fanout:protobuf:start -->" in text and "<!-- fanout:protobuf:end -->" in text
    assert "Protobuf subscribers against JSON subscribers" in text
