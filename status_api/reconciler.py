"""Background maintenance of the Status API: the health reconciler (seed §4.3, §3.5) and the
scheduled event-log retention (``retention.event_log_days``).

Expired realtime sessions (one per ``GET /api/realtime/session``, i.e. per token refresh) are
deleted with their detail leases on the same schedule as the retention pass.

The health pass marks a running step STALE when its heartbeats stop and HEALTHY when they resume,
each as a STEP_HEALTH_CHANGED with a new version; STALE is never FAILED, and a terminal task is
never touched. The retention pass purges event-log entries older than the bound, at most once per
``retention.interval_seconds`` of the injected clock.

``run_once()`` / ``purge_once()`` are the testable units (tests advance an injected clock and call
them); ``run(stop)`` loops both for the server or the ``reconcile`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from httpwire.cancellation import raise_if_cancelling
from status_api.domain.model import Health
from status_api.service import StatusService
from status_api.storage import repository as repo

log = logging.getLogger("status_api.reconciler")


class HealthReconciler:
    def __init__(
        self,
        service: StatusService,
        heartbeat_timeout_seconds: float,
        batch_size: int = 200,
        interval_seconds: float = 10.0,
    ) -> None:
        self.service = service
        self.timeout = timedelta(seconds=heartbeat_timeout_seconds)
        self.batch_size = batch_size
        self.interval_seconds = interval_seconds
        self._next_purge: datetime | None = None
        self._next_session_purge: datetime | None = None

    async def run_once(self) -> int:
        """One health pass; returns how many STEP_HEALTH_CHANGED versions it committed."""
        cutoff = self.service.clock() - self.timeout
        async with self.service.engine.connect() as conn:
            candidates = await repo.health_candidates(conn, cutoff, self.batch_size)
        changed = 0
        for task_id, step_id, attempt, wanted in candidates:
            # Each change is its own transaction with the task row locked; the condition is re-checked there.
            if await self.service.apply_health(task_id, step_id, attempt, Health(wanted), cutoff):
                changed += 1
        return changed

    async def purge_once(self) -> int:
        """The retention pass when it is due (and retention is on); returns the entries purged."""
        s = self.service.settings
        now = self.service.clock()
        if s.event_log_retention_seconds is None or (self._next_purge is not None and now < self._next_purge):
            return 0
        self._next_purge = now + timedelta(seconds=s.retention_interval_seconds)
        return await self.service.purge_event_log()

    async def purge_sessions_once(self) -> int:
        """Delete expired realtime sessions (and their leases), at most once per
        ``retention.interval_seconds`` whatever ``event_log_days`` says; returns the count."""
        now = self.service.clock()
        if self._next_session_purge is not None and now < self._next_session_purge:
            return 0
        self._next_session_purge = now + timedelta(seconds=self.service.settings.retention_interval_seconds)
        return await self.service.purge_realtime_sessions(now)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                n = await self.run_once()
                if n:
                    log.info("health reconciler committed %d changes", n)
                purged = await self.purge_once()
                if purged:
                    log.info("event-log retention purged %d entries", purged)
                sessions = await self.purge_sessions_once()
                if sessions:
                    log.info("purged %d expired realtime sessions", sessions)
            except Exception as exc:  # a task boundary: log and keep the loop alive
                raise_if_cancelling(exc)
                log.exception("health reconciler pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_seconds)
