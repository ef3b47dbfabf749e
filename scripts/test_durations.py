#!/usr/bin/env python3
"""Per-file and per-area wall times of a pytest run, from its JUnit XML.

    .venv/bin/python scripts/test_durations.py RUN.xml [RUN2.xml ...] [--write]

Prints the areas' summed test time (the table of docs/testing.md) and the 25 slowest files;
``--write`` also rewrites tests/durations.json, the per-file seconds by which tests/conftest.py
hands the longest files to pytest-xdist's workers first. Several files: the mean per file.
"""

from __future__ import annotations

import argparse
import collections
import json
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"


def file_seconds(xml_path: Path) -> dict[str, float]:
    """``{"tests/area/test_x.py": seconds}``: the sum of each test's setup + call + teardown."""
    per: dict[str, float] = collections.defaultdict(float)
    for case in ET.parse(xml_path).iter("testcase"):
        module = case.get("classname", "")
        # classname is the dotted module path, plus the class for a method: keep the module part.
        parts = module.split(".")
        while parts and not (ROOT / Path(*parts).with_suffix(".py")).exists():
            parts.pop()
        if parts:
            per["/".join(parts) + ".py"] += float(case.get("time", 0.0))
    return dict(per)


def area_of(path: str) -> str:
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else "(root files)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("xml", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help="rewrite tests/durations.json")
    args = parser.parse_args()
    runs = [file_seconds(p) for p in args.xml]
    files = sorted({f for run in runs for f in run})
    mean = {f: sum(run.get(f, 0.0) for run in runs) / sum(1 for run in runs if f in run) for f in files}
    areas: dict[str, float] = collections.defaultdict(float)
    for f, seconds in mean.items():
        areas[area_of(f)] += seconds
    print("| area | test time (s) |\n|---|---:|")
    for area, seconds in sorted(areas.items(), key=lambda kv: -kv[1]):
        print(f"| {area} | {seconds:.0f} |")
    print(f"| all | {sum(areas.values()):.0f} |\n")
    for f, seconds in sorted(mean.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{seconds:8.1f}  {f}")
    if args.write:
        ordered = dict(sorted(((f, round(s, 1)) for f, s in mean.items()), key=lambda kv: (-kv[1], kv[0])))
        DURATIONS.write_text(json.dumps(ordered, indent=0) + "\n", encoding="utf-8")
        print(f"\nwrote {DURATIONS.relative_to(ROOT)} ({len(ordered)} files)")


if __name__ == "__main__":
    main()
