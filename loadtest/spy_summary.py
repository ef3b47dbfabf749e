"""Summarise a ``py-spy record -f raw`` profile (collapsed stacks) as the tables of
docs/PERFORMANCE.md: the functions with the largest inclusive and self shares of the samples.

    python loadtest/spy_summary.py docs/perf/publish-profile-after.txt [--top 25]

A frame is "function file" (py-spy's ``function (path:line)`` without the path and line), so the
lines of one function count as one; time in C code is charged to the calling Python function.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator


def frame_name(frame: str) -> str:
    function, _, where = frame.partition(" (")
    return f"{function} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else function


def stacks(path: str) -> Iterator[tuple[str, int]]:
    """Each ``(collapsed stack, samples)`` line of a raw profile; blank or malformed lines skipped."""
    with open(path) as lines:
        for line in lines:
            stack, _, count = line.rstrip().rpartition(" ")
            if stack:
                yield stack, int(count)


def summarise(path: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, inclusive samples per frame, self samples per frame)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for stack, n in stacks(path):
        total += n
        frames = [frame_name(f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    return total, inclusive, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total, inclusive, own = summarise(args.profile)
    print(f"{total} samples\n\n| frame (inclusive) | % | | frame (self) | % |\n|---|---:|---|---|---:|")
    rows = zip(inclusive.most_common(args.top), own.most_common(args.top), strict=False)
    for (frame, n), (self_frame, m) in rows:
        print(f"| `{frame}` | {100 * n / total:.1f} | | `{self_frame}` | {100 * m / total:.1f} |")


if __name__ == "__main__":
    main()
