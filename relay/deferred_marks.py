"""The bound on the relay's deferred marks (``mark_defer_ms``, docs/relay.md "Deferred marks").

A batch whose rows were all published is not marked on its own: ``OutboxLeases.defer_published``
keeps the ids and the relay's next claim carries the mark. :class:`DeferredMarks` makes sure the
wait is bounded: one timer, armed for the oldest waiting row, marks what still waits after
``mark_defer_seconds`` without a claim to carry it (one UPDATE); a failed timer's mark is retried
after ``mark_defer_seconds``; the graceful stop marks whatever waits. Until marked, the rows stay
PROCESSING under the relay's lease: a crash republishes them (at-least-once). Rows another replica
took over meanwhile are counted by ``on_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from httpwire.cancellation import raise_if_cancelling
from relay.claim import OutboxLeases
from relay.config import RelayConfig
from relay.metrics import RelayMetrics

log = logging.getLogger("taskcast.relay")


class DeferredMarks:
    """The timer and the flushes of the rows ``leases`` holds published but unmarked."""

    def __init__(
        self, leases: OutboxLeases, config: RelayConfig, metrics: RelayMetrics, on_lost: Callable[[int], None]
    ) -> None:
        self.leases = leases
        self.config = config
        self.metrics = metrics
        self.on_lost = on_lost
        #: The timer that marks the waiting rows if no claim carried them within the bound, and
        #: the task of such a flush.
        self._timer: asyncio.TimerHandle | None = None
        self._flush: asyncio.Task[None] | None = None

    def later(self) -> None:
        """Rows were deferred: make sure they are marked within ``mark_defer_seconds`` even when
        no claim comes to carry them (one timer, armed for the oldest waiting row)."""
        self.leases.on_lost_marks = self.on_lost  # the claim that carries them counts them
        if self._timer is None and self._flush is None:
            self._arm()

    def _arm(self, at_least: float = 0.0) -> None:
        since = self.leases.unmarked_since
        if since is None:
            return
        delay = max(at_least, since + self.config.mark_defer_seconds - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._due)

    def _due(self) -> None:
        """The timer: mark what still waits, unless a claim carried it meanwhile (then re-arm for
        the rows deferred after that claim, if any)."""
        self._timer = None
        since = self.leases.unmarked_since
        if since is None:
            return
        if time.monotonic() < since + self.config.mark_defer_seconds:
            self._arm()
            return
        self._flush = asyncio.get_running_loop().create_task(self._flush_deferred())

    async def _flush_deferred(self) -> None:
        pause = 0.0
        try:
            await self.flush()
        except Exception as exc:
            raise_if_cancelling(exc)
            log.warning("deferred mark failed; the next claim or timer retries it", exc_info=True)
            self.metrics.loop_errors.inc()
            pause = self.config.mark_defer_seconds  # not a hot loop while the database is away
        finally:
            self._flush = None
            if self._timer is None:
                self._arm(pause)

    async def flush(self) -> int:
        """Mark every deferred row now (the timer, the graceful stop); returns how many."""
        started = time.perf_counter()
        n = await self.leases.flush_marks()
        self.metrics.mark_seconds.observe(time.perf_counter() - started)
        return n

    async def flush_on_stop(self) -> None:
        """The graceful stop marks the deferred rows (published, still leased) so that no replica
        publishes them again after the lease; a failure leaves exactly that (at-least-once)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flush is not None:
            with contextlib.suppress(Exception):
                await self._flush
        try:
            await self.flush()
        except Exception as exc:
            raise_if_cancelling(exc)
            log.warning(
                "could not mark %d published rows at stop; they will be republished", self.leases.unmarked
            )
