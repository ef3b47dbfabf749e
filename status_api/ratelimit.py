"""Per-producer token buckets for the internal endpoints (seed §17 security: "限流").

In-process by design: each replica limits its own share; correctness never depends on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RateLimiter:
    """``allow(key)`` takes one token from ``key``'s bucket (``rate`` per second, up to ``burst``)."""

    def __init__(
        self,
        rate_per_second: float,
        burst: float,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        self.rate = rate_per_second
        self.burst = burst
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, key: str) -> bool:
        if self.rate <= 0:
            return True
        now = self.clock()
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if len(self._buckets) >= self.max_keys and key not in self._buckets:
            self._buckets.clear()  # bounded memory; a reset only ever grants, never denies
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        return True
