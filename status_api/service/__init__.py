"""Status API write use cases (seed §3, §4, §5): each is ONE database transaction with its task
rows locked — validate, decide (pure domain), and return a value describing the change (task +
step, event-log rows, outbox messages, idempotency row) that the one writer
(``storage.write.write``) saves; it answers only after commit, because a 2xx means durable.

Modules, over one explicit :class:`~status_api.service.context.ServiceContext`:

* ``context`` — engine, validators, tokens, clock, settings; definition cache, retries,
  ``transact`` (decide + write + commit) and ``version_change`` (a decision -> its Change);
* ``tasks`` — task creation and step attempts (the coordinator binding);
* ``ingest`` — ``POST /internal/v1/task-events`` with group commit (a batch = many changes, one write);
* ``admin`` — operator corrections, the reconciler's health changes, the registries;
* ``retention`` — event-log purge.

:class:`StatusService` is the facade the HTTP layer, queries, CLI and reconciler use. Must not
import starlette; the HTTP layer maps ``DomainError`` to statuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.domain.model import JSON, ExecutionGrant, Health, ServiceIdentity
from status_api.schemas import SchemaStore
from status_api.service import admin, broadcasts, retention, tasks
from status_api.service.admin import RECONCILER_PRODUCER
from status_api.service.context import ServiceContext, ServiceSettings, canonical_hash, parse_time
from status_api.service.ingest import EventIngestor, parse_event
from status_api.storage import sessions
from status_api.storage.database import Clock, utc_now
from status_api.tokens import TokenIssuer

__all__ = [
    "RECONCILER_PRODUCER",
    "Clock",
    "ServiceContext",
    "ServiceSettings",
    "StatusService",
    "canonical_hash",
    "parse_event",
    "parse_time",
    "utc_now",
]


class StatusService(ServiceContext):
    """The write side: the context plus one method per use case. ``clock`` is injected."""

    def __init__(
        self,
        engine: AsyncEngine,
        schemas: SchemaStore,
        tokens: TokenIssuer,
        clock: Clock = utc_now,
        settings: ServiceSettings | None = None,
    ) -> None:
        super().__init__(engine, schemas, tokens, clock, settings)
        self.ingestor = EventIngestor(self)

    async def create_task(
        self, body: Mapping[str, JSON], caller: ServiceIdentity, idempotency_key: str | None = None
    ) -> dict[str, JSON]:
        """``POST /internal/v1/tasks``; see :func:`tasks.create_task`."""
        return await tasks.create_task(self, body, caller, idempotency_key)

    async def create_step_attempt(
        self, task_id: str, step_id: str, caller: ServiceIdentity
    ) -> dict[str, JSON]:
        """``POST …/steps/{stepId}/attempts``; see :func:`tasks.create_step_attempt`."""
        return await tasks.create_step_attempt(self, task_id, step_id, caller)

    async def create_task_attempt(self, task_id: str, caller: ServiceIdentity) -> dict[str, JSON]:
        """``POST …/tasks/{taskId}/attempts``; see :func:`tasks.create_task_attempt`."""
        return await tasks.create_task_attempt(self, task_id, caller)

    async def renew_execution_token(self, token: str) -> dict[str, JSON]:
        """``POST /internal/v1/execution-tokens/renew``; see :func:`tasks.renew_execution_token`."""
        return await tasks.renew_execution_token(self, token)

    async def ingest_event(
        self,
        body: Mapping[str, JSON],
        caller: ExecutionGrant | ServiceIdentity,
        idempotency_key: str | None = None,
        token: str | None = None,
        traceparent: str | None = None,
    ) -> dict[str, JSON]:
        """``POST /internal/v1/task-events`` (seed §3.5); see :class:`ingest.EventIngestor`
        (``token``: the credential ``caller`` came from, for a heartbeat's renewal; ``traceparent``:
        the request's span when the Status API traces).

        Raises:
            DomainError: see ``ingest.authorize`` / ``check_registered`` / ``apply_*``; CONFLICT
                ``EVENT_ID_CONFLICT`` for a reused eventId with different content.
        """
        return await self.ingestor.ingest_event(body, caller, idempotency_key, token, traceparent)

    async def replay_duplicate(
        self, body: Mapping[str, JSON], producer_id: str, idempotency_key: str | None
    ) -> dict[str, JSON] | None:
        """The first result of an exact duplicate of ``producer_id``'s accepted event, or None
        (seed §3.2); see :meth:`ingest.EventIngestor.replay_duplicate`."""
        return await self.ingestor.replay_duplicate(body, producer_id, idempotency_key)

    async def admin_correct(
        self, task_id: str, body: Mapping[str, JSON], caller: ServiceIdentity
    ) -> dict[str, JSON]:
        """Operator correction (seed §4.2); see :func:`admin.admin_correct`."""
        return await admin.admin_correct(self, task_id, body, caller)

    async def apply_health(
        self, task_id: str, step_id: str, attempt: int, wanted: Health, cutoff: datetime
    ) -> bool:
        """The reconciler's STEP_HEALTH_CHANGED; see :func:`admin.apply_health`."""
        return await admin.apply_health(self, task_id, step_id, attempt, wanted, cutoff)

    async def publish_broadcast(self, body: Mapping[str, JSON], caller: ServiceIdentity) -> dict[str, JSON]:
        """A tenant or system notice (seed §6.6); see :func:`broadcasts.publish_broadcast`."""
        return await broadcasts.publish_broadcast(self, body, caller)

    async def purge_realtime_sessions(self, older_than: datetime | None = None) -> int:
        """Delete realtime sessions that expired before ``older_than`` (default: now) with their
        detail leases, ``retention_batch_size`` per transaction, and the per-user quota lock rows
        untouched since then. An expired session only ever answers ``SESSION_INVALID``; without
        this, every token refresh would leave a row forever. Returns the sessions deleted."""
        before = older_than or self.clock()
        total = 0
        for purge in (sessions.purge_expired, sessions.purge_quota_locks):
            while True:
                async with self.engine.begin() as conn:
                    n = await purge(conn, before, self.settings.retention_batch_size)
                if purge is sessions.purge_expired:
                    total += n
                if n < self.settings.retention_batch_size:
                    break
        return total

    async def purge_event_log(self, older_than: datetime | None = None) -> int:
        """Purge event-log entries committed before ``older_than`` (default: now minus the
        ``retention.event_log_days`` option; nothing when retention is off). Returns the count."""
        if older_than is None:
            keep = self.settings.event_log_retention_seconds
            if keep is None:
                return 0
            older_than = self.clock() - timedelta(seconds=keep)
        return await retention.purge_event_log(
            self, older_than, batch_size=self.settings.retention_batch_size
        )

    async def publish_definitions(
        self, kind: str, doc: Mapping[str, JSON], *, if_absent: bool = False
    ) -> bool:
        """Register a definition version; see :func:`admin.publish_definitions`."""
        return await admin.publish_definitions(self, kind, doc, if_absent=if_absent)

    async def load_registry_files(self) -> int:
        """Publish every definition in ``schema/registry/`` that is not registered yet (startup, init-db)."""
        return await admin.load_registry_files(self)
