"""Rate-limited one-line logging for what unauthenticated or hostile input can trigger at will
(a malformed gRPC request, a header a gRPC proxy cannot carry, an exception on a client's
command): at most one line per key per interval, never a traceback, and the next line says how
many were held back. A flood of bad requests costs a few lines, not a disk."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_INTERVAL_SECONDS = 10.0
_MAX_KEYS = 1024


class LogLimiter:
    """One line per ``key`` per ``interval`` seconds on ``logger``.

    Args:
        logger: Where the lines go.
        interval: Seconds between two lines of one key.
        clock: Monotonic seconds (injected in tests).
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(
        self, level: int, key: str, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> bool:
        """Log ``msg % args`` unless ``key`` logged within the interval; True when it did.
        ``exc_info``: a failure whose traceback the line carries (for bugs, not for input)."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        if len(self._last) >= _MAX_KEYS and key not in self._last:
            self._last.clear()  # keys come from code, not input; this only bounds a mistake
            self._held.clear()
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            msg += f" ({held} more like this in the last {self.interval:g} s)"
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True


__all__ = ["DEFAULT_INTERVAL_SECONDS", "LogLimiter"]
