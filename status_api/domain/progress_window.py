"""The server-side progress window (seed §3.5 "throttled, overwritable", §9.1 "no push every
second"): when a STEP_PROGRESS version's outbox rows become due for the relays. Pure: no clock,
no I/O.

A task publishes at most one progress version per window. The first progress after a quiet window
is due at once (the leading edge); one committed while the window is open is due when it closes
(the trailing edge), and a later progress within the same window takes over that due time while
the earlier one's rows still wait (the writer's coalescing deletes them): the **last** progress of
a window is always published, at the window's end. Every due time lies within one window of the
commit (``now ≤ due ≤ now + window``), so an acknowledged progress waits at most one window (plus
the relay's wake-up) for its publication. Versions that are not progress are never delayed.

Only the due time of the previous progress is known here, not whether a relay took it: a progress
whose predecessor was due but not yet claimed (relays behind) replaces it and waits for the next
window's start, still within one window of its own commit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from status_api.domain.registry import OperationDefinitionSet

#: The server's default window (seed §9.1: a running task does not need a push every second).
DEFAULT_MIN_INTERVAL_MS = 1000


def window_ms(operations: OperationDefinitionSet, default_ms: int) -> int:
    """The window of a task: its type's ``progressMinIntervalMs``, else the server's ``default_ms``."""
    own = operations.progress_min_interval_ms
    return default_ms if own is None else own


def progress_due(previous_due: datetime | None, now: datetime, window: timedelta) -> datetime:
    """When a progress version committed at ``now`` is due, given the due time of the task's
    previous progress version (``previous_due``, None for its first progress).

    * no previous progress, or no window: ``now``;
    * the previous one is still waiting (due after ``now``): the same due time — the window's end;
    * the previous one was due at or before ``now``: one window after it, or ``now`` if that has passed.

    The result is clamped to ``[now, now + window]``: a previous due time further ahead (a clock
    step, a changed window) never delays a progress by more than one window.
    """
    if previous_due is None or window <= timedelta(0):
        return now
    due = previous_due if previous_due > now else previous_due + window
    return min(max(due, now), now + window)


def delays_progress(progress_due_at: datetime | None, now: datetime) -> bool:
    """True while a task's latest progress is still held back by its window at ``now``: a new
    version of another kind must then replace those rows (they must not be published after it)."""
    return progress_due_at is not None and progress_due_at > now
