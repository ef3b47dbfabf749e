"""Status API CPU per accepted event with tracing off, this tree against another checkout.

Each run is ``loadtest/profile_ingest.py``'s unprofiled run (an in-process Status API on uvloop,
``--tasks`` tasks of 3 events sent over HTTP by two generator processes) in a fresh interpreter
with ``PYTHONPATH`` set to one tree; the trees alternate (ABBA order, so a drift in the machine's
load hits both) for ``--rounds`` rounds. Prints every run and the median CPU ms per event of each
tree. ``--baseline`` is a checkout of the code before the change (e.g. a ``git worktree`` of main).

    .venv/bin/python loadtest/bench_tracing_off.py --url mysql+asyncmy://… --baseline /path/to/main
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUN = """
import argparse, json, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "loadtest"))
import uvloop
import profile_ingest
a = argparse.Namespace(
    url=sys.argv[2], tasks=int(sys.argv[3]), events=3, concurrency=32, generators=2, pool=20
)
r = uvloop.run(profile_ingest._serve_and_load(a, None))
print(json.dumps({"ok": r["ok"], "errors": r["errors"], "cpu_s": r["cpu_s"], "batch": r["batch"]}))
"""


def _run(tree: Path, url: str, tasks: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(tree), url, str(tasks)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="mysql+asyncmy://… (a database the benchmark may empty)")
    p.add_argument("--baseline", required=True, type=Path, help="checkout of the code to compare with")
    p.add_argument("--tasks", type=int, default=800)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    per_event: dict[str, list[float]] = {name: [] for name in trees}
    for n in range(args.rounds):
        for name in ("this", "baseline") if n % 2 == 0 else ("baseline", "this"):
            r = _run(trees[name], args.url, args.tasks)
            ms = r["cpu_s"] / max(1, r["ok"]) * 1000
            per_event[name].append(ms)
            print(
                f"{name:8} {r['ok']:.0f} events ({r['errors']:.0f} errors), CPU {ms:.3f} ms/event, "
                f"batch {r['batch']:.1f}, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for name, values in per_event.items():
        print(f"{name:8} median {statistics.median(values):.3f} ms/event over {len(values)} runs")


if __name__ == "__main__":
    main()
