"""Open-loop load: requests started at a fixed rate whatever the answers do (the benchmarks'
producers; ``bench_e2e.py``, ``capacity_e2e.py``).

* :func:`open_loop` — calls ``send(i)`` ``rate`` times a second, optionally after a warm-up whose
  requests are sent but not counted.
* The **producer process** (``python loadtest/open_loop.py --contexts FILE --port P``): workers'
  events over keep-alive HTTP (``fleet.HTTPPool``) to a Status API, commanded one JSON line at a
  time on stdin, one JSON answer line each on stdout, so that its CPU is its own and a driver
  process can measure it apart from the clients':

  - ``{"cmd": "start"}`` — every task's first event (``STEP_STARTED``), ``--conns`` in flight;
  - ``{"cmd": "rung", "rate": R, "start_at": T, "warmup": W, "window": S}`` — from wall clock
    ``T``, open loop at ``R`` events/s for ``W + S`` seconds, round robin over the tasks (each task's
    ``sourceSeq`` continues across rungs); the answer is :func:`open_loop`'s result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import HTTPPool, pct
from ingest_http import event_request

EVENTS_PATH = "/internal/v1/task-events"


async def open_loop(
    rate: float,
    seconds: float,
    send: Callable[[int], Awaitable[None]],
    *,
    warmup: float = 0.0,
    wait_s: float = 30.0,
) -> dict[str, Any]:
    """Calls ``send(i)`` at ``t0 + i / rate`` for ``warmup + seconds`` (bounded count and time),
    then waits up to ``wait_s`` for the calls in flight. A call that raises is an error.

    Counted are the calls started after the warm-up (the window): ``ok``/``errors``, the latency
    percentiles (start → return), ``achieved`` = ok / (window start → last answer) and
    ``accepted_per_s`` = the successful answers that arrived *within* the window / its length (the
    throughput; ``achieved`` also counts a backlog answered after the window)."""
    ok = errors = answered = 0
    first_error = ""
    lat: list[float] = []
    tasks: set[asyncio.Task[None]] = set()
    t0 = time.perf_counter()
    w0, w1 = t0 + warmup, t0 + warmup + seconds

    async def one(i: int, counted: bool) -> None:
        nonlocal ok, errors, answered, first_error
        t = time.perf_counter()
        try:
            await send(i)
        except Exception as exc:  # counted and reported, the run goes on
            if counted:
                errors += 1
                first_error = first_error or repr(exc)[:300]
            return
        done = time.perf_counter()
        answered += w0 <= done < w1
        if counted:
            ok += 1
            lat.append((done - t) * 1000)

    warm = int(rate * warmup)
    n = warm + int(rate * seconds)
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(i, i >= warm))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=wait_s)
    wall = time.perf_counter() - w0
    return {
        "offered": rate,
        "sent": n - warm,
        "ok": ok,
        "errors": errors,
        "first_error": first_error,
        "achieved": ok / wall,
        "accepted_per_s": answered / seconds if seconds > 0 else float("nan"),
        "unanswered": len(tasks),
        "request_p50_ms": pct(lat, 50),
        "request_p99_ms": pct(lat, 99),
    }


class Producer:
    """The producer process's state: the tasks, each task's next ``sourceSeq``, the round robin."""

    def __init__(self, contexts: list[dict[str, Any]], port: int, conns: int) -> None:
        self.contexts, self.port, self.conns = contexts, port, conns
        self.seq = [0] * len(contexts)
        self.next = 0
        self.pool = HTTPPool(port, conns)

    async def fresh_pool(self) -> None:
        """The Status API closes a connection idle past its request deadline: new ones per command."""
        await self.pool.close()
        self.pool = HTTPPool(self.port, self.conns)
        await self.pool.open()

    async def send(self, k: int) -> None:
        self.seq[k] += 1
        body, headers = event_request(self.contexts[k], self.seq[k], total=1_000_000)
        status, raw = await self.pool.request(EVENTS_PATH, body, headers, wait_s=30)
        if status != 200:
            raise RuntimeError(f"event {status} {raw[:200]!r}")

    async def start(self) -> dict[str, Any]:
        gate = asyncio.Semaphore(self.conns)
        errors: list[str] = []

        async def first(k: int) -> None:
            async with gate:
                try:
                    await self.send(k)
                except Exception as exc:  # reported to the driver
                    errors.append(repr(exc)[:300])

        await asyncio.gather(*(first(k) for k in range(len(self.contexts))))
        first_error = errors[0] if errors else ""
        return {"tasks": len(self.contexts), "errors": len(errors), "first_error": first_error}

    async def rung(self, rate: float, start_at: float, warmup: float, window: float) -> dict[str, Any]:
        delay = start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)  # the instant agreed with the driver

        async def send(_: int) -> None:
            k = self.next
            self.next = (k + 1) % len(self.contexts)
            await self.send(k)

        return await open_loop(rate, window, send, warmup=warmup)


async def serve(contexts: list[dict[str, Any]], args: argparse.Namespace) -> None:
    producer = Producer(contexts, args.port, args.conns)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            cmd = json.loads(line)
            await producer.fresh_pool()
            if cmd["cmd"] == "start":
                out = await producer.start()
            else:
                out = await producer.rung(cmd["rate"], cmd["start_at"], cmd["warmup"], cmd["window"])
            print(json.dumps(out), flush=True)
    finally:
        await producer.pool.close()


def main() -> None:
    import uvloop

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--contexts", required=True, help="JSON list of step contexts (ingest_http._create)")
    p.add_argument("--port", type=int, required=True, help="the Status API's port")
    p.add_argument("--conns", type=int, default=128, help="keep-alive connections (requests in flight)")
    args = p.parse_args()
    uvloop.run(serve(json.loads(Path(args.contexts).read_text()), args))


if __name__ == "__main__":
    main()
