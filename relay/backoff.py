"""When the relay waits: backoff with full jitter, and the staggered poll schedule (pure: no clock
read, no I/O; times and the random source are passed in).

``delay = uniform(0, min(cap, base * 2 ** (attempt - 1)))`` — the "full jitter" variant, which
spreads retries of many rows (and many replicas) evenly instead of in synchronised waves. Used for
a row's next ``available_at`` after a row-specific transient failure, for the pause between
gateway probes and for a loop's pause after a database error. :func:`staggered_delay` places the
idle polls of ``concurrency`` loops evenly over one poll interval.
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


def staggered_delay(now: float, origin: float, interval: float, slot: int, slots: int) -> float:
    """Seconds from ``now`` to the next wake-up of loop ``slot`` (0-based) of ``slots``.

    Loop ``slot`` wakes at ``origin + k * interval + slot * interval / slots`` (k an integer), the
    first such instant strictly after ``now``. Whatever each loop did in between (a full batch, a
    slow claim), idle loops stay spread evenly over the interval instead of drifting into lockstep,
    so an idle row waits at most ``interval / slots`` for some loop. ``origin`` carries a random
    phase per process, so replicas are spread too. Result in ``(0, interval]``.
    """
    offset = origin + slot * interval / slots
    elapsed = now - offset
    k = elapsed // interval + 1
    return max(offset + k * interval - now, 0.0) or interval
