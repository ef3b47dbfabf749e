"""The rule every background loop of every service follows: a cancelled loop stops.

A loop that catches a failure and goes on (logs, backs off, retries) can receive its own
cancellation disguised as that failure: a client library that catches ``CancelledError`` and
raises its own error, a task group whose child failed while it was being cancelled, a timeout
expiring together with the cancel. ``raise_if_cancelling`` is the check such a loop makes first
in its failure boundary (and wherever it suppresses errors): ``Task.cancelling()`` still counts
the request even when the ``CancelledError`` itself was swallowed.

A step that must not outlive its caller's cancellation (a command of a connection that closed
meanwhile, which would go on to register the connection where nothing releases it any more)
brackets a dependency's call with ``cancel_requests`` and ``raise_if_cancelled_since``: the
dependency may swallow a cancel that arrives as its own operation finishes (Python 3.11's
``asyncio.wait_for`` returns the inner result then, and redis-py awaits through it), and the
caller still stops. The count before the call is what tells a cancel during the call from one
the task is already handling (cleanup that runs in a cancelled task keeps working).
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


def cancel_requests() -> int:
    """How many times the current task has been asked to stop so far (0 outside a task)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def raise_if_cancelled_since(before: int, cause: BaseException | None = None) -> None:
    """Raise ``CancelledError`` (chained to ``cause``) when the current task was asked to stop
    after ``before`` (a ``cancel_requests`` value) was read, whatever the code in between did
    with the ``CancelledError``.

    Raises:
        asyncio.CancelledError: the running task was asked to stop since ``before``.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > before:
        raise asyncio.CancelledError from cause
