"""What the A/B benchmarks share: process CPU (psutil user+sys: the machine is shared, so work is
measured in CPU, never in wall time or rates), the ABBA order of their arms (round 1 runs A B,
round 2 B A, ...: a load that drifts hits every arm alike), medians per arm, and the 1-minute
load average every reported number carries.

    for rnd, tree in abba.order(trees, rounds):
        load, c0 = abba.load1(), abba.cpu_seconds([pid])
        ...
        rows.append({"tree": tree, "cpu_us": (abba.cpu_seconds([pid]) - c0) / n * 1e6, "load": load})
    abba.medians(rows, "tree", ["cpu_us"])   # {tree: {"cpu_us": median}}

Imports nothing of the project: the benchmarks run against any checkout.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil

T = TypeVar("T")

__all__ = ["cpu_by_pid", "cpu_seconds", "load1", "load_spans", "medians", "order"]


def load1() -> float:
    """The 1-minute load average, rounded to two decimals."""
    return round(os.getloadavg()[0], 2)


def cpu_by_pid(pids: Iterable[int]) -> dict[int, float]:
    """user+sys CPU seconds of each process (its children not included); 0 for a process that is
    gone or not readable."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            out[pid] = 0.0
            continue
        out[pid] = times.user + times.system
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """user+sys CPU seconds of the processes together (see ``cpu_by_pid``)."""
    return sum(cpu_by_pid(pids).values())


def order(arms: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """``(round, arm)`` in ABBA order: even rounds run ``arms`` as given, odd rounds reversed."""
    for rnd in range(rounds):
        for arm in arms if rnd % 2 == 0 else reversed(arms):
            yield rnd, arm


def medians(
    rows: Iterable[Mapping[str, Any]], by: str, keys: Sequence[str]
) -> dict[Hashable, dict[str, float]]:
    """Per value of ``rows[by]`` (in first-seen order), the median of each of ``keys`` over the
    rows that have it (not None); a key no row has is left out."""
    groups: dict[Hashable, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[by], []).append(row)
    out: dict[Hashable, dict[str, float]] = {}
    for arm, group in groups.items():
        values = {k: [r[k] for r in group if r.get(k) is not None] for k in keys}
        out[arm] = {k: statistics.median(v) for k, v in values.items() if v}
    return out


def named_trees(specs: Sequence[str]) -> list[tuple[str, Path]]:
    """``NAME=DIR`` command-line values as ``(name, resolved directory)``, in order."""
    return [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in specs)]


def tree_runs(
    trees: Sequence[tuple[str, Path]], rounds: int, run: Callable[[str, Path, int], dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Per tree, the results of ``run(name, tree, its run index)`` over ``rounds`` rounds, each round
    running the trees in order and then reversed (A B B A)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    for _ in range(rounds):
        for name, tree in [*trees, *trees[::-1]]:
            runs[name].append(run(name, tree, len(runs[name])))
    return runs


def median_table(runs: Mapping[str, Sequence[Mapping[str, Any]]], keys: Sequence[str]) -> str:
    """A markdown table: per tree (``runs``' keys, in order) its run count and the median of each of
    ``keys`` over its runs."""
    lines = ["| tree | runs | " + " | ".join(keys) + " |", "|---|---:|" + "---:|" * len(keys)]
    for name, rows in runs.items():
        cells = [statistics.median(r[k] for r in rows) for k in keys]
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(f"{m:g}" for m in cells) + " |")
    return "\n".join(lines)


def load_spans(rows: Iterable[Mapping[str, Any]], key: str = "load") -> str:
    """The rows' load averages for a report: ``a→b`` for (start, end) pairs, ``a`` for one value,
    joined by ``; ``."""
    parts = []
    for row in rows:
        load = row[key]
        parts.append(f"{load[0]}→{load[1]}" if isinstance(load, list | tuple) else f"{load}")
    return "; ".join(parts)
