"""``FailureRun``: one engine component's failures, logged once per state change, not per failure.

A Redis outage fails every publish, history read, presence update and probe; logging each one
(with a traceback) buried the logs (~3,300 tracebacks in 3 s while the relay retried). A
``FailureRun`` turns the stream of outcomes of one component (a shard's commands, a PUB/SUB
connection, message decoding) into state changes: the first failure after a success is logged
with its cause, further failures are only counted (and summed up in a reminder at most every
``remind_every_seconds``), and the first success after failures is logged once with the count
and the duration. Metrics still count every failure (the callers' ``on_error`` hooks).
Pure: no I/O but the logger; the clock is injected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class FailureRun:
    """Up/down state of one component, for logs.

    Args:
        subject: Names the component in every message (e.g. ``redis redis://h:6379/0``).
        logger: Where the state changes go.
        level: Level of "failing" and of the reminders (recovery is logged at INFO).
        now: Monotonic clock, seconds.
        remind_every_seconds: Least time between two reminders while still failing.
    """

    def __init__(
        self,
        subject: str,
        logger: logging.Logger,
        *,
        level: int = logging.ERROR,
        now: Callable[[], float] = time.monotonic,
        remind_every_seconds: float = 60.0,
    ) -> None:
        self.subject = subject
        self._logger = logger
        self._level = level
        self._now = now
        self._remind_every = remind_every_seconds
        self.failing = False
        self.failures = 0
        """Failures in the current run (0 while not failing)."""
        self._since = 0.0
        self._reminded_at = 0.0
        self._reminded_count = 0

    def failed(self, cause: str, exc: BaseException | None = None) -> None:
        """Count one failure. Logs only when this starts a run (with ``exc``'s traceback, if
        given: for failures that are bugs, one traceback is worth having) or when a reminder is
        due."""
        now = self._now()
        self.failures += 1
        if not self.failing:
            self.failing = True
            self._since = self._reminded_at = now
            self._reminded_count = 1
            self._logger.log(
                self._level,
                "%s: failing: %s (further failures are counted, not logged, until it recovers)",
                self.subject,
                cause,
                exc_info=exc,
            )
        elif now - self._reminded_at >= self._remind_every:
            self._logger.log(
                self._level,
                "%s: still failing: %d failures in %.0f s (%d since the last report), last: %s",
                self.subject,
                self.failures,
                now - self._since,
                self.failures - self._reminded_count,
                cause,
            )
            self._reminded_at = now
            self._reminded_count = self.failures

    def succeeded(self) -> None:
        """Record a success: ends a run of failures (logged once, at INFO)."""
        if self.failing:
            self._logger.info(
                "%s: recovered after %d failures in %.1f s",
                self.subject,
                self.failures,
                self._now() - self._since,
            )
            self.failing = False
            self.failures = 0
