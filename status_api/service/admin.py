"""Operator and background writes: admin corrections (seed §4.2), the health reconciler's
STEP_HEALTH_CHANGED (seed §4.3) and the versioned registries (seed §4.5, §4.7).

Each task write is one transaction with the task row locked (``ServiceContext.transact``) that
returns its change for the one writer; ``service.StatusService`` exposes these as methods. An admin
correction is the only write that may change a terminal task, and it is audited (operator, reason,
old and new values). Must not import starlette.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain import ingest
from status_api.domain.errors import conflict, forbidden, invalid, not_found
from status_api.domain.model import JSON, EventType, Health, Role, ServiceIdentity, StepState, TaskState
from status_api.domain.projections import Trigger, iso
from status_api.domain.registry import data_schema_names, operation_set_from_json, status_set_from_json
from status_api.service.context import Decision, ServiceContext, audit_fields, version_change
from status_api.storage import registries
from status_api.storage import repository as repo

RECONCILER_PRODUCER = "health-reconciler"


async def admin_correct(
    core: ServiceContext, task_id: str, body: Mapping[str, JSON], caller: ServiceIdentity
) -> dict[str, JSON]:
    """Operator correction: own role, records operator, reason, old and new values; new version.

    Raises:
        DomainError: FORBIDDEN ``ROLE_REQUIRED``; NOT_FOUND (also a task of another tenant than a
            tenant-bound credential's); those of ``ingest.admin_correct``.
    """
    if Role.ADMIN.value not in caller.roles:
        raise forbidden("ROLE_REQUIRED", "corrections need the admin role")
    core.schemas.require("admin-correction", body)

    async def decide(conn: AsyncConnection) -> Decision[dict[str, JSON]]:
        task = (await repo.lock_tasks(conn, [task_id])).get(task_id)
        if task is None or not caller.serves(task.tenant_id):
            raise not_found()
        steps = (await repo.current_steps(conn, [task_id]))[task_id]
        defs = await core.task_definitions(conn, task)
        now = core.clock()
        step_id = body.get("stepId")
        health = Health(body["health"]) if body.get("health") else None
        applied = ingest.admin_correct(task, steps, step_id, body["businessStatus"], health, defs, now)
        old_subject: TaskState | StepState = steps[step_id] if step_id else task
        new_subject: TaskState | StepState = applied.step if applied.step else applied.task
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
        audit: dict[str, JSON] = {
            "operator": caller.producer_id,
            "reason": body["reason"],
            "old": _snapshot(old_subject),
            "new": _snapshot(new_subject),
        }
        fields = audit_fields(
            f"admin:{caller.producer_id}", applied.task.version, EventType.ADMIN_CORRECTION.value, now, audit
        )
        change = version_change(task, steps, applied, defs, trigger, fields)
        result = {"eventId": event_id, "taskVersion": str(applied.task.version), "committedAt": iso(now)}
        return Decision([change], {**result, **audit})

    return await core.transact(decide)


def _snapshot(x: TaskState | StepState) -> dict[str, JSON]:
    return {
        "lifecycleStatus": x.lifecycle.value,
        "businessStatus": x.business_status,
        "health": x.health.value,
        "version": str(x.version),
    }


async def apply_health(
    core: ServiceContext, task_id: str, step_id: str, attempt: int, wanted: Health, cutoff: datetime
) -> bool:
    """Re-check under the task lock and commit STEP_HEALTH_CHANGED; False if no longer applicable
    (see ``ingest.change_step_health``: never on a terminal task)."""

    async def decide(conn: AsyncConnection) -> Decision[bool]:
        task = (await repo.lock_tasks(conn, [task_id])).get(task_id)
        if task is None:
            return Decision([], False)
        steps = (await repo.current_steps(conn, [task_id]))[task_id]
        defs = await core.task_definitions(conn, task)
        now = core.clock()
        applied = ingest.change_step_health(
            task, steps, step_id, attempt, wanted, cutoff, defs.operations, now
        )
        if applied is None or applied.step is None:
            return Decision([], False)
        before = steps[step_id]
        trigger = Trigger(
            str(uuid.uuid4()),
            EventType.STEP_HEALTH_CHANGED,
            now,
            step_id,
            before.operation_code,
            attempt,
            applied.step.version,
        )
        payload = {
            "from": before.health.value,
            "to": wanted.value,
            "lastHeartbeatAt": iso(before.last_heartbeat_at),
        }
        fields = audit_fields(
            RECONCILER_PRODUCER, applied.task.version, EventType.STEP_HEALTH_CHANGED.value, now, payload
        )
        return Decision([version_change(task, steps, applied, defs, trigger, fields)], True)

    return await core.transact(decide)


async def publish_definitions(
    core: ServiceContext, kind: str, doc: Mapping[str, JSON], *, if_absent: bool = False
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


async def load_registry_files(core: ServiceContext) -> int:
    """Publish every definition in ``schema/registry/`` that is not registered yet (startup, init-db)."""
    count = 0
    for kind in ("status-definitions", "operation-definitions"):
        for doc in core.schemas.load_registry_file(kind):
            count += await publish_definitions(core, kind, doc)
    return count
