"""Status API write use cases. Each one is ONE database transaction with the task row locked:
validate, decide (pure domain), save state, append the event log, the idempotency record and one
outbox row per projection — and it returns only after commit, because a 2xx means durable.

:class:`StatusService` is the facade the HTTP layer, queries and the reconciler use. Task creation
and step attempts live here; event ingestion (with group commit) in ``service_ingest``; operator
corrections, the reconciler's health changes and the registries in ``service_admin``; the shared
plumbing (clock, settings, retries, definition cache, saving a change) in ``service_core``.

Must not import starlette; the HTTP layer calls these methods and maps ``DomainError`` to statuses.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from status_api import service_admin
from status_api.domain import creation, ingest
from status_api.domain.errors import conflict, forbidden, invalid, not_found
from status_api.domain.model import (
    JSON,
    EventType,
    ExecutionGrant,
    Health,
    Role,
    ServiceIdentity,
    StepState,
    TaskState,
)
from status_api.domain.projections import Trigger, iso, outbox_messages
from status_api.domain.registry import TaskDefinitions
from status_api.schemas import SchemaStore
from status_api.service_admin import RECONCILER_PRODUCER
from status_api.service_core import (
    Clock,
    ServiceCore,
    ServiceSettings,
    canonical_hash,
    parse_time,
    utc_now,
)
from status_api.service_ingest import EventIngestor, parse_event
from status_api.storage import outbox
from status_api.storage import repository as repo
from status_api.tokens import TokenIssuer

__all__ = [
    "RECONCILER_PRODUCER",
    "Clock",
    "ServiceSettings",
    "StatusService",
    "canonical_hash",
    "parse_event",
    "parse_time",
    "utc_now",
]


class StatusService(ServiceCore):
    """Write side of the Status API. ``clock`` is injected (tests advance it by hand)."""

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

    # --- task creation -------------------------------------------------------------------------

    async def create_task(
        self, body: Mapping[str, JSON], caller: ServiceIdentity, idempotency_key: str | None = None
    ) -> dict[str, JSON]:
        """``POST /internal/v1/tasks``: version 1, steps at attempt 1, an execution context per step.

        With an ``Idempotency-Key`` a retried creation returns the first result (fresh tokens).
        """
        if Role.COORDINATOR.value not in caller.roles:
            raise forbidden("ROLE_REQUIRED", "creating tasks needs the coordinator role")
        self.schemas.require("task-create", body)
        task_id = body.get("taskId") or str(uuid.uuid4())
        event_id = idempotency_key or str(uuid.uuid4())
        if len(event_id) > 64:
            raise invalid("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key is longer than 64 characters")
        payload_hash = canonical_hash(body)

        async def tx() -> dict[str, JSON]:
            async with self.engine.begin() as conn:
                now = self.clock()
                if idempotency_key:
                    prior = await repo.get_dedup(conn, event_id)
                    if prior is not None:
                        if prior["payload_hash"] != payload_hash:
                            raise conflict(
                                "EVENT_ID_CONFLICT", "Idempotency-Key reused with a different body"
                            )
                        return await self._created_response(conn, prior["task_id"], now, duplicate=True)
                defs = await self.definitions(
                    conn,
                    body["tenantId"],
                    body["product"],
                    body["taskType"],
                    int(body["statusDefinitionVersion"]),
                    int(body["operationDefinitionVersion"]),
                )
                task, steps = creation.create_task(body, task_id, defs, self.schemas.validate_data, now)
                if await repo.get_task(conn, task_id) is not None:
                    raise conflict("TASK_EXISTS", "a task with this taskId exists")
                await repo.insert_task(conn, task, steps.values())
                trigger = Trigger(event_id, EventType.TASK_CREATED, now)
                await repo.insert_event(
                    conn,
                    {
                        "event_id": event_id,
                        "task_id": task.id,
                        "task_version": 1,
                        "step_id": None,
                        "operation_code": None,
                        "step_version": None,
                        "task_attempt": 1,
                        "step_attempt": None,
                        "producer_id": caller.producer_id,
                        "source_seq": 0,
                        "event_type": EventType.TASK_CREATED.value,
                        "lifecycle_status": task.lifecycle.value,
                        "business_status": task.business_status,
                        "health": task.health.value,
                        "data_schema": None,
                        "error_code": None,
                        "occurred_at": now,
                        "received_at": now,
                        "committed_at": now,
                        "duration_ms": None,
                        "payload": {"steps": body["steps"]},
                    },
                )
                await outbox.append(
                    conn, task.id, 1, outbox_messages(task, task, steps, None, trigger, defs.operations), now
                )
                if idempotency_key:
                    await repo.insert_dedup(conn, event_id, task.id, payload_hash, {"taskId": task.id}, now)
                return self._created(task, steps, defs, now, duplicate=False)

        return await self._retrying(tx)

    def _created(
        self,
        task: TaskState,
        steps: Mapping[str, StepState],
        defs: TaskDefinitions,
        now: datetime,
        duplicate: bool,
    ) -> dict[str, JSON]:
        return {
            "taskId": task.id,
            "taskVersion": str(task.version),
            "duplicate": duplicate,
            "lifecycleStatus": task.lifecycle.value,
            "businessStatus": task.business_status,
            "createdAt": iso(task.created_at),
            "steps": [self.execution_context(task, s, defs, now) for s in steps.values()],
        }

    async def _created_response(
        self, conn: AsyncConnection, task_id: str, now: datetime, duplicate: bool
    ) -> dict[str, JSON]:
        task = await repo.get_task(conn, task_id)
        if task is None:
            raise not_found()
        steps = await repo.current_steps(conn, task_id)
        out = self._created(task, steps, await self._task_defs(conn, task), now, duplicate)
        out["taskVersion"] = "1"
        return out

    # --- event ingestion (service_ingest) ----------------------------------------------------

    async def ingest_event(
        self,
        body: Mapping[str, JSON],
        caller: ExecutionGrant | ServiceIdentity,
        idempotency_key: str | None = None,
    ) -> dict[str, JSON]:
        """``POST /internal/v1/task-events`` (seed §3.5). Returns the response body (seed §3.5 shape).

        Raises:
            DomainError: see ``ingest.authorize`` / ``check_registered`` / ``apply_*``; CONFLICT
                ``EVENT_ID_CONFLICT`` for a reused eventId with different content.
        """
        return await self.ingestor.ingest_event(body, caller, idempotency_key)

    # --- coordinator: retries ------------------------------------------------------------------

    async def create_step_attempt(
        self, task_id: str, step_id: str, caller: ServiceIdentity
    ) -> dict[str, JSON]:
        """``POST /internal/v1/tasks/{taskId}/steps/{stepId}/attempts``: attempt n+1 and its new token."""
        if Role.COORDINATOR.value not in caller.roles:
            raise forbidden("ROLE_REQUIRED", "creating attempts needs the coordinator role")

        async def tx() -> dict[str, JSON]:
            async with self.engine.begin() as conn:
                task = await repo.lock_task(conn, task_id)
                if task is None:
                    raise not_found()
                steps = await repo.current_steps(conn, task_id)
                defs = await self._task_defs(conn, task)
                now = self.clock()
                applied = ingest.new_step_attempt(task, steps, step_id, defs, now)
                step = applied.step
                assert step is not None
                trigger = Trigger(
                    str(uuid.uuid4()),
                    EventType.STEP_ATTEMPT_CREATED,
                    now,
                    step_id,
                    step.operation_code,
                    step.attempt,
                    step.version,
                )
                await self._commit_change(
                    conn,
                    task,
                    steps,
                    applied,
                    defs,
                    trigger,
                    {
                        "producer_id": caller.producer_id,
                        "source_seq": 0,
                        "event_type": EventType.STEP_ATTEMPT_CREATED.value,
                        "data_schema": None,
                        "error_code": None,
                        "occurred_at": now,
                        "received_at": now,
                        "duration_ms": None,
                        "payload": None,
                    },
                    new_attempt=True,
                )
                ctx = self.execution_context(applied.task, step, defs, now)
                return {"taskVersion": str(applied.task.version), "stepVersion": str(step.version), **ctx}

        return await self._retrying(tx)

    # --- operator, reconciler, registries (service_admin) -------------------------------------

    async def admin_correct(
        self, task_id: str, body: Mapping[str, JSON], caller: ServiceIdentity
    ) -> dict[str, JSON]:
        """Operator correction (seed §4.2); see :func:`service_admin.admin_correct`."""
        return await service_admin.admin_correct(self, task_id, body, caller)

    async def apply_health(
        self, task_id: str, step_id: str, attempt: int, wanted: Health, cutoff: datetime
    ) -> bool:
        """The reconciler's STEP_HEALTH_CHANGED; see :func:`service_admin.apply_health`."""
        return await service_admin.apply_health(self, task_id, step_id, attempt, wanted, cutoff)

    async def publish_definitions(
        self, kind: str, doc: Mapping[str, JSON], *, if_absent: bool = False
    ) -> bool:
        """Register a definition version; see :func:`service_admin.publish_definitions`."""
        return await service_admin.publish_definitions(self, kind, doc, if_absent=if_absent)

    async def load_registry_files(self) -> int:
        """Publish every definition in ``schema/registry/`` that is not registered yet (startup, init-db)."""
        return await service_admin.load_registry_files(self)
