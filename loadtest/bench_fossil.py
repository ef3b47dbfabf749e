"""Fossil delta micro-benchmark (issue 28): CPU time and delta size of ``fossil.create`` on
worst-case (repetitive) and typical inputs, at several sizes.

Cases: ``one-byte-edit`` (the issue's ``{"s":"x"*n}`` then ``{"s":"y"+"x"*(n-1)}``),
``identical``, ``shifted-period`` (``ab…`` then ``ba…``), ``short-copies`` (``x`` runs broken
every 32 bytes: the most copies per byte), ``random`` (nothing to copy), ``random-edits`` (10
bytes changed), ``task-json`` (a task document with one step changed). ``--module PATH`` loads
another ``fossil.py`` (e.g. from a worktree of the code before a change) for comparison; every
delta is checked with this tree's ``fossil.apply``. One JSON line per case and size.

Usage: ``python loadtest/bench_fossil.py [--sizes 4096,16384,32768]
[--module /old/gateway/protocol/fossil.py]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.protocol import fossil  # noqa: E402


def cases(n: int, rng: random.Random) -> dict[str, tuple[bytes, bytes]]:
    source = rng.randbytes(n)
    edited = bytearray(source)
    for _ in range(10):
        edited[rng.randrange(n)] = 65
    steps = [
        {"id": i, "state": rng.choice(["queued", "running", "done"]), "progress": i % 100}
        for i in range(n // 48)
    ]
    before = json.dumps({"task": "t1", "steps": steps}).encode()
    steps[len(steps) // 2]["state"] = "failed"
    after = json.dumps({"task": "t1", "steps": steps}).encode()
    return {
        "one-byte-edit": (b'{"s":"' + b"x" * n + b'"}', b'{"s":"y' + b"x" * (n - 1) + b'"}'),
        "identical": (b"x" * n, b"x" * n),
        "shifted-period": (b"ab" * (n // 2), b"ba" * (n // 2)),
        "short-copies": (b"x" * n, (b"x" * 31 + b"y") * (n // 32)),
        "random": (source, rng.randbytes(n)),
        "random-edits": (source, bytes(edited)),
        "task-json": (before, after),
    }


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("fossil_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,16384,32768")
    parser.add_argument("--module", default="", help="another fossil.py to measure")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs")
    args = parser.parse_args(argv)
    module = load(args.module) if args.module else fossil
    for n in (int(x) for x in args.sizes.split(",")):
        for name, (source, target) in cases(n, random.Random(n)).items():
            best = float("inf")
            for _ in range(args.repeat):
                started = time.process_time()
                delta = module.create(source, target)
                best = min(best, time.process_time() - started)
            assert fossil.apply(source, delta) == target
            row = {"case": name, "size": n, "cpu_ms": round(1000 * best, 2), "delta_bytes": len(delta)}
            print(json.dumps(row), flush=True)
    print(json.dumps({"loadavg": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
