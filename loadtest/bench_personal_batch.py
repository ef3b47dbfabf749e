"""Personal-channel benchmark with ``POST /api/batch``: the shared perfbench harness
(/work/shared/bench, installed at /tmp/perfcheck/bench), unchanged, with one publisher added.

The harness's personal scenario (``--personal-servers``) publishes one ``POST /api/publish`` per
publication, round-robin over N one-subscriber channels. With ``--batch K`` this script gives the
Taskcast servers a publisher that sends the same publications as ``POST /api/batch`` requests of
K ``publish`` commands (K consecutive channels, Centrifugo's batch shape); a partial batch is sent
after 200 ms (at the rates measured batches fill first; the latency columns then include up to
K / rate of batching wait). nchan has no batch endpoint: it keeps the
harness's single-publish pool, which is the figure the batch target is stated against. Every
other option, the rate ladder (publications/s), the measurement and the results JSON are the
harness's own; run it from the harness directory:

    cd /tmp/perfcheck/bench && ulimit -n 20000 && ../venv/bin/python \\
        /work/main/loadtest/bench_personal_batch.py --batch 100 --proj /work/main \\
        --personal-servers taskcast,nchan --servers ws-broadcast --ns 10 --ladder 1000 --name b.json

Only the harness's loopback processes are started; nothing here changes what it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from typing import Any

FLUSH_AFTER_SECONDS = 0.2


def _batch_pool(bench: Any, size: int) -> type:
    """The harness's HTTPPool, sending ``size`` publications per ``/api/batch`` request."""

    class BatchPool(bench.HTTPPool):  # type: ignore[misc, name-defined]
        def __init__(self, kind: str, k: int, personal_n: int = 0) -> None:
            super().__init__(kind, k, personal_n)
            self.pending: list[tuple[bytes, int]] = []
            self.flushing: set[asyncio.Task[None]] = set()

        async def send(self, data: bytes, idx: int = 0) -> None:
            self.pending.append((data, idx))
            if len(self.pending) >= size:
                await self._flush()
            elif len(self.pending) == 1:
                asyncio.get_running_loop().call_later(FLUSH_AFTER_SECONDS, self._flush_later, self.pending)

        def _flush_later(self, batch: list[tuple[bytes, int]]) -> None:
            if batch is self.pending and batch:
                task = asyncio.get_running_loop().create_task(self._flush())
                self.flushing.add(task)
                task.add_done_callback(self.flushing.discard)

        async def _flush(self) -> None:
            batch, self.pending = self.pending, []
            if batch:
                await bench.HTTPPool.send(self, batch, 0)

        def request(self, batch: Any, idx: int) -> bytes:
            commands = b",".join(
                b'{"publish":{"channel":"u%d","data":%s}}' % (i % self.personal_n, data) for data, i in batch
            )
            body = b'{"commands":[' + commands + b"]}"
            return (
                b"POST /api/batch HTTP/1.1\r\n"
                + self.host_hdr
                + b"Content-Type: application/json\r\nX-API-Key: "
                + bench.API_KEY.encode()
                + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body
            )

        async def drain(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109  # the harness's signature
            await self._flush()
            await super().drain(timeout)

    return BatchPool


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--batch", type=int, default=100, help="publications per /api/batch request")
    parser.add_argument("--harness", default=os.getcwd(), help="perfbench directory (bench.py)")
    ours, rest = parser.parse_known_args()
    sys.path.insert(0, os.path.abspath(ours.harness))
    bench = importlib.import_module("bench")
    pool = _batch_pool(bench, ours.batch)
    original = bench.make_pub

    def make_pub(spec: dict[str, Any], personal_n: int = 0) -> Any:
        if spec.get("pub") == "cent" and personal_n:
            return pool("cent", bench.HTTP_POOL_PERSONAL, personal_n)
        return original(spec, personal_n)

    bench.make_pub = make_pub
    path = bench.__file__
    with open(path) as f:
        source = f.read()
    marker = 'if __name__ == "__main__":'
    block = source[source.index(marker) :].replace(marker, "if True:", 1)
    sys.argv = [path, *rest]
    exec(compile(block, path, "exec"), bench.__dict__)  # the harness's own argument parsing and run


if __name__ == "__main__":
    main()
