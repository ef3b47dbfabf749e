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
  (and ``taskcast_gateway_gc_frozen_objects``, ``taskcast_gateway_gc_thaws_total``),
  from ``gc.callbacks``, on lock-free series (a collection may start inside any allocation,
  a prometheus lock included, so the callback never takes one).
* **Refreezing** (:meth:`GcPauses.install` with ``loop``): after each full collection, its
  survivors are frozen too (``gc.freeze()``, scheduled on the event loop: the collector's own
  callback only sets it up). What survives a full collection is mostly long-lived: established
  connections, their subscriptions, caches. The next full collection scans only what was made
  since, so its pause no longer grows with the connections held (10,000 connections: see
  docs/PERFORMANCE.md "Garbage-collector pauses"). A closed connection frees itself by
  reference counting (no reference cycle: tests/gateway/test_connection_cycles.py), frozen or not.
* **Safety valve**: a frozen object that later ends in a reference cycle is never collected
  while frozen. When the frozen count passes what startup and the live connections explain
  (``FROZEN_PER_CONNECTION`` each, plus ``FROZEN_SLACK``), everything is unfrozen and collected
  once (one full pause of the whole heap, counted by ``taskcast_gateway_gc_thaws_total``), and
  the survivors frozen again: leaked cycles are bounded by that margin.

CPython's own schedule of collections is kept: measured against a schedule of our own (one full
collection per minute), it ran no full collection at all in two minutes of steady traffic on
2,500 connections, where the fixed schedule ran two (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.metrics import LoopHistograms

#: Pause buckets (seconds): a young collection takes well under a millisecond; a full one of a
#: large node hundreds of milliseconds.
PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

FROZEN_PER_CONNECTION = 150
"""Frozen objects one live connection explains: a WebSocket connection with one subscription
accounts for about 52 (10,000 connections: 606,000 frozen, 85,000 of them startup's;
``loadtest/bench_gc.py``); the rest is margin for larger ones (several subscriptions, streaming
transports, commands in flight)."""

FROZEN_SLACK = 200_000
"""Frozen objects beyond startup's and the connections' that the safety valve lets pass: caches,
channel state, history of a node with no connections."""


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: Callable[[], int] = lambda: 0
        self._scheduled = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self.clock()
            return
        generation = min(2, int(info["generation"]))
        self._by_gen[generation].observe(self.clock() - self._started)
        loop = self._loop
        if generation == 2 and loop is not None and not self._scheduled and _holders > 0:
            # Inside the collection: no freeze here, one callback on the loop (any thread may
            # collect; call_soon_threadsafe takes no lock).
            self._scheduled = True
            try:
                loop.call_soon_threadsafe(self._refreeze)
            except RuntimeError:  # the loop is closed
                self._scheduled = False

    def _refreeze(self) -> None:
        """Freeze the survivors of the full collection that just ran; or, past the valve's bound,
        unfreeze everything and collect once (whose end schedules the next freeze)."""
        self._scheduled = False
        if _holders == 0:
            return  # thawed meanwhile: the process is stopping
        if gc.get_freeze_count() > self.frozen_bound():
            _thaws[0] += 1
            gc.unfreeze()
            gc.collect()  # its stop phase schedules the freeze of what survives
            return
        gc.freeze()

    def frozen_bound(self) -> int:
        """The frozen count the safety valve allows now: startup's, the live connections'
        (``FROZEN_PER_CONNECTION`` each) and ``FROZEN_SLACK``."""
        return _startup_frozen[0] + FROZEN_PER_CONNECTION * self._connections() + FROZEN_SLACK

    def install(
        self, loop: asyncio.AbstractEventLoop | None = None, connections: Callable[[], int] | None = None
    ) -> None:
        """Start observing (idempotent). With ``loop``, the survivors of every full collection
        are frozen on it (``connections``: the live connections, for the safety valve)."""
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True
        self._loop = loop
        if connections is not None:
            self._connections = connections

    def close(self) -> None:
        """Stop observing (idempotent); no freeze is scheduled any more."""
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False
        self._loop = None


class _Frozen(Collector):
    """``taskcast_gateway_gc_frozen_objects``: objects out of every scan (:func:`freeze_startup`
    and the refreezing); ``taskcast_gateway_gc_thaws_total``: the safety valve's thaws."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "taskcast_gateway_gc_frozen_objects",
            "Objects frozen (at startup and after each full collection): never scanned by a collection.",
            value=gc.get_freeze_count(),
        )
        yield CounterMetricFamily(
            "taskcast_gateway_gc_thaws",
            "Times the frozen objects passed what startup and the live connections explain: "
            "unfrozen and collected once.",
            value=_thaws[0],
        )


# The collector is process-wide; several runtimes in one process share the freeze: the first to
# start freezes, the last to stop thaws.
_holders = 0
_startup_frozen = [0]
"""Objects the first holder froze at startup (the safety valve's base)."""
_thaws = [0]
"""The safety valve's thaws in this process."""


def freeze_startup() -> int:
    """Collect once, then freeze every survivor (the first call of the process; later calls only
    count a holder). Returns the number of frozen objects."""
    global _holders
    if _holders == 0:
        gc.collect()
        gc.freeze()
        _startup_frozen[0] = gc.get_freeze_count()
    _holders += 1
    return gc.get_freeze_count()


def thaw() -> None:
    """One holder fewer; the last gives every frozen object back to the collector."""
    global _holders
    if _holders > 0:
        _holders -= 1
        if _holders == 0:
            gc.unfreeze()
