"""A/B of ``loadtest/bench_relay_rate.py`` between source trees of the relay, alternating.

``python loadtest/ab_relay_rate.py --tree main=/work/main --tree this=. --rounds 1`` runs the
benchmark with the relays of each tree in a palindromic order (A B B A; with three trees A B C C B
A; more rounds repeat it), every other process from this tree, and prints per rate the median over
each tree's runs of: the relays' CPU µs per row, the
same net of their idle floor (the rate-0 step), rows per claim, CPU µs per claim, commit→publish
p50 / p99 and the load average. On a shared machine the load drifts; alternating and taking medians
keeps the drift from favouring one tree. Extra arguments after ``--`` go to every run (``--window 20``);
``--option NAME:OPTION=JSON`` adds a relay option to one tree's runs (``this:mark_defer_ms=0``),
``--tree-arg NAME:ARG`` a benchmark argument to one tree's runs (``this:--one-row``).
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
    p.add_argument(
        "--tree", action="append", required=True, metavar="NAME=DIR", help="a relay tree (2 or more)"
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds of the palindromic order (A B … B A)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME:OPTION=JSON",
        help="a relay option for one tree",
    )
    p.add_argument(
        "--tree-arg", action="append", default=[], metavar="NAME:ARG", help="an argument for one tree"
    )
    p.add_argument("extra", nargs="*", help="arguments for every bench_relay_rate.py run (after --)")
    args = p.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    options: dict[str, list[str]] = {name: [] for name in trees}
    for o in args.option:
        name, _, option = o.partition(":")
        options[name].append(option)
    extra: dict[str, list[str]] = {name: [] for name in trees}
    for a in args.tree_arg:
        name, _, arg = a.partition(":")
        extra[name].append(arg)
    names = list(trees)
    runs: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names + names[::-1]:
            runs[name].append(
                one_run(Path(trees[name]).resolve(), options[name], [*args.extra, *extra[name]], name)
            )
    rates = sorted({r["rate"] for rs in runs.values() for run in rs for r in run})
    print(
        "\n"
        + ", ".join(f"{n} = {trees[n]} {options[n]} {extra[n]}" for n in names)
        + f"; medians of {2 * args.rounds} runs each"
    )
    print(
        "\n| events/s | tree | relay µs per row | µs per event | net of idle µs per row | rows per claim | "
        "µs per claim | commit→publish p50 / p99 ms | idle ms/s | load |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for rate in rates:
        for name in names:
            rs = runs[name]
            loads = [r["load"][0] for run in rs for r in run if r["rate"] == rate]
            if rate == 0:
                print(
                    f"| 0 | {name} | | | | | | | {median(rs, 0, 'idle_cpu_ms_per_s'):.1f} | "
                    f"{min(loads):.1f}–{max(loads):.1f} |"
                )
                continue
            print(
                f"| {rate:.0f} | {name} | {median(rs, rate, 'relay_us_per_row'):.0f} | "
                f"**{median(rs, rate, 'relay_us_per_event'):.0f}** | "
                f"{median(rs, rate, 'relay_net_us_per_row'):.0f} | "
                f"{median(rs, rate, 'rows_per_claim'):.1f} | "
                f"{median(rs, rate, 'relay_us_per_claim'):.0f} | {median(rs, rate, 'lag_p50_ms'):.0f} / "
                f"{median(rs, rate, 'lag_p99_ms'):.0f} | | {min(loads):.1f}–{max(loads):.1f} |"
            )


if __name__ == "__main__":
    main()
