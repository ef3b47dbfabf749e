"""Gateway CPU per publication of the relays' ``/api/batch`` requests on the inline HTTP path, in
one process: the server API's batch parse and checks, the executor, the publish and the reply.

Each tree's gateway (``PYTHONPATH=<tree>``, memory engine, default settings) runs in a child
process of its own: its HTTP protocol class is fed, through ``data_received`` over a fake
transport, ``POST /api/batch`` requests shaped as the relay sends them (relay/publisher.py
``publish_params``: ``channel``, a ~600-byte task state as ``data``, ``idempotency_key``, and the
relay's four tags), ``--batch`` publications each, every publication to its own channel (nobody
subscribed). A batch of at most 128 completes inline (``ServerApi.completes_inline_batch``), so
``time.process_time`` around the feed is the whole request. Reported per tree and batch size:
the median over ``--rounds`` rounds (trees alternate A B B A) of the median of 5 blocks, in µs
of CPU per publication, with the 1-minute load average before and after.

    mkdir /tmp/main && git archive main | tar -x -C /tmp/main
    python loadtest/bench_batch_parse.py --tree main=/tmp/main --tree branch=. --markdown

``--child`` runs one measurement in this interpreter (profile it with py-spy:
``py-spy record -f raw -o out.txt -- python loadtest/bench_batch_parse.py --child --batch 50``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # last: a child's ``gateway`` is its tree's (``PYTHONPATH``)

from loadtest.bench_api_publish import inline_server, request  # noqa: E402
from loadtest.bench_gateway_publish import payload  # noqa: E402
from loadtest.procs import clean_env  # noqa: E402


def batch_body(first: int, size: int) -> bytes:
    """A relay-shaped ``batch`` body of ``size`` publications, rows ``first``…"""
    import orjson

    commands = []
    for i in range(first, first + size):
        tags = {"task": f"t{i:08d}", "conflate": "task.summary", "committed_at_ms": "1764700000000",
                "published_at_ms": "1764700000123"}  # fmt: skip
        params = {
            "channel": f"bench_u{i % 5000}",
            "data": payload(i),
            "idempotency_key": f"outbox-{i}",
            "tags": tags,
        }
        commands.append({"publish": params})
    return orjson.dumps({"commands": commands})


async def child(batch: int, publications: int) -> None:
    """This interpreter's gateway (``PYTHONPATH``); prints µs of CPU per publication."""
    protocol, transport = inline_server()
    requests = max(1, publications // batch)
    bodies = [request(b"k", b"/api/batch", batch_body(n * batch, batch)) for n in range(requests)]
    for body in bodies:  # warm: every channel resolved once
        protocol.data_received(body)  # type: ignore[attr-defined]
    blocks = []
    for _ in range(5):
        written = transport.written
        c0 = time.process_time()
        for body in bodies:
            protocol.data_received(body)  # type: ignore[attr-defined]
        blocks.append((time.process_time() - c0) / (requests * batch) * 1e6)
        # every request answered inline (a 200 of ``batch`` replies is written per request)
        assert transport.written - written >= requests * batch * 10, "not answered inline"
    import gateway

    print(json.dumps({"us_per_publication": statistics.median(blocks), "gateway": gateway.__file__}))


def one(tree: Path, batch: int, publications: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--batch", str(batch), "--publications", str(publications)],
        env=clean_env(PYTHONPATH=str(tree)), cwd=str(tree), check=True, capture_output=True, text=True,
    )  # fmt: skip
    result = json.loads(out.stdout.splitlines()[-1])
    assert Path(result["gateway"]).is_relative_to(tree), f"{tree}: imported {result['gateway']}"
    return float(result["us_per_publication"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a gateway source tree")
    parser.add_argument("--batches", default="4,50", help="publications per request (at most 128)")
    parser.add_argument("--batch", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--publications", type=int, default=5000, help="per block")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per tree (A B B A ...)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--child", action="store_true", help="one measurement in this interpreter")
    a = parser.parse_args(argv)
    if a.child:
        asyncio.run(child(a.batch, a.publications))
        return
    trees = [(n, Path(p).resolve()) for n, _, p in (t.partition("=") for t in a.tree or [f"this={ROOT}"])]
    results: dict[tuple[str, int], list[float]] = {}
    loads = [os.getloadavg()[0]]
    for r in range(a.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for batch in (int(b) for b in a.batches.split(",")):
            for name, tree in order:
                results.setdefault((name, batch), []).append(one(tree, batch, a.publications))
        loads.append(os.getloadavg()[0])
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    if a.markdown:
        print(
            "| tree | batch | µs CPU per publication (median) | rounds | load (1 min) |\n"
            "|---|---:|---:|---|---|"
        )
    for (name, batch), runs in results.items():
        med = statistics.median(runs)
        rounds = " / ".join(f"{x:.2f}" for x in runs)
        if a.markdown:
            print(f"| {name} | {batch} | **{med:.2f}** | {rounds} | {load} |")
        else:
            print(
                json.dumps(
                    {
                        "tree": name,
                        "batch": batch,
                        "us_per_publication": round(med, 2),
                        "rounds": runs,
                        "load1": load,
                    }
                )
            )


if __name__ == "__main__":
    main()
