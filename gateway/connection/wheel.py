"""The deadlines of one node's connections on one timing wheel: a connection's next deadline (its
session's ``next_deadline()``: ping, pong check, stale connect, expiry) is an entry in a slot of
``resolution`` seconds, and ONE loop timer is armed for the earliest slot that holds entries.

Contract:

* an entry is visited (``Timed.on_wheel()``) at or after its deadline by the wheel's clock, at
  most about ``resolution`` seconds after it, never before it;
* scheduling again moves the entry (at most one entry per connection); ``cancel`` removes it in
  O(1), so the wheel keeps no closed connection alive; an entry cancelled after it fell due in
  a visit still under way may be visited once more (``on_wheel`` of a closed connection does
  nothing);
* due entries are visited ``chunk`` per loop callback, with a turn of the loop between chunks, so
  100,000 connections pinged in the same slot never hold the loop for all of them at once.

Compared with one loop timer per connection this costs no timer handle per deadline, no cancel
per re-arm, and no heap operation per connection: connections due in the same slot share one.
Pure bookkeeping plus the loop timer; imports nothing of the connection.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

RESOLUTION = 0.05
"""Seconds per slot: how late past its deadline an entry may be visited (pings every
``client.ping_interval`` ≥ 1 s, pong timeouts of seconds)."""
CHUNK = 512
"""Entries visited per loop callback."""


class Timed(Protocol):
    """What the wheel holds: a connection with a deadline."""

    def on_wheel(self) -> None:
        """The deadline is due (the entry is already off the wheel: re-schedule from here)."""
        ...


class Wheel:
    """One node's deadline wheel (see the module docstring). ``clock`` is the clock deadlines are
    given in (unix seconds by default, as the sessions' ``now``)."""

    __slots__ = (
        "_buckets",
        "_chunk",
        "_clock",
        "_due",
        "_heap",
        "_resolution",
        "_running",
        "_slots",
        "_timer",
    )

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        resolution: float = RESOLUTION,
        chunk: int = CHUNK,
    ) -> None:
        self._clock = clock
        self._resolution = resolution
        self._chunk = max(1, chunk)
        self._buckets: dict[int, dict[Timed, None]] = {}
        """slot → its entries, in the order they were scheduled."""
        self._heap: list[int] = []
        """The slots of ``_buckets`` (each once)."""
        self._slots: dict[Timed, int] = {}
        """entry → its slot."""
        self._due: deque[Timed] = deque()
        """Entries taken off the wheel and not yet visited."""
        self._timer: asyncio.TimerHandle | None = None
        self._running = False

    def entries(self) -> int:
        """Entries on the wheel (scheduled or due, not yet visited). (Not ``__len__``: a wheel
        is truthy even when empty.)"""
        return len(self._slots) + len(self._due)

    def schedule(self, item: Timed, at: float | None) -> None:
        """Visit ``item`` once ``at`` (the wheel's clock) has passed; None: no deadline."""
        if at is None:
            self.cancel(item)
            return
        slot = math.ceil(at / self._resolution)
        slots = self._slots
        old = slots.get(item)
        if old == slot:
            return
        if old is not None:
            self._buckets[old].pop(item, None)
        slots[item] = slot
        bucket = self._buckets.get(slot)
        if bucket is not None:
            bucket[item] = None
            return
        self._buckets[slot] = {item: None}
        heap = self._heap
        heapq.heappush(heap, slot)
        if not self._running and heap[0] == slot:
            self._arm()

    def cancel(self, item: Timed) -> None:
        """Take ``item`` off the wheel (idempotent)."""
        slot = self._slots.pop(item, None)
        if slot is not None:
            self._buckets[slot].pop(item, None)

    def close(self) -> None:
        """Stop the timer and forget every entry."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buckets.clear()
        self._heap.clear()
        self._slots.clear()
        self._due.clear()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        heap = self._heap
        if not heap:
            return
        delay = heap[0] * self._resolution - self._clock()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, delay), self._fire)

    def _fire(self) -> None:
        self._timer = None
        now_slot = math.floor(self._clock() / self._resolution)
        heap, buckets, slots, due = self._heap, self._buckets, self._slots, self._due
        while heap and heap[0] <= now_slot:
            for item in buckets.pop(heapq.heappop(heap)):
                del slots[item]
                due.append(item)
        self._running = True
        self._visit()

    def _visit(self) -> None:
        due = self._due
        try:
            for _ in range(min(self._chunk, len(due))):
                due.popleft().on_wheel()
        finally:
            if due:
                asyncio.get_running_loop().call_soon(self._visit)
            else:
                self._running = False
                self._arm()
