"""The garbage collector's pauses of a gateway process: fewer objects to scan, and every pause
measured.

A full collection pauses the event loop for a time proportional to the tracked objects: on the
2-core reference machine 287 ms for a node with 2,500 connections, 120 ms for one with 300, of
which ~85,000 objects are what importing the stack left: modules, functions, classes
(``loadtest/bench_gc.py``, docs/PERFORMANCE.md "Garbage-collector pauses").

* :func:`freeze_startup` — at startup, one collection and then ``gc.freeze()``: the survivors,
  which live as long as the process, move to the permanent generation and no collection scans
  them again (a full collection: 300 connections 120 → 14 ms, 2,500 connections 287 → 154 ms).
  Reference counting still frees anything frozen that stops being referenced; only a cycle among
  frozen objects would wait (none is made after startup: what is frozen is what existed then).
  :func:`thaw` gives them back (the last runtime of a process to stop; tests and ``taskcast up``
  hold several).
* :class:`GcPauses` — ``taskcast_gateway_gc_pause_seconds{generation}``: each collection's pause
  (and ``taskcast_gateway_gc_frozen_objects``),
  from ``gc.callbacks``, on lock-free series (a collection may start inside any allocation,
  a prometheus lock included, so the callback never takes one).

CPython's own schedule of collections is kept: measured against a schedule of our own (one full
collection per minute), it ran no full collection at all in two minutes of steady traffic on
2,500 connections, where the fixed schedule ran two (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.metrics import LoopHistograms

#: Pause buckets (seconds): a young collection takes well under a millisecond; a full one of a
#: large node hundreds of milliseconds.
PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GcPauses:
    """Observes every collection's pause while installed (:meth:`install` / :meth:`close`)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.perf_counter
    ):
        self.clock = clock
        self.pause = LoopHistograms(
            "taskcast_gateway_gc_pause_seconds",
            "Event-loop pause of each garbage collection, by generation (2 = full).",
            ("generation",),
            buckets=PAUSE_BUCKETS,
        )
        if registry is not None:
            registry.register(self.pause)
            registry.register(_Frozen())
        self._by_gen = [self.pause.labels(str(g)) for g in range(3)]
        self._started = 0.0
        self._installed = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self.clock()
        else:
            self._by_gen[min(2, int(info["generation"]))].observe(self.clock() - self._started)

    def install(self) -> None:
        """Start observing (idempotent)."""
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def close(self) -> None:
        """Stop observing (idempotent)."""
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False


class _Frozen(Collector):
    """``taskcast_gateway_gc_frozen_objects``: objects out of every scan (:func:`freeze_startup`)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "taskcast_gateway_gc_frozen_objects",
            "Objects frozen at startup: never scanned by a collection.",
            value=gc.get_freeze_count(),
        )


# The collector is process-wide; several runtimes in one process share the freeze: the first to
# start freezes, the last to stop thaws.
_holders = 0


def freeze_startup() -> int:
    """Collect once, then freeze every survivor (the first call of the process; later calls only
    count a holder). Returns the number of frozen objects."""
    global _holders
    if _holders == 0:
        gc.collect()
        gc.freeze()
    _holders += 1
    return gc.get_freeze_count()


def thaw() -> None:
    """One holder fewer; the last gives every frozen object back to the collector."""
    global _holders
    if _holders > 0:
        _holders -= 1
        if _holders == 0:
            gc.unfreeze()
