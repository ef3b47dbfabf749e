"""Group commit: concurrent callers submit items; a few runner tasks take them off a queue in
batches and hand each batch to one ``run`` call (one database transaction), then answer every
caller with its own result or exception.

A lone item starts a runner at once, so a lone request pays nothing. Batches are sized by load:
while ``k`` runners are busy, another one starts only once at least ``k * spawn_queue`` items
wait; below that the queued items form the next batch of a busy runner (they wait at most for the
transaction in flight). More transactions in flight at a moderate rate would only split the same
events into smaller batches, each paying a transaction's fixed cost (statements, round trips,
commit) for fewer events: CPU per event follows the batch size. The default ``spawn_queue`` of 16
is measured: against 8, batches of ~13 instead of ~10 and ~10 % less CPU per event with 32
requests in flight (docs/PERFORMANCE.md "Capacity"); the price is at most one transaction's wait
for the items queued behind a busy runner.

**Commit delay** (``delay`` seconds, 0 = off; PostgreSQL's ``commit_delay`` in spirit): at a
moderate rate no runner is busy when the next item arrives, so each item would start a
transaction of its own. A runner about to take a batch therefore waits until ``want`` items are
queued, or until ``delay`` after the oldest queued item arrived (an item waits at most ``delay``
for its batch to start, plus a transaction in flight). ``want`` is 1 + the items expected within
``delay`` at the measured arrival rate (an exponentially weighted mean of the gaps between
submits), at most ``min(max_batch, spawn_queue)`` and at most 1 + the callers seen waiting
together (the number of items outstanding, submitted and not answered, that an arrival finds: a
peak decaying by 1/8 per submit). So it never waits for items no caller can send: a sequential
caller (its next item comes only after its answer) finds nothing outstanding and is never held,
however fast it goes; two such callers wait for each other at most. No wait when ``want`` is 1
(a lone request on an idle service, arrivals further apart than ``delay``) nor when ``want`` items
already wait (a loaded service). One runner waits at a time; no other runner starts for the items
it waits for.

Runner tasks are owned here (kept in a set) and end when the queue is empty. A caller cancelled
while its item waits is skipped; one cancelled while its batch runs does not cancel the batch (its
item may still commit, as with a client lost after commit).
Must not import sqlalchemy or starlette: ``run`` carries all the storage knowledge.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger("status_api.group_commit")
T = TypeVar("T")
R = TypeVar("R")

#: ``run(items) -> one result or exception per item``, in the order of ``items``.
BatchRunner = Callable[[Sequence[T]], Awaitable[Sequence[R | Exception]]]
#: Weight of the newest gap in the mean gap between submits (the arrival-rate estimate).
GAP_WEIGHT = 1 / 8


class GroupCommit(Generic[T, R]):
    """Batches concurrent :meth:`submit` calls into ``run`` calls of at most ``max_batch`` items,
    with at most ``max_runners`` batches in flight; runner ``k+1`` starts only when ``k *
    spawn_queue`` items wait (``spawn_queue`` 1: a runner per waiting item up to ``max_runners``);
    a batch waits up to ``delay`` seconds for the items the arrival rate promises (module doc).
    ``observe(n)`` is called with each batch's size (must not raise); ``clock`` (seconds,
    monotonic) times the arrivals (default: the running loop's clock)."""

    def __init__(
        self,
        run: BatchRunner[T, R],
        *,
        max_batch: int,
        max_runners: int,
        spawn_queue: int = 16,
        delay: float = 0.0,
        observe: Callable[[int], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if max_batch < 1 or max_runners < 1 or spawn_queue < 1:
            raise ValueError("max_batch, max_runners and spawn_queue must be >= 1")
        if not delay >= 0 or math.isinf(delay):
            raise ValueError("delay must be >= 0 and finite")
        self._run = run
        self.max_batch = max_batch
        self.max_runners = max_runners
        self.spawn_queue = spawn_queue
        self.delay = delay
        self.observe = observe
        self._clock = clock
        #: Mean gap between submits (seconds; inf until two were seen) and the last submit's time.
        self.gap = math.inf
        self._last: float | None = None
        #: Items submitted and not answered; the decaying peak of it seen by arrivals.
        self._pending = 0
        self.concurrency = 0.0
        #: When the queue last went from empty to one item (the arrival clock).
        self._since = 0.0
        #: The waiting runner's (items wanted, future to wake it), while one waits.
        self._waiter: tuple[int, asyncio.Future[None]] | None = None
        self._queue: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._runners: set[asyncio.Task[None]] = set()
        self._active = 0
        #: Sizes of the batches run so far (bounded; for tests and the benchmark).
        self.batch_sizes: deque[int] = deque(maxlen=10_000)

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait for its result (raises the exception ``run`` gave for it)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, fut))
        if not self.delay:
            return await self._start(fut)
        now = self._clock() if self._clock else loop.time()
        self._arrived(now)
        if len(self._queue) == 1:
            self._since = now
        self.concurrency = max(float(self._pending), self.concurrency * (1 - GAP_WEIGHT))
        self._pending += 1
        try:
            waiter = self._waiter
            if waiter is None:
                return await self._start(fut)
            if len(self._queue) >= waiter[0] and not waiter[1].done():
                waiter[1].set_result(None)
            return await fut  # the waiting runner takes this item
        finally:
            self._pending -= 1

    async def _start(self, fut: asyncio.Future[R]) -> R:
        """Start a runner for the queue if the load calls for one; wait for ``fut``."""
        busy = self._active
        if busy < self.max_runners and len(self._queue) >= busy * self.spawn_queue:
            # Counted from creation to the moment its loop finds the queue empty (no await in
            # between), so an item queued after that check always finds a runner count of 0.
            self._active += 1
            task = asyncio.create_task(self._drain())
            self._runners.add(task)
            task.add_done_callback(self._runners.discard)
        return await fut

    def _arrived(self, now: float) -> None:
        last, self._last = self._last, now
        if last is None:
            return
        gap = max(0.0, now - last)
        self.gap = gap if math.isinf(self.gap) else self.gap + (gap - self.gap) * GAP_WEIGHT

    def wanted(self) -> int:
        """Items worth waiting for: 1 + those expected within ``delay`` at the measured rate, at
        most ``min(max_batch, spawn_queue)`` and 1 + the callers seen waiting together (rounded);
        1 (no wait) when the delay is off."""
        cap = min(self.max_batch, self.spawn_queue)
        if not self.delay or self.gap >= self.delay:
            return 1
        cap = min(cap, 1 + int(self.concurrency + 0.5))
        return cap if self.gap <= self.delay / cap else min(cap, 1 + int(self.delay / self.gap))

    async def _fill(self, want: int) -> None:
        """Wait until ``want`` items are queued or ``delay`` has passed since the oldest arrived."""
        loop = asyncio.get_running_loop()
        left = self._since + self.delay - (self._clock() if self._clock else loop.time())
        if left <= 0:
            return
        wake: asyncio.Future[None] = loop.create_future()
        self._waiter = (want, wake)
        timer = loop.call_later(left, _wake, wake)
        try:
            await wake
        finally:
            timer.cancel()
            self._waiter = None

    async def _drain(self) -> None:
        try:
            await self._drain_queue()
        finally:
            self._active -= 1

    async def _drain_queue(self) -> None:
        while self._queue:
            if self.delay and self._waiter is None:
                want = self.wanted()
                if len(self._queue) < want:
                    await self._fill(want)
            batch: list[tuple[T, asyncio.Future[R]]] = []
            while self._queue and len(batch) < self.max_batch:
                item, fut = self._queue.popleft()
                if not fut.done():
                    batch.append((item, fut))
            if not batch:
                continue
            self.batch_sizes.append(len(batch))
            if self.observe is not None:
                self.observe(len(batch))
            try:
                results = await self._run([item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"batch runner returned {len(results)} results for {len(batch)}")
            except asyncio.CancelledError:
                for _, fut in batch:
                    fut.cancel()
                raise
            except Exception as exc:  # a bug in run: fail this batch's callers, keep serving the queue
                log.exception("group commit batch of %d failed", len(batch))
                results = [exc] * len(batch)
            for (_, fut), result in zip(batch, results, strict=True):
                if fut.done():
                    continue
                if isinstance(result, Exception):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
