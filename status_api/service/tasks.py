"""The coordinator's use cases: create a task (seed §3.1), open a step's or the task's next attempt
(seed §3.3, §4.1), and the worker's executionToken renewal (long steps).

Each runs as ONE transaction through :meth:`ServiceContext.transact` and returns its change as a
value (task + steps, the event-log row, the outbox messages, the idempotency row) for the one
writer. The creating coordinator is bound to the task (``coordinator_id``); only it opens attempts
and reports TASK_* events (``domain.ingest.authorize_coordinator``). Must not import starlette.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain import attempts, creation, ingest
from status_api.domain.errors import conflict, forbidden, invalid, not_found
from status_api.domain.model import (
    JSON,
    EventType,
    Lifecycle,
    Role,
    ServiceIdentity,
    StepState,
    TaskState,
)
from status_api.domain.projections import Trigger, iso, project
from status_api.domain.registry import TaskDefinitions
from status_api.service.context import (
    Decision,
    ServiceContext,
    audit_fields,
    canonical_hash,
    event_log_row,
    outbox_messages,
    version_change,
)
from status_api.storage import repository as repo
from status_api.storage.write import Change, DedupRow

Response = dict[str, JSON]


async def create_task(
    ctx: ServiceContext,
    body: Mapping[str, JSON],
    caller: ServiceIdentity,
    idempotency_key: str | None = None,
) -> Response:
    """``POST /internal/v1/tasks``: version 1, steps at attempt 1, an execution context per step.

    With an ``Idempotency-Key`` a retried creation by the same coordinator returns the first
    result (fresh tokens).

    Raises:
        DomainError: FORBIDDEN ``ROLE_REQUIRED``, ``TENANT_MISMATCH``, ``COORDINATOR_MISMATCH``
            (someone else's Idempotency-Key); INVALID ``INVALID_IDEMPOTENCY_KEY`` and those of
            ``creation.create_task``; CONFLICT ``TASK_EXISTS``, ``EVENT_ID_CONFLICT``.
    """
    if Role.COORDINATOR.value not in caller.roles:
        raise forbidden("ROLE_REQUIRED", "creating tasks needs the coordinator role")
    ctx.schemas.require("task-create", body)
    if not caller.serves(body["tenantId"]):
        raise forbidden("TENANT_MISMATCH", "the service credential is bound to another tenant")
    task_id = body.get("taskId") or str(uuid.uuid4())
    event_id = idempotency_key or str(uuid.uuid4())
    if len(event_id) > 64:
        raise invalid("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key is longer than 64 characters")
    payload_hash = canonical_hash(body)

    async def decide(conn: AsyncConnection) -> Decision[Response]:
        now = ctx.clock()
        if idempotency_key:
            prior = (await repo.get_dedups(conn, [event_id])).get(event_id)
            if prior is not None:
                if prior["payload_hash"] != payload_hash:
                    raise conflict("EVENT_ID_CONFLICT", "Idempotency-Key reused with a different body")
                return Decision([], await _replayed(ctx, conn, prior["task_id"], caller, now))
        defs = await ctx.definitions(
            conn,
            body["tenantId"],
            body["product"],
            body["taskType"],
            int(body["statusDefinitionVersion"]),
            int(body["operationDefinitionVersion"]),
        )
        task, steps = creation.create_task(
            body, task_id, defs, ctx.schemas.validate_data, now, caller.producer_id
        )
        if await repo.get_tasks(conn, [task_id]):
            raise conflict("TASK_EXISTS", "a task with this taskId exists")
        trigger = Trigger(event_id, EventType.TASK_CREATED, now)
        projected = project(task, task, steps, None, trigger, defs.operations, defs.statuses)
        change = Change(
            at=now,
            task=task,
            new_steps=tuple(steps.values()),
            log=(
                event_log_row(
                    trigger,
                    task,
                    None,
                    audit_fields(
                        caller.producer_id, 0, EventType.TASK_CREATED.value, now, {"steps": body["steps"]}
                    ),
                ),
            ),
            outbox=outbox_messages(projected),
            dedup=DedupRow(event_id, task.id, payload_hash, {"taskId": task.id}, now)
            if idempotency_key
            else None,
        )
        return Decision([change], _created(ctx, task, steps, defs, now, duplicate=False))

    return await ctx.transact(decide)


def _created(
    ctx: ServiceContext,
    task: TaskState,
    steps: Mapping[str, StepState],
    defs: TaskDefinitions,
    now: datetime,
    duplicate: bool,
) -> Response:
    return {
        "taskId": task.id,
        "taskVersion": str(task.version),
        "duplicate": duplicate,
        "lifecycleStatus": task.lifecycle.value,
        "businessStatus": task.business_status,
        "createdAt": iso(task.created_at),
        "steps": [ctx.execution_context(task, s, defs, now) for s in steps.values()],
    }


async def _replayed(
    ctx: ServiceContext, conn: AsyncConnection, task_id: str, caller: ServiceIdentity, now: datetime
) -> Response:
    task = (await repo.get_tasks(conn, [task_id])).get(task_id)
    if task is None:
        raise not_found()
    # Fresh execution tokens only for the coordinator that created the task.
    ingest.authorize_coordinator(caller, task)
    steps = (await repo.current_steps(conn, [task_id]))[task_id]
    out = _created(ctx, task, steps, await ctx.task_definitions(conn, task), now, duplicate=True)
    out["taskVersion"] = "1"
    return out


async def create_step_attempt(
    ctx: ServiceContext, task_id: str, step_id: str, caller: ServiceIdentity
) -> Response:
    """``POST /internal/v1/tasks/{taskId}/steps/{stepId}/attempts``: attempt n+1 and its new token.

    Raises:
        DomainError: FORBIDDEN ``ROLE_REQUIRED``, ``COORDINATOR_MISMATCH``, ``TENANT_MISMATCH``;
            NOT_FOUND; those of ``ingest.new_step_attempt``.
    """
    if Role.COORDINATOR.value not in caller.roles:
        raise forbidden("ROLE_REQUIRED", "creating attempts needs the coordinator role")

    async def decide(conn: AsyncConnection) -> Decision[Response]:
        task = (await repo.lock_tasks(conn, [task_id])).get(task_id)
        if task is None:
            raise not_found()
        ingest.authorize_coordinator(caller, task)
        steps = (await repo.current_steps(conn, [task_id]))[task_id]
        defs = await ctx.task_definitions(conn, task)
        now = ctx.clock()
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
        change = version_change(
            task,
            steps,
            applied,
            defs,
            trigger,
            audit_fields(caller.producer_id, 0, EventType.STEP_ATTEMPT_CREATED.value, now, None),
            new_attempt=True,
        )
        ctx_out = ctx.execution_context(applied.task, step, defs, now)
        result = {"taskVersion": str(applied.task.version), "stepVersion": str(step.version), **ctx_out}
        return Decision([change], result)

    return await ctx.transact(decide)


async def create_task_attempt(ctx: ServiceContext, task_id: str, caller: ServiceIdentity) -> Response:
    """``POST /internal/v1/tasks/{taskId}/attempts``: task attempt n+1 after a failed step, with a
    new execution context for every step (seed §3.3, §4.1). The task's own coordinator, or a
    ``policy-executor`` of its tenant (a registered failure policy, seed §4.4), may open it.

    Raises:
        DomainError: FORBIDDEN ``ROLE_REQUIRED``, ``COORDINATOR_MISMATCH``, ``TENANT_MISMATCH``;
            NOT_FOUND; those of ``attempts.new_task_attempt``.
    """
    policy = Role.POLICY_EXECUTOR.value in caller.roles
    if Role.COORDINATOR.value not in caller.roles and not policy:
        raise forbidden("ROLE_REQUIRED", "task attempts need the coordinator or policy-executor role")

    async def decide(conn: AsyncConnection) -> Decision[Response]:
        task = (await repo.lock_tasks(conn, [task_id])).get(task_id)
        if task is None:
            raise not_found()
        if Role.COORDINATOR.value in caller.roles and task.coordinator_id in (None, caller.producer_id):
            ingest.authorize_coordinator(caller, task)
        elif policy:
            if not caller.serves(task.tenant_id):
                raise forbidden("TENANT_MISMATCH", "the service credential is bound to another tenant")
        else:
            ingest.authorize_coordinator(caller, task)
        steps = (await repo.current_steps(conn, [task_id]))[task_id]
        defs = await ctx.task_definitions(conn, task)
        now = ctx.clock()
        after, new_steps = attempts.new_task_attempt(task, steps, defs, now, ctx.settings.max_task_attempts)
        trigger = Trigger(str(uuid.uuid4()), EventType.TASK_ATTEMPT_CREATED, now)
        projected = project(task, after, new_steps, None, trigger, defs.operations)
        log_fields = audit_fields(
            caller.producer_id,
            0,
            EventType.TASK_ATTEMPT_CREATED.value,
            now,
            {
                "previousAttempt": task.attempt,
                "failedSteps": sorted(sid for sid, s in steps.items() if s.lifecycle is Lifecycle.FAILED),
            },
        )
        change = Change(
            at=now,
            task=after,
            base_version=task.version,
            new_steps=tuple(new_steps.values()),
            log=(event_log_row(trigger, after, None, log_fields),),
            outbox=outbox_messages(projected),
        )
        result: Response = {
            "taskId": after.id,
            "taskAttempt": after.attempt,
            "taskVersion": str(after.version),
            "lifecycleStatus": after.lifecycle.value,
            "businessStatus": after.business_status,
            "steps": [ctx.execution_context(after, s, defs, now) for s in new_steps.values()],
        }
        return Decision([change], result)

    return await ctx.transact(decide)


async def renew_execution_token(ctx: ServiceContext, token: str) -> Response:
    """``POST /internal/v1/execution-tokens/renew``: a new executionToken for the step attempt the
    presented token is bound to, while that attempt is current and running — so a step may outlast
    ``execution_token.ttl_seconds`` — never past ``execution_token.max_lifetime_seconds`` after its
    first token. Each renewal is one audited row in ``execution_token_renewal``; nothing else
    changes (no version, no publication).

    Raises:
        DomainError: UNAUTHENTICATED ``INVALID_EXECUTION_TOKEN``, ``EXECUTION_TOKEN_EXPIRED``
            (past the grace); those of ``attempts.check_renewal``.
    """
    now = ctx.clock()
    grant, chain_started = ctx.tokens.verify_for_renewal(token, now)

    async def decide(conn: AsyncConnection) -> Decision[Response]:
        task = (await repo.lock_tasks(conn, [grant.task_id])).get(grant.task_id)
        steps = (await repo.current_steps(conn, [grant.task_id])).get(grant.task_id, {}) if task else {}
        at = ctx.clock()
        out, row = await ctx.renewal(conn, task, steps, grant, chain_started, at)
        return Decision([Change(at=at, renewals=(row,))], out)

    return await ctx.transact(decide)
