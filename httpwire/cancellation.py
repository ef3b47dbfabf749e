"""The rule every background loop of every service follows: a cancelled loop stops.

A loop that catches a failure and goes on (logs, backs off, retries) can receive its own
cancellation disguised as that failure: a client library that catches ``CancelledError`` and
raises its own error, a task group whose child failed while it was being cancelled, a timeout
expiring together with the cancel. ``raise_if_cancelling`` is the check such a loop makes first
in its failure boundary (and wherever it suppresses errors): ``Task.cancelling()`` still counts
the request even when the ``CancelledError`` itself was swallowed.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelling(cause: BaseException | None = None) -> None:
    """Raise ``CancelledError`` (chained to ``cause``) when the current task is being cancelled;
    do nothing outside a task or in a task nobody asked to stop.

    Raises:
        asyncio.CancelledError: the running task was asked to stop.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from cause
