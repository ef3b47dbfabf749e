"""``Cleanup``: the steps of a release or a close, each run whatever the others did.

A connection's close releases every subscription (hub entry, broker subscription, presence,
map presence, leave message), and a subscribe or connect that fails undoes what it had
established. A loop that awaits those steps one after the other stops at the first failure:
with Redis down, the first presence removal failing would skip the hub removal and the broker
unsubscribe of every other channel, leaking hub entries, presence and broker subscriptions. Each step run
through a ``Cleanup`` ends in a success or a logged failure, never in an exception (a
cancellation still propagates), so the next step always runs.

Failures are logged at most once per step per interval (``gateway/log_limit.py``): an outage
fails the same step for every connection at once. An expected failure (the owner's
``expected`` types: the node's are ``EngineError``, timeouts and ``OSError``) is one line
without a traceback, the engine having said why once already (gateway/engine/failures.py);
anything else is a bug and carries its traceback.

Imports only the log limiter: no engine, node or connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.log_limit import DEFAULT_INTERVAL_SECONDS, LogLimiter

EXPECTED: tuple[type[Exception], ...] = (TimeoutError, OSError)
"""Failures any cleanup step meets while a dependency is down: logged without a traceback."""

__all__ = ["EXPECTED", "Cleanup"]


class Cleanup:
    """Runs cleanup steps so that a failing one never skips the next.

    Args:
        logger: Where failures go.
        expected: Failures logged without a traceback (a dependency is down, not a bug).
        interval: Seconds between two lines about one step (``what``).
        clock: Monotonic seconds (injected in tests).
    """

    __slots__ = ("_expected", "_limiter", "failures")

    def __init__(
        self,
        logger: logging.Logger,
        *,
        expected: tuple[type[Exception], ...] = EXPECTED,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._expected = expected
        self._limiter = LogLimiter(logger, interval, clock)
        self.failures = 0
        """Steps that failed so far (logged or held back)."""

    async def step(self, what: str, awaitable: Awaitable[object]) -> bool:
        """Await ``awaitable``; whether it succeeded. A failure is logged (rate-limited per
        ``what``, which names the step without naming a channel or a client: "presence
        removal") and not raised.

        Raises:
            asyncio.CancelledError: the caller is cancelled (never swallowed).
        """
        try:
            await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed(what, exc)
            return False
        return True

    def call(self, what: str, action: Callable[[], object]) -> bool:
        """``step`` for a synchronous action."""
        try:
            action()
        except Exception as exc:
            self.failed(what, exc)
            return False
        return True

    def failed(self, what: str, exc: Exception) -> None:
        """Count and log one failed step (what ``step`` does with a failure)."""
        self.failures += 1
        if isinstance(exc, self._expected):
            self._limiter.log(logging.WARNING, what, "cleanup: %s failed: %s", what, _describe(exc))
        else:
            self._limiter.log(logging.ERROR, what, "cleanup: %s failed", what, exc_info=exc)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
