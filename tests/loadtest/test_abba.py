"""loadtest/abba.py: the ABBA order of a benchmark's arms, medians per arm, process CPU of this
process and of a gone one, load spans for a report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadtest import abba


def test_arms_alternate_abba() -> None:
    assert [arm for _, arm in abba.order(["a", "b"], 4)] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [rnd for rnd, _ in abba.order(["a", "b", "c"], 2)] == [0, 0, 0, 1, 1, 1]


def test_medians_per_arm_skip_missing_values() -> None:
    rows = [
        {"tree": "main", "us": 3.0, "purge": None},
        {"tree": "branch", "us": 1.0, "purge": 5.0},
        {"tree": "branch", "us": 2.0, "purge": 7.0},
        {"tree": "main", "us": 5.0, "purge": None},
    ]
    assert abba.medians(rows, "tree", ["us", "purge"]) == {
        "main": {"us": 4.0},
        "branch": {"us": 1.5, "purge": 6.0},
    }


def test_cpu_of_this_process_grows_and_a_gone_process_counts_zero() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    before = abba.cpu_seconds([os.getpid()])
    sum(i * i for i in range(300_000))
    assert abba.cpu_seconds([os.getpid()]) >= before
    assert abba.cpu_by_pid([gone.pid]) == {gone.pid: 0.0}


def test_load_spans() -> None:
    assert abba.load_spans([{"load": (1.0, 2.5)}, {"load": 3.2}]) == "1.0→2.5; 3.2"
    assert isinstance(abba.load1(), float)


def test_median_table_has_a_row_per_tree_with_its_run_count_and_medians() -> None:
    table = abba.median_table(
        {"main": [{"us": 10, "load": 1}, {"us": 30, "load": 3}], "this": [{"us": 7, "load": 2}]},
        ("us", "load"),
    )
    assert table.splitlines() == [
        "| tree | runs | us | load |",
        "|---|---:|---:|---:|",
        "| main | 2 | 20 | 2 |",
        "| this | 1 | 7 | 2 |",
    ]


def test_named_trees_split_at_the_first_equals_and_resolve() -> None:
    assert abba.named_trees(["main=/tmp/a/../b", "x=rel=dir"]) == [
        ("main", Path("/tmp/b")),
        ("x", Path("rel=dir").resolve()),
    ]


def test_tree_runs_alternate_abba_within_each_round_and_count_each_trees_runs() -> None:
    calls: list[tuple[str, int]] = []

    def run(name: str, tree: Path, i: int) -> dict[str, object]:
        calls.append((name, i))
        return {"tree": str(tree)}

    runs = abba.tree_runs([("a", Path("/a")), ("b", Path("/b"))], 2, run)
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    assert runs == {"a": [{"tree": "/a"}] * 4, "b": [{"tree": "/b"}] * 4}
