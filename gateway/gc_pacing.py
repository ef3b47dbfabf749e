"""Garbage-collector pacing for a process that holds many long-lived objects (issue 16).

A gateway node keeps every connection's objects (client, session, transport, timers, tasks; ~90
tracked objects each) alive for hours. CPython's automatic full collection rescans all of them
each time the objects promoted since the last one reach a quarter of the survivors: with 2,500
connections that was a 200–300 ms pause of the event loop every 10–30 s on the reference machine,
during which no publication is delivered. At 10 publications/s one such pause per 20 s put the p99
of publish → delivered at 219 ms against 18.5 ms without it (``loadtest/bench_gc.py``,
docs/PERFORMANCE.md "Garbage-collector pauses").

:class:`GcPacer` takes the full collections off CPython's schedule and onto its own. Contract:

* at startup (``run``'s first step) it collects once and freezes the survivors (``gc.freeze()``:
  modules, functions, classes, the settings — objects that live as long as the process), so no
  collection ever scans them again;
* while it runs, CPython's automatic full collections are off (the third threshold raised); young
  collections are unchanged, and reference counting frees non-cyclic garbage at once as always;
* every ``node.gc_full_collection_interval`` it runs one full collection itself: the pause happens
  once per interval instead of every 10–30 s, and cyclic garbage that reached the oldest generation
  (a closed connection leaves ~28 such objects) waits at most one interval;
* ``0`` turns pacing off: CPython's automatic collections, unchanged. :meth:`close` restores the
  thresholds and unfreezes.

Pauses of every collection are exported as ``taskcast_gateway_gc_pause_seconds{generation}``
(gc callbacks; generation 2 includes the paced ones) and paced collections as
``taskcast_gateway_gc_paced_collections_total``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.metrics import LoopCounters, LoopHistograms

log = logging.getLogger("taskcast.gateway.gc")

#: Pause buckets (seconds): a young collection takes well under a millisecond; a full one of a
#: large node hundreds of milliseconds.
#: The oldest generation's threshold while pacing: its automatic collections never come due.
FULL_COLLECTIONS_OFF = 1 << 30
PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GcPacer:
    """Paced full collections plus pause metrics for this process (see the module docstring).

    ``interval`` seconds between paced collections (0 = off). :meth:`install` registers the pause
    callback; :meth:`run` paces until cancelled; :meth:`close` undoes both (unfreezes)."""

    def __init__(
        self,
        interval: float,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.interval = interval
        self.clock = clock
        # Lock-free series: a collection may start inside any allocation, a prometheus lock
        # included, so the callback must never take one.
        self.pause = LoopHistograms(
            "taskcast_gateway_gc_pause_seconds",
            "Event-loop pause of each garbage collection, by generation (2 = full).",
            ("generation",),
            buckets=PAUSE_BUCKETS,
        )
        self.paced = LoopCounters(
            "taskcast_gateway_gc_paced_collections",
            "Full collections run by the pacer (node.gc_full_collection_interval).",
            (),
        )
        self.paced.inc((), 0)
        if registry is not None:
            registry.register(self.pause)
            registry.register(self.paced)
        self._by_gen = [self.pause.labels(str(g)) for g in range(3)]
        self._started = 0.0
        self._installed = False
        self._holding = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self.clock()
        else:
            self._by_gen[min(2, int(info["generation"]))].observe(self.clock() - self._started)

    def install(self) -> None:
        """Start observing every collection's pause (idempotent)."""
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def collect(self) -> int:
        """One paced full collection; returns the number of unreachable objects it found."""
        found = gc.collect()
        self.paced.inc(())
        return found

    async def run(self) -> None:
        """Freeze what startup left, take over full collections, then collect every ``interval``
        seconds until cancelled. Returns at once when pacing is off."""
        if self.interval <= 0:
            return
        _take_over()
        self._holding = True
        log.debug("full collections every %g s; %d objects frozen", self.interval, gc.get_freeze_count())
        while True:
            await asyncio.sleep(self.interval)
            self.collect()

    def close(self) -> None:
        """Stop observing; the last pacer of the process to close gives CPython its schedule back
        and unfreezes (idempotent)."""
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False
        if self._holding:
            self._holding = False
            _give_back()


# The collector is process-wide; several runtimes in one process (tests, ``taskcast up``) share it:
# the first pacer to run takes it over, the last to close gives it back.
_holders = 0
_saved_thresholds: tuple[int, int, int] = gc.get_threshold()


def _take_over() -> None:
    global _holders, _saved_thresholds
    if _holders == 0:
        gc.collect()
        gc.freeze()
        _saved_thresholds = gc.get_threshold()
        young, middle, _ = _saved_thresholds
        gc.set_threshold(young, middle, FULL_COLLECTIONS_OFF)
    _holders += 1


def _give_back() -> None:
    global _holders
    _holders -= 1
    if _holders == 0:
        gc.set_threshold(*_saved_thresholds)
        gc.unfreeze()
