"""Share of a relay's py-spy samples (``record -f raw``, collapsed stacks) per part of a claim cycle.

    python loadtest/spy_categories.py DIR/relay-0.txt DIR/relay-1.txt

Each sample goes to the first category (in the order below) one of whose frames its stack holds, so a
sample counts once: the claim (``OutboxLeases.claim``: the claim's two requests and the deferred mark
riding on it), a poll's look, the deferred marks' own UPDATE, the HTTP publish, the rest of a cycle's
bookkeeping (``Relay.run_batch``/``_settle``: metrics, split, results), the hint listener (Redis or
UDP), the idle loops' scheduling (``Wakeups``), the gauges and retention (``_maintenance``), the
metrics server's thread (a stack py-spy cut short goes by its inner frames: ``CUT_SHORT``); what
is left is the event loop itself (``_run_once``, ``select``, the transports' callbacks that resume
the tasks above) and anything else.
"""

from __future__ import annotations

import argparse
from collections import Counter

from spy_summary import stacks

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("claim (two requests, the deferred mark riding on it)", ("OutboxLeases.claim ",)),
    ("a poll's look", ("OutboxLeases.nothing_to_claim ",)),
    (
        "deferred mark on its own (timer)",
        ("DeferredMarks.", "OutboxLeases.flush_marks ", "OutboxLeases.settle "),
    ),
    ("HTTP publish to the gateway", ("HttpGatewayPublisher.",)),
    ("cycle bookkeeping (run_batch, _settle, metrics)", ("Relay.run_batch ", "Relay._settle ")),
    ("hint listener (Redis PUB/SUB, UDP)", ("RedisWakeListener.", "UdpWakeListener.", "_WakeProtocol.")),
    ("idle loops' scheduling (Wakeups, _worker)", ("Wakeups.", "Relay._worker ")),
    ("gauges, retention (_maintenance)", ("Relay._maintenance ",)),
    ("metrics server thread", ("serve_forever ",)),
)
#: Stacks py-spy cut short (``--nonblocking`` reads a running process: a sample may lack the
#: outer frames that name its part) go by the inner frames they kept, when one names a part.
CUT_SHORT: tuple[tuple[str, tuple[str, ...]], ...] = (
    (CATEGORIES[0][0], ("claim_driver ", "round_trip ", "OutboxLeases._driver ", "DriverSQL.")),
    (
        CATEGORIES[3][0],
        ("KeepAliveClient.", "_parse_head ", "publish_params ", "expand (", "decode_publications "),
    ),
    (CATEGORIES[5][0], ("PubSub.", "hiredis", "read_response ")),
)


def categorise(paths: list[str]) -> tuple[int, Counter[str]]:
    counts: Counter[str] = Counter()
    total = 0
    for path in paths:
        for stack, n in stacks(path):
            total += n
            for name, needles in CATEGORIES + CUT_SHORT:
                if any(needle in stack for needle in needles):
                    counts[name] += n
                    break
            else:
                counts["event loop and the rest"] += n
    return total, counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+")
    args = p.parse_args()
    total, counts = categorise(args.paths)
    print(f"{total} samples\n\n| part | share |\n|---|---:|")
    for name, n in counts.most_common():
        print(f"| {name} | {100 * n / max(total, 1):.1f} % |")


if __name__ == "__main__":
    main()
