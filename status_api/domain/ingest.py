"""The ingestion state machine (seed §3.5, §3.6, §4): a pure function of (current state, event).

``service.ingest`` calls, with the task row locked and in this order:

1. :func:`authorize` — the executionToken (or service identity) matches the body and the step
   definition stored at task creation; TASK_* events come from the task's own coordinator
   (:func:`authorize_coordinator`) or a failure-policy executor;
2. :func:`check_registered` — operationCode, producer, eventType, ``data.schema`` (+ JSON Schema of
   ``data.value`` through the injected validator), businessStatus and size limits;
3. (service) eventId idempotency;
4. :func:`apply_step_event` / :func:`apply_task_event` — attempts, sourceSeq, the lifecycle
   transition table; returns :class:`Stale`, :class:`Heartbeat` or :class:`Applied`.

Rejections raise :class:`~status_api.domain.errors.DomainError`; stale events are not errors.
The other transitions live here too: :func:`new_step_attempt`, :func:`change_step_health` (the
reconciler; never on a terminal task) and :func:`admin_correct` (the only way out of a terminal state).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from status_api.domain.errors import DomainError, ErrorKind, conflict, forbidden, invalid
from status_api.domain.model import (
    EVENT_LIFECYCLE,
    JSON,
    TERMINAL,
    TRANSITIONS,
    WAITING_USER_ACTION,
    DurationSource,
    Event,
    EventType,
    ExecutionGrant,
    FailurePolicy,
    Health,
    Lifecycle,
    Role,
    ServiceIdentity,
    StepState,
    TaskState,
    ms_between,
)
from status_api.domain.registry import OperationDefinitionSet, StatusDef, TaskDefinitions

#: ``validate_data(schema_name, value) -> list of error messages`` (empty = valid; unknown schema = error).
DataValidator = Callable[[str, Mapping[str, JSON]], list[str]]

DEFAULT_MAX_DATA_BYTES = 8192


@dataclass(frozen=True, slots=True)
class Stale:
    """Accepted for idempotency but ignored: an older attempt or sourceSeq (seed §3.2 table)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A heartbeat: only ``last_heartbeat_at`` moves; no version, no publication (seed §3.5)."""

    step: StepState


@dataclass(frozen=True, slots=True)
class Applied:
    """An accepted change: new task version (and step version for step events)."""

    task: TaskState
    step: StepState | None


Outcome = Stale | Heartbeat | Applied


def authorize(
    event: Event, caller: ExecutionGrant | ServiceIdentity, task: TaskState, step: StepState | None
) -> None:
    """Check that the credential allows exactly this report.

    Raises:
        DomainError: FORBIDDEN ``TOKEN_MISMATCH`` (token vs body), ``STEP_DEFINITION_MISMATCH`` (body vs
            the step stored at creation), ``EXECUTION_TOKEN_REQUIRED``, ``PRODUCER_MISMATCH``,
            ``ROLE_REQUIRED``, ``TENANT_MISMATCH``, ``COORDINATOR_MISMATCH`` (a TASK_* event from
            another coordinator than the task's own); NOT_FOUND ``STEP_NOT_FOUND``.
    """
    if event.task_type is not None and event.task_type != task.task_type:
        raise forbidden("TOKEN_MISMATCH", "taskType does not match the task")
    if event.is_step_event:
        if not isinstance(caller, ExecutionGrant):
            raise forbidden("EXECUTION_TOKEN_REQUIRED", "step events need the step's executionToken")
        bound = (
            caller.task_id == event.task_id
            and caller.step_id == event.step_id
            and caller.operation_code == event.operation_code
            and caller.task_attempt == event.task_attempt
            and caller.step_attempt == event.step_attempt
            and caller.producer_id == event.producer_id
        )
        if not bound:
            raise forbidden("TOKEN_MISMATCH", "executionToken does not match the event body")
        if event.event_type.value not in caller.event_types:
            raise forbidden("TOKEN_MISMATCH", f"executionToken does not allow {event.event_type}")
        if step is None:
            raise DomainError(ErrorKind.NOT_FOUND, "STEP_NOT_FOUND", "step not found")
        if step.operation_code != event.operation_code or step.producer_id != event.producer_id:
            raise forbidden(
                "STEP_DEFINITION_MISMATCH", "operationCode/producerId differ from the step definition"
            )
        return
    if not isinstance(caller, ServiceIdentity):
        raise forbidden("TOKEN_MISMATCH", "an executionToken only allows step events")
    if caller.producer_id != event.producer_id:
        raise forbidden("PRODUCER_MISMATCH", "producerId does not match the service identity")
    if event.event_type is EventType.TASK_FAILED and Role.POLICY_EXECUTOR.value in caller.roles:
        # A registered failure-policy executor may fail any task of its tenant (seed §3.5, §4.4).
        if not caller.serves(task.tenant_id):
            raise forbidden("TENANT_MISMATCH", "the service credential is bound to another tenant")
        return
    allowed = {Role.COORDINATOR.value}
    if event.event_type is EventType.TASK_FAILED:
        allowed.add(Role.POLICY_EXECUTOR.value)
    if not (caller.roles & allowed):
        raise forbidden("ROLE_REQUIRED", f"{event.event_type} needs role {' or '.join(sorted(allowed))}")
    authorize_coordinator(caller, task)


def authorize_coordinator(caller: ServiceIdentity, task: TaskState) -> None:
    """Only the coordinator bound to the task at creation acts for it as coordinator (TASK_*
    events, new attempts, idempotent creation replays), and only within its tenant.

    A task created before the binding existed (``coordinator_id`` None) accepts any coordinator.

    Raises:
        DomainError: FORBIDDEN ``TENANT_MISMATCH``, ``COORDINATOR_MISMATCH``.
    """
    if not caller.serves(task.tenant_id):
        raise forbidden("TENANT_MISMATCH", "the service credential is bound to another tenant")
    if task.coordinator_id is not None and task.coordinator_id != caller.producer_id:
        raise forbidden("COORDINATOR_MISMATCH", "only the task's own coordinator may do this")


def _status(defs: TaskDefinitions, code: str | None, expected: Lifecycle) -> StatusDef:
    sdef = defs.statuses.statuses.get(code or "")
    if sdef is None or not sdef.enabled:
        raise invalid("UNKNOWN_BUSINESS_STATUS", f"businessStatus {code!r} is not registered for this task")
    if sdef.lifecycle is not expected:
        raise invalid(
            "BUSINESS_STATUS_LIFECYCLE_MISMATCH",
            f"businessStatus {code} maps to {sdef.lifecycle}, not {expected} as {expected!s} events require",
        )
    return sdef


def check_registered(
    event: Event,
    defs: TaskDefinitions,
    validate_data: DataValidator,
    max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
) -> None:
    """Check the event against the registries the task is bound to (seed §3.3.1, §4.5, §4.7).

    Raises:
        DomainError: INVALID ``UNKNOWN_OPERATION``, ``EVENT_TYPE_NOT_ALLOWED``, ``DATA_SCHEMA_NOT_ALLOWED``,
            ``DATA_INVALID``, ``DATA_NOT_ALLOWED``, ``UNKNOWN_BUSINESS_STATUS``,
            ``BUSINESS_STATUS_LIFECYCLE_MISMATCH``; FORBIDDEN ``PRODUCER_NOT_ALLOWED``;
            TOO_LARGE ``DATA_TOO_LARGE``.
    """
    if event.data is not None:
        size = len(json.dumps(event.data.value, separators=(",", ":"), ensure_ascii=False).encode())
        if size > max_data_bytes:
            raise DomainError(
                ErrorKind.TOO_LARGE, "DATA_TOO_LARGE", f"data.value is {size} bytes > {max_data_bytes}"
            )
    if not event.is_step_event:
        if event.data is not None:
            raise invalid("DATA_NOT_ALLOWED", "task-level events carry no data body")
        _status(defs, event.business_status, EVENT_LIFECYCLE[event.event_type])
        return
    op = defs.operations.operations.get(event.operation_code or "")
    if op is None or not op.enabled:
        raise invalid("UNKNOWN_OPERATION", f"operationCode {event.operation_code!r} is not registered")
    if not op.producer_allowed(event.producer_id):
        raise forbidden("PRODUCER_NOT_ALLOWED", f"producer may not report {op.operation_code}")
    if event.event_type.value not in op.allowed_event_types:
        raise invalid("EVENT_TYPE_NOT_ALLOWED", f"{op.operation_code} does not allow {event.event_type}")
    if event.data is not None:
        if event.data.schema not in op.allowed_data_schemas.get(event.event_type.value, frozenset()):
            raise invalid(
                "DATA_SCHEMA_NOT_ALLOWED",
                f"data.schema {event.data.schema} is not allowed for {op.operation_code} {event.event_type}",
            )
        errors = validate_data(event.data.schema, event.data.value)
        if errors:
            raise invalid("DATA_INVALID", f"data.value does not match {event.data.schema}", errors[:10])
    if event.event_type is not EventType.STEP_HEARTBEAT:
        _status(defs, event.business_status, EVENT_LIFECYCLE[event.event_type])


def _attempt_check(current: int, reported: int, what: str) -> Stale | None:
    if reported < current:
        return Stale(f"STALE_{what}_ATTEMPT")
    if reported > current:
        raise conflict("UNKNOWN_ATTEMPT", f"{what.lower()} attempt {reported} has not been created")
    return None


def task_health(steps: Mapping[str, StepState], ops: OperationDefinitionSet) -> Health:
    """STALE when a running step is stale; DEGRADED when an optional step failed (seed §4.3, §4.4)."""
    degraded = False
    for s in steps.values():
        if s.health is Health.STALE and s.lifecycle not in TERMINAL:
            return Health.STALE
        op = ops.operations.get(s.operation_code)
        if (
            s.lifecycle is Lifecycle.FAILED
            and op is not None
            and op.failure_policy is FailurePolicy.CONTINUE_WITH_WARNING
        ):
            degraded = True
    return Health.DEGRADED if degraded else Health.HEALTHY


def apply_step_event(
    task: TaskState, steps: Mapping[str, StepState], event: Event, defs: TaskDefinitions, now: datetime
) -> Outcome:
    """Apply an authorized, registered step event to the current attempt of its step.

    ``steps`` maps stepId to the step's current (highest) attempt. Older attempts and sourceSeq values
    that are not greater than the step's are :class:`Stale`; sourceSeq is compared per step attempt
    only, so two services' counters never interfere (seed §3.4).

    Raises:
        DomainError: CONFLICT ``UNKNOWN_ATTEMPT``, ``TASK_TERMINAL``, ``INVALID_TRANSITION``.
    """
    step = steps[event.step_id or ""]
    stale = _attempt_check(task.attempt, event.task_attempt, "TASK") or _attempt_check(
        step.attempt, event.step_attempt or 0, "STEP"
    )
    if stale is not None:
        return stale
    if event.event_type is EventType.STEP_HEARTBEAT:
        if step.lifecycle in TERMINAL or task.lifecycle in TERMINAL:
            return Stale("STEP_TERMINAL")
        return Heartbeat(replace(step, last_heartbeat_at=now))
    if event.source_seq <= step.source_seq:
        return Stale("STALE_SOURCE_SEQ")
    if task.lifecycle in TERMINAL:
        raise conflict("TASK_TERMINAL", f"task is {task.lifecycle}; terminal states never regress")
    target = EVENT_LIFECYCLE[event.event_type]
    if target not in TRANSITIONS[step.lifecycle]:
        raise conflict("INVALID_TRANSITION", f"step {step.step_id} cannot go {step.lifecycle} -> {target}")
    sdef = defs.statuses.statuses[event.business_status or ""]
    if (
        sdef.allowed_from
        and step.business_status not in sdef.allowed_from
        and step.business_status != sdef.code
    ):
        raise conflict("INVALID_TRANSITION", f"{sdef.code} is not allowed after {step.business_status}")

    started_at = step.started_at or now
    finished_at = step.finished_at
    duration_ms, duration_source = step.duration_ms, step.duration_source
    if target in TERMINAL:
        finished_at = now
        if event.duration_ms is not None:
            # The worker's monotonic measurement wins over any cross-machine difference (seed §3.7).
            duration_ms = event.duration_ms
            duration_source = event.duration_source or DurationSource.MONOTONIC
        else:
            duration_ms = ms_between(started_at, now)
            duration_source = DurationSource.WALL_CLOCK_ESTIMATE
    new_step = replace(
        step,
        source_seq=event.source_seq,
        version=step.version + 1,
        lifecycle=target,
        business_status=sdef.code,
        health=Health.HEALTHY,
        last_heartbeat_at=now,
        started_at=started_at,
        finished_at=finished_at,
        duration_ms=duration_ms,
        duration_source=duration_source,
        progress=event.progress if event.progress is not None else step.progress,
        data=event.data if event.data is not None else step.data,
        error=event.error if target is Lifecycle.FAILED else None,
        updated_at=now,
    )
    new_steps = {**steps, new_step.step_id: new_step}
    business = sdef.code
    op = defs.operations.operations[new_step.operation_code]
    if (
        target is Lifecycle.FAILED
        and op.failure_policy is FailurePolicy.WAIT_FOR_USER
        and WAITING_USER_ACTION in defs.statuses.statuses
    ):
        business = WAITING_USER_ACTION
    new_task = replace(
        task,
        # The first step activity moves the task to RUNNING; success is never inferred (seed §3.9).
        lifecycle=Lifecycle.RUNNING,
        business_status=business,
        started_at=task.started_at or now,
        version=task.version + 1,
        health=task_health(new_steps, defs.operations),
        updated_at=now,
    )
    return Applied(new_task, new_step)


def apply_task_event(
    task: TaskState,
    steps: Mapping[str, StepState],
    event: Event,
    defs: TaskDefinitions,
    now: datetime,
    last_source_seq: int,
) -> Outcome:
    """Apply TASK_COMPLETED / TASK_FAILED / TASK_CANCELLED from an authorized coordinator or policy executor.

    ``last_source_seq`` is the highest sourceSeq already accepted from this producer for this task attempt.

    Raises:
        DomainError: CONFLICT ``UNKNOWN_ATTEMPT``, ``TASK_TERMINAL``, ``INVALID_TRANSITION`` (the registry's
            ``allowedFrom`` of the new businessStatus); INVALID ``UNKNOWN_STEP``.
    """
    stale = _attempt_check(task.attempt, event.task_attempt, "TASK")
    if stale is not None:
        return stale
    if event.source_seq <= last_source_seq:
        return Stale("STALE_SOURCE_SEQ")
    if task.lifecycle in TERMINAL:
        raise conflict("TASK_TERMINAL", f"task is {task.lifecycle}; terminal states never regress")
    target = EVENT_LIFECYCLE[event.event_type]
    sdef = defs.statuses.statuses.get(event.business_status or "")
    if sdef is not None and sdef.allowed_from and task.business_status not in sdef.allowed_from | {sdef.code}:
        # The registry's allowedFrom binds the task's own status as it binds a step's (seed §4.6).
        raise conflict("INVALID_TRANSITION", f"{sdef.code} is not allowed after {task.business_status}")
    if event.failed_step_id is not None and event.failed_step_id not in steps:
        raise invalid("UNKNOWN_STEP", f"failedStepId {event.failed_step_id} is not a step of this task")
    duration_ms: int | None
    if event.duration_ms is not None:
        duration_ms, source = event.duration_ms, event.duration_source or DurationSource.MONOTONIC
    else:
        duration_ms, source = ms_between(task.created_at, now), DurationSource.WALL_CLOCK_ESTIMATE
    failed = target is Lifecycle.FAILED
    new_task = replace(
        task,
        lifecycle=target,
        business_status=event.business_status or task.business_status,
        coordinator_source_seq=max(task.coordinator_source_seq, event.source_seq),
        version=task.version + 1,
        finished_at=now,
        duration_ms=duration_ms,
        duration_source=source,
        failure_code=event.error.code if failed and event.error else None,
        failure_message=event.error.user_message if failed and event.error else None,
        failed_step_id=event.failed_step_id if failed else None,
        updated_at=now,
    )
    return Applied(new_task, None)


def change_step_health(
    task: TaskState,
    steps: Mapping[str, StepState],
    step_id: str,
    attempt: int,
    wanted: Health,
    cutoff: datetime,
    ops: OperationDefinitionSet,
    now: datetime,
) -> Applied | None:
    """STEP_HEALTH_CHANGED from the reconciler (seed §4.3): health only, never the lifecycle (STALE
    is not FAILED). ``cutoff``: liveness older than this is stale.

    None when the change no longer applies: the task is terminal (only an audited admin correction
    changes a terminal task, seed §4.2), the step moved to another attempt or out of RUNNING, it
    already has ``wanted`` health, or its liveness no longer matches ``wanted``.
    """
    step = steps.get(step_id)
    if task.lifecycle in TERMINAL or step is None or step.attempt != attempt:
        return None
    if step.lifecycle is not Lifecycle.RUNNING or step.health is wanted:
        return None
    alive = step.last_heartbeat_at or step.started_at or step.created_at
    if (wanted is Health.STALE) != (alive < cutoff):
        return None
    new = replace(step, health=wanted, version=step.version + 1, updated_at=now)
    new_steps = {**steps, step_id: new}
    new_task = replace(task, health=task_health(new_steps, ops), version=task.version + 1, updated_at=now)
    return Applied(new_task, new)


def new_step_attempt(
    task: TaskState, steps: Mapping[str, StepState], step_id: str, defs: TaskDefinitions, now: datetime
) -> Applied:
    """A retry: the coordinator opens attempt n+1 of a step whose attempt n is terminal (seed §4.1).

    The step version keeps counting per (task, step) across attempts.

    Raises:
        DomainError: NOT_FOUND ``STEP_NOT_FOUND``; CONFLICT ``TASK_TERMINAL``, ``ATTEMPT_IN_PROGRESS``,
            ``ATTEMPTS_EXHAUSTED``.
    """
    prev = steps.get(step_id)
    if prev is None:
        raise DomainError(ErrorKind.NOT_FOUND, "STEP_NOT_FOUND", "step not found")
    if task.lifecycle in TERMINAL:
        raise conflict("TASK_TERMINAL", "task is terminal")
    if prev.lifecycle not in TERMINAL:
        raise conflict("ATTEMPT_IN_PROGRESS", f"attempt {prev.attempt} of {step_id} is {prev.lifecycle}")
    op = defs.operations.operations[prev.operation_code]
    if prev.attempt + 1 > op.max_attempts:
        raise conflict("ATTEMPTS_EXHAUSTED", f"{op.operation_code} allows {op.max_attempts} attempts")
    step = StepState(
        task_id=task.id,
        step_id=step_id,
        attempt=prev.attempt + 1,
        operation_code=prev.operation_code,
        producer_id=prev.producer_id,
        source_seq=0,
        version=prev.version + 1,
        lifecycle=Lifecycle.PENDING,
        business_status=defs.statuses.initial_code(),
        health=Health.HEALTHY,
        created_at=now,
        updated_at=now,
    )
    new_steps = {**steps, step_id: step}
    new_task = replace(
        task, version=task.version + 1, health=task_health(new_steps, defs.operations), updated_at=now
    )
    return Applied(new_task, step)


def admin_correct(
    task: TaskState,
    steps: Mapping[str, StepState],
    step_id: str | None,
    business_status: str,
    health: Health | None,
    defs: TaskDefinitions,
    now: datetime,
) -> Applied:
    """An operator's correction (seed §4.2): may leave a terminal state; produces a new version.

    The lifecycle still comes from the registry entry of ``business_status``.

    Raises:
        DomainError: INVALID ``UNKNOWN_BUSINESS_STATUS``; NOT_FOUND ``STEP_NOT_FOUND``.
    """
    sdef = defs.statuses.statuses.get(business_status)
    if sdef is None or not sdef.enabled:
        raise invalid("UNKNOWN_BUSINESS_STATUS", f"businessStatus {business_status!r} is not registered")
    terminal = sdef.lifecycle in TERMINAL
    if step_id is not None:
        prev = steps.get(step_id)
        if prev is None:
            raise DomainError(ErrorKind.NOT_FOUND, "STEP_NOT_FOUND", "step not found")
        step = replace(
            prev,
            lifecycle=sdef.lifecycle,
            business_status=sdef.code,
            health=health or prev.health,
            finished_at=(prev.finished_at or now) if terminal else None,
            version=prev.version + 1,
            updated_at=now,
        )
        new_steps = {**steps, step_id: step}
        new_task = replace(
            task, version=task.version + 1, health=task_health(new_steps, defs.operations), updated_at=now
        )
        return Applied(new_task, step)
    new_task = replace(
        task,
        lifecycle=sdef.lifecycle,
        business_status=sdef.code,
        health=health or task.health,
        finished_at=(task.finished_at or now) if terminal else None,
        duration_ms=(task.duration_ms if task.finished_at else ms_between(task.created_at, now))
        if terminal
        else None,
        duration_source=(task.duration_source or DurationSource.WALL_CLOCK_ESTIMATE) if terminal else None,
        failure_code=task.failure_code if sdef.lifecycle is Lifecycle.FAILED else None,
        failure_message=task.failure_message if sdef.lifecycle is Lifecycle.FAILED else None,
        failed_step_id=task.failed_step_id if sdef.lifecycle is Lifecycle.FAILED else None,
        version=task.version + 1,
        updated_at=now,
    )
    return Applied(new_task, None)
