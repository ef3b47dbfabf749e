"""Operator and background writes: admin corrections (seed §4.2), the health reconciler's
STEP_HEALTH_CHANGED (seed §4.3) and the versioned registries (seed §4.5, §4.7).

Each write is one transaction with the task row locked, through ``ServiceCore._commit_change``;
``service.StatusService`` exposes these as methods. Must not import starlette.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from status_api.domain import ingest
from status_api.domain.errors import conflict, forbidden, invalid, not_found
from status_api.domain.model import JSON, EventType, Health, Role, ServiceIdentity, StepState, TaskState
from status_api.domain.projections import Trigger, iso
from status_api.domain.registry import data_schema_names, operation_set_from_json, status_set_from_json
from status_api.service_core import ServiceCore
from status_api.storage import registries
from status_api.storage import repository as repo

RECONCILER_PRODUCER = "health-reconciler"


async def admin_correct(
    core: ServiceCore, task_id: str, body: Mapping[str, JSON], caller: ServiceIdentity
) -> dict[str, JSON]:
    """Operator correction: own role, records operator, reason, old and new values; new version."""
    if Role.ADMIN.value not in caller.roles:
        raise forbidden("ROLE_REQUIRED", "corrections need the admin role")
    core.schemas.require("admin-correction", body)

    async def tx() -> dict[str, JSON]:
        async with core.engine.begin() as conn:
            task = await repo.lock_task(conn, task_id)
            if task is None:
                raise not_found()
            steps = await repo.current_steps(conn, task_id)
            defs = await core._task_defs(conn, task)
            now = core.clock()
            step_id = body.get("stepId")
            health = Health(body["health"]) if body.get("health") else None
            applied = ingest.admin_correct(task, steps, step_id, body["businessStatus"], health, defs, now)
            old_subject: TaskState | StepState = steps[step_id] if step_id else task
            new_subject: TaskState | StepState = applied.step if applied.step else applied.task

            def snap(x: TaskState | StepState) -> dict[str, JSON]:
                return {
                    "lifecycleStatus": x.lifecycle.value,
                    "businessStatus": x.business_status,
                    "health": x.health.value,
                    "version": str(x.version),
                }

            event_id = str(uuid.uuid4())
            trigger = Trigger(
                event_id,
                EventType.ADMIN_CORRECTION,
                now,
                step_id,
                applied.step.operation_code if applied.step else None,
                applied.step.attempt if applied.step else None,
                applied.step.version if applied.step else None,
            )
            audit = {
                "operator": caller.producer_id,
                "reason": body["reason"],
                "old": snap(old_subject),
                "new": snap(new_subject),
            }
            await core._commit_change(
                conn,
                task,
                steps,
                applied,
                defs,
                trigger,
                {
                    "producer_id": f"admin:{caller.producer_id}"[:128],
                    "source_seq": applied.task.version,
                    "event_type": EventType.ADMIN_CORRECTION.value,
                    "data_schema": None,
                    "error_code": None,
                    "occurred_at": now,
                    "received_at": now,
                    "duration_ms": None,
                    "payload": audit,
                },
            )
            return {
                "eventId": event_id,
                "taskVersion": str(applied.task.version),
                "committedAt": iso(now),
                **audit,
            }

    return await core._retrying(tx)


async def apply_health(
    core: ServiceCore, task_id: str, step_id: str, attempt: int, wanted: Health, cutoff: datetime
) -> bool:
    """Re-check under the task lock and commit STEP_HEALTH_CHANGED; False if no longer applicable."""

    async def tx() -> bool:
        async with core.engine.begin() as conn:
            task = await repo.lock_task(conn, task_id)
            if task is None:
                return False
            steps = await repo.current_steps(conn, task_id)
            step = steps.get(step_id)
            if step is None or step.attempt != attempt or step.lifecycle.value != "RUNNING":
                return False
            alive = step.last_heartbeat_at or step.started_at or step.created_at
            if step.health is wanted or (wanted is Health.STALE) != (alive < cutoff):
                return False
            defs = await core._task_defs(conn, task)
            now = core.clock()
            applied = ingest.change_step_health(task, steps, step_id, wanted, defs.operations, now)
            assert applied.step is not None
            trigger = Trigger(
                str(uuid.uuid4()),
                EventType.STEP_HEALTH_CHANGED,
                now,
                step_id,
                step.operation_code,
                attempt,
                applied.step.version,
            )
            await core._commit_change(
                conn,
                task,
                steps,
                applied,
                defs,
                trigger,
                {
                    "producer_id": RECONCILER_PRODUCER,
                    "source_seq": applied.task.version,
                    "event_type": EventType.STEP_HEALTH_CHANGED.value,
                    "data_schema": None,
                    "error_code": None,
                    "occurred_at": now,
                    "received_at": now,
                    "duration_ms": None,
                    "payload": {
                        "from": step.health.value,
                        "to": wanted.value,
                        "lastHeartbeatAt": iso(step.last_heartbeat_at),
                    },
                },
            )
            return True

    return await core._retrying(tx)


async def publish_definitions(
    core: ServiceCore, kind: str, doc: Mapping[str, JSON], *, if_absent: bool = False
) -> bool:
    """Register a new definition version (``kind`` = status-definitions | operation-definitions).

    Published versions are immutable: re-publishing identical content is a no-op, different content
    is ``DEFINITION_VERSION_EXISTS``. Returns True when inserted.
    """
    core.schemas.require(kind, doc, "INVALID_DEFINITION")
    async with core.engine.begin() as conn:
        args = (doc["tenantId"], doc["product"], doc["taskType"], int(doc["definitionVersion"]))
        if kind == "status-definitions":
            sset = status_set_from_json(doc)
            existing_s = await registries.load_status_set(conn, *args)
            if existing_s is not None and existing_s.tenant_id == sset.tenant_id:
                if existing_s == sset:
                    return False
                raise conflict(
                    "DEFINITION_VERSION_EXISTS", "definition versions are immutable; publish a new one"
                )
            await registries.insert_status_set(conn, sset)
            return True
        oset = operation_set_from_json(doc)
        missing = data_schema_names(oset) - core.schemas.data_schema_names
        if missing:
            raise invalid(
                "UNKNOWN_DATA_SCHEMA", f"data schemas not registered in schema/data: {sorted(missing)}"
            )
        existing_o = await registries.load_operation_set(conn, *args)
        if existing_o is not None and existing_o.tenant_id == oset.tenant_id:
            if existing_o == oset:
                return False
            raise conflict(
                "DEFINITION_VERSION_EXISTS", "definition versions are immutable; publish a new one"
            )
        await registries.insert_operation_set(conn, oset)
        return True


async def load_registry_files(core: ServiceCore) -> int:
    """Publish every definition in ``schema/registry/`` that is not registered yet (startup, init-db)."""
    count = 0
    for kind in ("status-definitions", "operation-definitions"):
        for doc in core.schemas.load_registry_file(kind):
            count += await publish_definitions(core, kind, doc)
    return count
