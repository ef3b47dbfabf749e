"""The ONE way a test waits: poll a condition until it holds, within a bound scaled by ONE factor.

``TASKCAST_TEST_TIME_SCALE`` (default 1) multiplies every bound, like websockets' ``MS`` factor:
on a slow or loaded machine run ``TASKCAST_TEST_TIME_SCALE=3 pytest ...`` instead of editing
timeouts. Bounds are upper limits on how long a wait may take, never windows a test sleeps through.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

TIME_SCALE_ENV = "TASKCAST_TEST_TIME_SCALE"
POLL_SECONDS = 0.02
DEFAULT_WITHIN = 30.0  # generous: a bound is how long a failing test may hang, not how long it waits


def time_scale() -> float:
    """The factor from ``TASKCAST_TEST_TIME_SCALE`` (positive float; anything else is 1)."""
    try:
        value = float(os.environ.get(TIME_SCALE_ENV, "1"))
    except ValueError:
        return 1.0
    return value if value > 0 else 1.0


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's time factor: use it for every bound a test passes on."""
    return seconds * time_scale()


class WaitTimeout(AssertionError):
    """A condition did not hold within its (scaled) bound."""


def _timeout(what: str, within: float, last: Any) -> WaitTimeout:
    scale = time_scale()
    return WaitTimeout(f"timed out after {within:g}s (scale x{scale:g}) waiting for {what}; last: {last!r}")


async def wait_until(
    cond: Callable[[], Any],
    within: float = DEFAULT_WITHIN,
    what: str = "condition",
    every: float = POLL_SECONDS,
) -> Any:
    """Poll ``cond`` (sync, or returning an awaitable) every ``every`` s until its value is truthy and
    return that value; :class:`WaitTimeout` after ``scaled(within)`` seconds."""
    bound = scaled(within)
    deadline = time.monotonic() + bound
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timeout(what, bound, value)
        await asyncio.sleep(every)  # polling interval of a bounded wait, not a synchronisation sleep


def wait_until_blocking(
    cond: Callable[[], Any],
    within: float = DEFAULT_WITHIN,
    what: str = "condition",
    every: float = POLL_SECONDS,
) -> Any:
    """:func:`wait_until` for synchronous code (fixtures, threads): ``cond`` must be synchronous."""
    bound = scaled(within)
    deadline = time.monotonic() + bound
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timeout(what, bound, value)
        time.sleep(every)  # polling interval of a bounded wait, not a synchronisation sleep
