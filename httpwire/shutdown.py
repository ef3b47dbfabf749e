"""A service's stop bounded by its shutdown timeout: its background loops and its close steps.

Graceful shutdown starts when the server stops listening (``StopBudget.begin``, called by the
server's shutdown hook): the server waits for its in-flight requests and connections, then the
lifespan stops the background loops (``Loops.stop``) and runs the close steps
(``StopBudget.step``) in order. Every wait of the lifespan is bounded by what remains of the
timeout — at least ``LIFESPAN_FLOOR_SECONDS`` for the lifespan as a whole (the connections may
have taken all of it) and ``STEP_FLOOR_SECONDS`` for each step — so the process exits within its
timeout plus about a second whatever its dependencies do. A loop that does not end when
cancelled, or a step still running when its bound is up (a command waiting on a stalled Redis or
database, a cancellation swallowed by a client library), is abandoned: never awaited again.
``StopBudget.report`` logs them all in one warning line; nothing is logged when all finished.

Used by the gateway (``shutdown.timeout``) and the Status API (``http.shutdown_timeout_seconds``);
their composition roots name what they stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

LIFESPAN_FLOOR_SECONDS = 0.5
"""The least the lifespan's stop gets when the connections took all of ``shutdown.timeout``."""

STEP_FLOOR_SECONDS = 0.1
"""The least each close step gets once the budget is spent (closing sockets is local work)."""


class StopBudget:
    """What remains of a shutdown timeout and what the stop abandoned.

    Args:
        seconds: The timeout.
        option: Its option name, for the log line ("shutdown.timeout").
        logger: Where the abandoned steps and failed steps are logged.
        clock: Monotonic seconds (the event loop's clock by default).
    """

    def __init__(
        self,
        seconds: float,
        *,
        option: str,
        logger: logging.Logger,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.seconds = seconds
        self.option = option
        self.log = logger
        self._clock = clock
        self._deadline: float | None = None
        self.abandoned: list[str] = []
        """What did not finish within its bound, in the order it was given up."""

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def begin(self) -> None:
        """Graceful shutdown began: the budget runs from now (idempotent: the first call counts)."""
        if self._deadline is None:
            self._deadline = self._now() + self.seconds

    def begin_lifespan(self) -> None:
        """The lifespan's stop begins: start the budget if nothing did (a server without the
        shutdown hook, a test), and leave the lifespan at least ``LIFESPAN_FLOOR_SECONDS``."""
        self.begin()
        assert self._deadline is not None
        self._deadline = max(self._deadline, self._now() + LIFESPAN_FLOOR_SECONDS)

    def remaining(self, floor: float = 0.0) -> float:
        """Seconds left of the budget, at least ``floor`` (the whole timeout before ``begin``)."""
        if self._deadline is None:
            return max(self.seconds, floor)
        return max(self._deadline - self._now(), floor)

    async def step(self, what: str, coro: Coroutine[Any, Any, Any]) -> bool:
        """Run one close step within what remains (at least ``STEP_FLOOR_SECONDS``); whether it
        finished. A step still running when its bound is up is cancelled, not awaited, and
        recorded as abandoned; a step that fails is logged (it must not stop the next ones).
        ``what`` names it in the log ("closing the broker")."""
        task = asyncio.get_running_loop().create_task(coro, name=f"shutdown: {what}")
        try:
            done, _ = await asyncio.wait({task}, timeout=self.remaining(STEP_FLOOR_SECONDS))
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
        return self._settled(what, task)

    async def wait(self, what: str, task: asyncio.Task[Any]) -> bool:
        """Wait for ``task`` (told to stop some other way: an event) within what remains; then
        cancel it and give it ``STEP_FLOOR_SECONDS`` more; still running: abandoned as ``what``.
        Whether it ended."""
        await asyncio.wait({task}, timeout=self.remaining())
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STEP_FLOOR_SECONDS)
        return self._settled(what, task)

    def _settled(self, what: str, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` ended: still running, it is abandoned as ``what`` (its outcome is
        retrieved whenever it comes); ended with an error, the error is logged."""
        if not task.done():
            task.add_done_callback(_retrieve)
            self.abandoned.append(what)
            return False
        if not task.cancelled() and task.exception() is not None:
            self.log.warning("shutdown: %s failed: %s", what, _describe(task.exception()))
        return True

    async def cancel(self, what: str, task: asyncio.Task[Any]) -> bool:
        """Cancel ``task`` and wait for it within what remains (at least ``STEP_FLOOR_SECONDS``);
        still running then: abandoned as ``what``. Whether it ended."""
        task.cancel()
        await asyncio.wait({task}, timeout=self.remaining(STEP_FLOOR_SECONDS))
        if not task.done():
            task.add_done_callback(_retrieve)
            self.abandoned.append(what)
            return False
        return True

    def report(self) -> None:
        """One warning line naming everything abandoned (none: nothing logged)."""
        if self.abandoned:
            self.log.warning(
                "shutdown: %s (%gs) exceeded; abandoned: %s",
                self.option,
                self.seconds,
                "; ".join(self.abandoned),
            )


class Loops:
    """A service's background loops, each a named task of one ``TaskGroup`` run by a task of
    its own, so that stopping them can be bounded: a loop that fails takes the others down
    with it (logged once to ``logger``), as a ``TaskGroup`` does, and ``stop`` cancels them all
    and waits at most for what remains of the budget."""

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._pending: list[tuple[str, Coroutine[Any, Any, Any]]] = []
        self._group: asyncio.Task[None] | None = None
        self._stopping = False

    def add(self, name: str, coro: Coroutine[Any, Any, Any]) -> None:
        """A loop to run (``name`` is how a log line calls it); call before ``start``."""
        self._pending.append((name, coro))

    async def start(self) -> None:
        """Start every added loop (returns once they all run)."""
        started = asyncio.Event()
        self._group = asyncio.get_running_loop().create_task(self._run(started), name="background loops")
        self._group.add_done_callback(self._ended)
        await started.wait()

    async def _run(self, started: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            for name, coro in self._pending:
                self._tasks[name] = group.create_task(coro, name=name)
            self._pending.clear()
            started.set()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not self._stopping:
            self.log.error("background loops stopped: a loop failed", exc_info=exc)

    async def stop(self, budget: StopBudget) -> None:
        """Cancel every loop and wait for them within ``budget``; the ones still running then
        are recorded as abandoned (named) and never awaited again."""
        self._stopping = True
        group = self._group
        if group is None or group.done():
            return
        group.cancel()
        await asyncio.wait({group}, timeout=budget.remaining())
        if not group.done():
            stuck = [name for name, task in self._tasks.items() if not task.done()]
            budget.abandoned.append(f"background loops not ending when cancelled: {', '.join(stuck)}")
            group.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark an abandoned task's outcome as seen (no "exception was never retrieved" later)."""
    if not task.cancelled():
        task.exception()


def _describe(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}"


__all__ = ["LIFESPAN_FLOOR_SECONDS", "STEP_FLOOR_SECONDS", "Loops", "StopBudget"]
