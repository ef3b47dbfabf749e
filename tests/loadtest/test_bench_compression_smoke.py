"""A tiny bounded run of the compression benchmark (loadtest/bench_compression.py): the gateway with
``websocket.compression`` off then on, 100 subscribers of the C client (``--deflate``: it offers
permessage-deflate and inflates RSV1 frames), one short rung each. Checks the plumbing (every
subscriber ready, every publication counted and its send time read out of the inflated message,
compressed frames only with compression on, fewer bytes on the wire, the markdown block), not
performance. About 30 s."""

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


def test_compressed_subscribers_count_every_publication_with_fewer_bytes(tmp_path: Path) -> None:
    out, js = tmp_path / "perf.md", tmp_path / "perf.json"
    out.write_text("# Performance\n\nkept\n")
    cmd = [sys.executable, str(ROOT / "loadtest" / "bench_compression.py"), "--ns", "100", "--ladder", "2000"]
    cmd += ["--rounds", "1", "--budget-s", "60", "--warm", "0.5", "--window", "1", "--drain", "0.5"]
    cmd += ["--out", str(out), "--json", str(js)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=scaled(90))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    off, on = json.loads(js.read_text())["runs"]
    assert (off["server"], on["server"]) == ("gateway", "gateway-deflate")
    for run in (off, on):
        assert "error" not in run, run
        assert run["connected"] == 100 and run["connect_failed"] == 0, run
        (step,) = run["steps"]
        assert step["pub_errors"] == 0 and step["bad"] == 0, step
        assert step["delivery_ratio_after_drain"] >= 0.99, step
        assert step["lat_samples"] > 0, step  # the send time was read (after inflating, when on)
    assert off["steps"][0]["deflated_frames"] == 0
    assert on["steps"][0]["deflated_frames"] > 0
    assert on["steps"][0]["wire_bytes_per_delivery"] < off["steps"][0]["wire_bytes_per_delivery"]
    text = out.read_text()
    assert text.startswith("# Performance\n\nkept\n")
    assert "<!-- compression:start -->" in text and "<!-- compression:end -->" in text
