"""A/B of ``loadtest/bench_relay_rate.py`` between two source trees of the relay, alternating.

``python loadtest/ab_relay_rate.py --a /work/main --b . --rounds 1`` runs the benchmark with the
relays of tree A, then B, B, A (one round: ABBA; more rounds repeat it), every other process from
this tree, and prints per rate the median over each tree's runs of: the relays' CPU µs per row, the
same net of their idle floor (the rate-0 step), rows per claim, CPU µs per claim, commit→publish
p50 / p99 and the load average. On a shared machine the load drifts; alternating and taking medians
keeps the drift from favouring one tree. Extra arguments after ``--`` go to every run (``--window 20``);
``--a-option`` / ``--b-option`` add relay options to one side only (``mark_defer_ms=0``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "loadtest"))

from bench_relay_rate import net_of_idle  # noqa: E402


def one_run(tree: Path, options: list[str], extra: list[str], label: str) -> list[dict[str, Any]]:
    argv = [sys.executable, str(ROOT / "loadtest" / "bench_relay_rate.py"), "--relay-tree", str(tree)]
    argv += ["--label", label, *extra]
    for option in options:
        argv += ["--relay-option", option]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    net_of_idle(results)
    print(f"# {label}: " + json.dumps(results), flush=True)
    return results


def median(runs: list[list[dict[str, Any]]], rate: float, key: str) -> float:
    values = [r[key] for run in runs for r in run if r["rate"] == rate and key in r]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", type=Path, required=True, help="tree A (e.g. /work/main)")
    p.add_argument("--b", type=Path, required=True, help="tree B (e.g. this worktree)")
    p.add_argument("--rounds", type=int, default=1, help="ABBA rounds")
    p.add_argument("--a-option", action="append", default=[], help="relay option for A only")
    p.add_argument("--b-option", action="append", default=[], help="relay option for B only")
    p.add_argument("extra", nargs="*", help="arguments for every bench_relay_rate.py run (after --)")
    args = p.parse_args()
    runs: dict[str, list[list[dict[str, Any]]]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for side in ("A", "B", "B", "A"):
            tree, opts = (args.a, args.a_option) if side == "A" else (args.b, args.b_option)
            runs[side].append(one_run(tree.resolve(), opts, args.extra, side))
    rates = sorted({r["rate"] for run in runs["A"] + runs["B"] for r in run})
    print(
        f"\nA = {args.a} {args.a_option}, B = {args.b} {args.b_option}; medians of {2 * args.rounds} runs each"
    )
    print(
        "\n| events/s | tree | relay µs per row | net of idle µs per row | rows per claim | µs per claim | "
        "commit→publish p50 / p99 ms | idle ms/s | load |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for rate in rates:
        for side in ("A", "B"):
            rs = runs[side]
            if rate == 0:
                print(
                    f"| 0 | {side} | | | | | | {median(rs, 0, 'idle_cpu_ms_per_s'):.1f} | "
                    f"{statistics.median(r['load'][0] for run in rs for r in run if r['rate'] == 0):.1f} |"
                )
                continue
            loads = [r["load"][0] for run in rs for r in run if r["rate"] == rate]
            print(
                f"| {rate:.0f} | {side} | **{median(rs, rate, 'relay_us_per_row'):.0f}** | "
                f"{median(rs, rate, 'relay_net_us_per_row'):.0f} | {median(rs, rate, 'rows_per_claim'):.1f} | "
                f"{median(rs, rate, 'relay_us_per_claim'):.0f} | {median(rs, rate, 'lag_p50_ms'):.0f} / "
                f"{median(rs, rate, 'lag_p99_ms'):.0f} | | {min(loads):.1f}–{max(loads):.1f} |"
            )


if __name__ == "__main__":
    main()
