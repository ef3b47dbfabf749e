"""When the relay waits after a failure: backoff with full jitter (pure: no clock read, no I/O;
the random source is passed in).

``delay = uniform(0, min(cap, base * 2 ** (attempt - 1)))`` — the "full jitter" variant, which
spreads retries of many rows (and many replicas) evenly instead of in synchronised waves. Used for
a row's next ``available_at`` after a row-specific transient failure, for the pause between
gateway probes and for a loop's pause after a database error.
"""

from __future__ import annotations

import random
from collections.abc import Callable

#: Exponent guard: 2**62 seconds is already far beyond any cap.
_MAX_EXPONENT = 62


def ceiling(attempt: int, base_seconds: float, max_seconds: float) -> float:
    """The upper bound of the jittered delay for ``attempt`` (1-based; values < 1 count as 1)."""
    exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
    return float(min(max_seconds, base_seconds * (2**exponent)))


def full_jitter(
    attempt: int,
    base_seconds: float,
    max_seconds: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """A delay in ``[0, ceiling(attempt, base, max)]``; ``rand()`` returns a float in ``[0, 1)``."""
    return ceiling(attempt, base_seconds, max_seconds) * rand()
