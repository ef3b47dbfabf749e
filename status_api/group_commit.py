"""Group commit: concurrent callers submit items; a few runner tasks take them off a queue in
batches and hand each batch to one ``run`` call (one database transaction), then answer every
caller with its own result or exception.

No batch waits for a timer: a lone item starts a runner at once, so a lone request pays nothing.
Batches are sized by load: while ``k`` runners are busy, another one starts only once at least
``k * spawn_queue`` items wait; below that the queued items form the next batch of a busy runner
(they wait at most for the transaction in flight). More transactions in flight at a moderate rate
would only split the same events into smaller batches, each paying a transaction's fixed cost
(statements, round trips, commit) for fewer events: CPU per event follows the batch size. The
default ``spawn_queue`` of 16 is measured: against 8, batches of ~13 instead of ~10 and ~10 % less
CPU per event with 32 requests in flight (docs/PERFORMANCE.md "Capacity"); the price is at most one
transaction's wait for the items queued behind a busy runner.
Runner tasks are owned here (kept in a set) and end when the
queue is empty. A caller cancelled while its item waits is skipped; one cancelled while its batch
runs does not cancel the batch (its item may still commit, as with a client lost after commit).
Must not import sqlalchemy or starlette: ``run`` carries all the storage knowledge.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger("status_api.group_commit")
T = TypeVar("T")
R = TypeVar("R")

#: ``run(items) -> one result or exception per item``, in the order of ``items``.
BatchRunner = Callable[[Sequence[T]], Awaitable[Sequence[R | Exception]]]


class GroupCommit(Generic[T, R]):
    """Batches concurrent :meth:`submit` calls into ``run`` calls of at most ``max_batch`` items,
    with at most ``max_runners`` batches in flight; runner ``k+1`` starts only when ``k *
    spawn_queue`` items wait (``spawn_queue`` 1: a runner per waiting item up to ``max_runners``)."""

    def __init__(
        self, run: BatchRunner[T, R], *, max_batch: int, max_runners: int, spawn_queue: int = 16
    ) -> None:
        if max_batch < 1 or max_runners < 1 or spawn_queue < 1:
            raise ValueError("max_batch, max_runners and spawn_queue must be >= 1")
        self._run = run
        self.max_batch = max_batch
        self.max_runners = max_runners
        self.spawn_queue = spawn_queue
        self._queue: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._runners: set[asyncio.Task[None]] = set()
        self._active = 0
        #: Sizes of the batches run so far (bounded; for tests and the benchmark).
        self.batch_sizes: deque[int] = deque(maxlen=10_000)

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait for its result (raises the exception ``run`` gave for it)."""
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        busy = self._active
        if busy < self.max_runners and len(self._queue) >= busy * self.spawn_queue:
            # Counted from creation to the moment its loop finds the queue empty (no await in
            # between), so an item queued after that check always finds a runner count of 0.
            self._active += 1
            task = asyncio.create_task(self._drain())
            self._runners.add(task)
            task.add_done_callback(self._runners.discard)
        return await fut

    async def _drain(self) -> None:
        try:
            await self._drain_queue()
        finally:
            self._active -= 1

    async def _drain_queue(self) -> None:
        while self._queue:
            batch: list[tuple[T, asyncio.Future[R]]] = []
            while self._queue and len(batch) < self.max_batch:
                item, fut = self._queue.popleft()
                if not fut.done():
                    batch.append((item, fut))
            if not batch:
                continue
            self.batch_sizes.append(len(batch))
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
