"""Projections (seed §3.3.1, §6.1, §6.2, §6.6, §6.8): current state -> channel payloads and notices.

Each builder lists its fields explicitly; that list *is* the projection's whitelist, mirrored by
``additionalProperties: false`` in ``schema/json/task-{summary,detail,project}.schema.json``. Payloads
are complete current state with a version, never diffs, and are built from validated stored state,
never from a worker's raw JSON. ``diagnosticsRef`` is never projected.

A :class:`Projection` is one enum member carrying its payload ``kind`` and channel ``namespace``;
:func:`project` returns a version's payloads per channel and whether they are urgent (a notice or a
terminal state). Turning them into outbox rows (and priorities) is the service's job: this module
must not import storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from status_api.domain.model import (
    JSON,
    TERMINAL,
    DataBody,
    ErrorInfo,
    EventType,
    FailurePolicy,
    Health,
    Lifecycle,
    StepState,
    TaskState,
    ms_between,
)
from status_api.domain.registry import OperationDefinitionSet, StatusDefinitionSet


class Projection(Enum):
    """A projection (seed §6.1, §6.2, §6.6): its name is what the outbox stores; the value carries
    the payload ``kind`` and the channel ``namespace`` (``{namespace}:{tenant}/{key}``)."""

    USER_SUMMARY = ("task.summary", "task_user")
    TASK_DETAIL = ("task.detail", "task_detail")
    PROJECT_BROADCAST = ("task.project", "task_project")

    @property
    def kind(self) -> str:
        return self.value[0]

    @property
    def namespace(self) -> str:
        return self.value[1]

    def channel(self, tenant_id: str, key: str) -> str:
        return f"{self.namespace}:{tenant_id}/{key}"


#: Naive timestamp -> its :func:`iso` text. One event formats the same few instants a dozen times
#: (the commit time as ``committedAt``/``asOf`` in both payloads and the answer, the task's
#: ``createdAt``/``startedAt``, its steps' times, again for the next event of the task); bounded.
_ISO: dict[datetime, str] = {}
_ISO_MAX = 4096


def iso(ts: datetime | None) -> str | None:
    """``2026-09-21T07:10:18.156Z`` (UTC, milliseconds)."""
    if ts is None:
        return None
    if ts.tzinfo is None:  # aware values equal across zones print differently: never cached
        text = _ISO.get(ts)
        if text is None:
            if len(_ISO) >= _ISO_MAX:
                _ISO.clear()
            text = _ISO[ts] = ts.isoformat(timespec="milliseconds") + "Z"
        return text
    # isoformat is a C fast path (strftime was 2 % of an ingest worker's CPU); the wall-clock fields
    # of the value as given, as strftime printed them, whatever its tzinfo
    return ts.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def user_channel(tenant_id: str, user_id: str) -> str:
    return Projection.USER_SUMMARY.channel(tenant_id, user_id)


def detail_channel(tenant_id: str, task_id: str) -> str:
    return Projection.TASK_DETAIL.channel(tenant_id, task_id)


def project_channel(tenant_id: str, project_id: str) -> str:
    return Projection.PROJECT_BROADCAST.channel(tenant_id, project_id)


@dataclass(frozen=True, slots=True)
class Trigger:
    """The event that produced a version, as TASK_DETAIL shows it (``triggerEvent``)."""

    event_id: str
    event_type: EventType
    committed_at: datetime
    step_id: str | None = None
    operation_code: str | None = None
    step_attempt: int | None = None
    step_version: int | None = None
    duration_ms: int | None = None
    data: DataBody | None = None
    error: ErrorInfo | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "eventId": self.event_id,
            "eventType": self.event_type.value,
            "stepId": self.step_id,
            "operationCode": self.operation_code,
            "stepAttempt": self.step_attempt,
            "stepVersion": str(self.step_version) if self.step_version is not None else None,
            "durationMs": self.duration_ms,
            "data": self.data.to_json() if self.data else None,
            "error": self.error.public_json() if self.error else None,
            "committedAt": iso(self.committed_at),
        }


@dataclass(frozen=True, slots=True)
class ChannelPayload:
    """One projection's payload for one channel."""

    projection: Projection
    channel: str
    payload: dict[str, JSON]


@dataclass(frozen=True, slots=True)
class Projected:
    """What one task version publishes. ``urgent``: a notice, a terminal state or a new attempt,
    which the relay sends first and never supersedes, nor the gateway conflates (seed §13.3)."""

    payloads: tuple[ChannelPayload, ...]
    urgent: bool


def _elapsed(started: datetime | None, finished: datetime | None, as_of: datetime) -> int | None:
    return ms_between(started, finished or as_of) if started else None


def _current_step(steps: Mapping[str, StepState]) -> StepState | None:
    running = [s for s in steps.values() if s.lifecycle is Lifecycle.RUNNING]
    return max(running, key=lambda s: (s.updated_at, s.step_id)) if running else None


def summary_data(
    task: TaskState, steps: Mapping[str, StepState], ops: OperationDefinitionSet
) -> DataBody | None:
    """The task's summaryData, or else the newest step data cut to its registered ``summaryFields``."""
    if task.summary is not None:
        return task.summary
    best: tuple[datetime, DataBody] | None = None
    for s in steps.values():
        op = ops.operations.get(s.operation_code)
        if s.data is None or op is None or s.data.schema not in op.summary_fields:
            continue
        fields = op.summary_fields[s.data.schema]
        body = DataBody(s.data.schema, {k: s.data.value[k] for k in fields if k in s.data.value})
        if best is None or s.updated_at > best[0]:
            best = (s.updated_at, body)
    return best[1] if best else None


def status_display(statuses: StatusDefinitionSet | None, code: str | None) -> dict[str, JSON] | None:
    """How the task's registered status definition presents ``code`` (seed §4.6): ``{name,
    severity, presentation}``; None when unknown (clients fall back to the code)."""
    sdef = statuses.statuses.get(code or "") if statuses is not None else None
    if sdef is None:
        return None
    return {
        "name": sdef.display_name,
        "severity": sdef.severity,
        "presentation": dict(sdef.presentation) if sdef.presentation else None,
    }


def _op_name(ops: OperationDefinitionSet | None, code: str) -> str | None:
    op = ops.operations.get(code) if ops is not None else None
    return op.display_name if op is not None else None


def summary_task(
    task: TaskState,
    steps: Mapping[str, StepState],
    ops: OperationDefinitionSet,
    as_of: datetime,
    statuses: StatusDefinitionSet | None = None,
) -> dict[str, JSON]:
    current = _current_step(steps)
    data = summary_data(task, steps, ops)
    return {
        "id": task.id,
        "projectId": task.project_id,
        "product": task.product,
        "taskType": task.task_type,
        "title": task.title,
        "lifecycleStatus": task.lifecycle.value,
        "businessStatus": task.business_status,
        "businessStatusDisplay": status_display(statuses, task.business_status),
        "health": task.health.value,
        "version": str(task.version),
        "taskAttempt": task.attempt,
        "createdAt": iso(task.created_at),
        "startedAt": iso(task.started_at),
        "finishedAt": iso(task.finished_at),
        "elapsedMs": _elapsed(task.started_at, task.finished_at, as_of),
        "durationMs": task.duration_ms,
        "asOf": iso(as_of),
        "currentOperation": (
            {
                "stepId": current.step_id,
                "operationCode": current.operation_code,
                "displayName": _op_name(ops, current.operation_code),
                "progress": current.progress.to_json() if current.progress else None,
            }
            if current
            else None
        ),
        "failedStepId": task.failed_step_id,
        "failureCode": task.failure_code,
        "failureMessage": task.failure_message,
        "summaryData": data.to_json() if data else None,
    }


def summary_message(
    task: TaskState,
    steps: Mapping[str, StepState],
    ops: OperationDefinitionSet,
    as_of: datetime,
    notice: dict[str, JSON] | None = None,
    statuses: StatusDefinitionSet | None = None,
) -> dict[str, JSON]:
    msg: dict[str, JSON] = {
        "kind": Projection.USER_SUMMARY.kind,
        "schemaVersion": 1,
        "task": summary_task(task, steps, ops, as_of, statuses),
    }
    if notice is not None:
        msg["notice"] = notice
    return msg


def step_json(
    task: TaskState,
    s: StepState,
    ops: OperationDefinitionSet | None = None,
    statuses: StatusDefinitionSet | None = None,
) -> dict[str, JSON]:
    return {
        "id": s.step_id,
        "operationCode": s.operation_code,
        "displayName": _op_name(ops, s.operation_code),
        "attempt": s.attempt,
        "version": str(s.version),
        "lifecycleStatus": s.lifecycle.value,
        "businessStatus": s.business_status,
        "businessStatusDisplay": status_display(statuses, s.business_status),
        "health": s.health.value,
        "lastHeartbeatAt": iso(s.last_heartbeat_at),
        "startedAt": iso(s.started_at),
        "finishedAt": iso(s.finished_at),
        "durationMs": s.duration_ms,
        "durationSource": s.duration_source.value if s.duration_source else None,
        "queueDurationMs": ms_between(s.created_at, s.started_at),
        "progress": s.progress.to_json() if s.progress else None,
        "data": s.data.to_json() if s.data else None,
        "error": s.error.public_json() if s.error else None,
    }


def detail_message(
    task: TaskState,
    steps: Mapping[str, StepState],
    as_of: datetime,
    trigger: Trigger | None,
    ops: OperationDefinitionSet | None = None,
    statuses: StatusDefinitionSet | None = None,
) -> dict[str, JSON]:
    """TASK_DETAIL payload; also the snapshot shape of ``GET /api/tasks/{id}`` (trigger None).
    With the task's definition sets, codes carry their registered display names (seed §4.6)."""
    total = ms_between(task.created_at, task.finished_at) if task.finished_at else None
    return {
        "kind": Projection.TASK_DETAIL.kind,
        "schemaVersion": 1,
        "taskId": task.id,
        "version": str(task.version),
        "taskVersion": str(task.version),
        "projectId": task.project_id,
        "product": task.product,
        "taskType": task.task_type,
        "title": task.title,
        "statusDefinitionVersion": task.status_definition_version,
        "operationDefinitionVersion": task.operation_definition_version,
        "taskAttempt": task.attempt,
        "lifecycleStatus": task.lifecycle.value,
        "businessStatus": task.business_status,
        "businessStatusDisplay": status_display(statuses, task.business_status),
        "health": task.health.value,
        "createdAt": iso(task.created_at),
        "startedAt": iso(task.started_at),
        "finishedAt": iso(task.finished_at),
        "asOf": iso(as_of),
        "failedStepId": task.failed_step_id,
        "failureCode": task.failure_code,
        "failureMessage": task.failure_message,
        "durations": {
            "queueMs": ms_between(task.created_at, task.started_at),
            "runMs": task.duration_ms,
            "totalMs": total,
            "elapsedMs": _elapsed(task.started_at, task.finished_at, as_of),
            "durationSource": task.duration_source.value if task.duration_source else None,
        },
        "steps": [step_json(task, s, ops, statuses) for s in sorted(steps.values(), key=lambda s: s.step_id)],
        "triggerEvent": trigger.to_json() if trigger else None,
    }


def project_message(task: TaskState, steps: Mapping[str, StepState]) -> dict[str, JSON]:
    """PROJECT_BROADCAST: aggregates only (no title, owner, data, errors, references)."""
    return {
        "kind": Projection.PROJECT_BROADCAST.kind,
        "schemaVersion": 1,
        "task": {
            "id": task.id,
            "product": task.product,
            "taskType": task.task_type,
            "lifecycleStatus": task.lifecycle.value,
            "health": task.health.value,
            "version": str(task.version),
            "createdAt": iso(task.created_at),
            "startedAt": iso(task.started_at),
            "finishedAt": iso(task.finished_at),
            "stepsTotal": len(steps),
            "stepsSucceeded": sum(1 for s in steps.values() if s.lifecycle is Lifecycle.SUCCEEDED),
            "stepsFailed": sum(1 for s in steps.values() if s.lifecycle is Lifecycle.FAILED),
        },
    }


def notice_for(
    before: TaskState,
    after: TaskState,
    step: StepState | None,
    trigger: Trigger,
    ops: OperationDefinitionSet,
) -> dict[str, JSON] | None:
    """The USER_SUMMARY notice for failures, needs-action, staleness and terminal states (seed §6.8).

    Its id is ``{taskId}:{version}`` so clients de-duplicate notices separately from state (seed §8.5).
    """
    nid = f"{after.id}:{after.version}"
    if after.lifecycle in TERMINAL and before.lifecycle not in TERMINAL:
        kind = {
            Lifecycle.SUCCEEDED: ("TASK_SUCCEEDED", "INFO", "completed"),
            Lifecycle.FAILED: ("TASK_FAILED", "ERROR", "failed"),
            Lifecycle.CANCELLED: ("TASK_CANCELLED", "WARNING", "was cancelled"),
        }[after.lifecycle]
        failed = after.lifecycle is Lifecycle.FAILED
        out: dict[str, JSON] = {
            "id": nid,
            "type": kind[0],
            "level": kind[1],
            "title": f"{after.title} {kind[2]}"[:300],
            "message": (after.failure_message or "") if failed else "",
            "requiresAction": failed,
        }
        if failed:
            if after.failure_code:
                out["errorCode"] = after.failure_code
            if after.failed_step_id:
                out["stepId"] = after.failed_step_id
            if trigger.error is not None:
                out["retryable"] = trigger.error.retryable
            out["actions"] = ["VIEW_DETAILS"]
        return out
    if step is not None and trigger.event_type is EventType.STEP_FAILED and step.error is not None:
        op = ops.operations.get(step.operation_code)
        policy = op.failure_policy if op else FailurePolicy.FAIL_TASK
        retrying = (
            policy is FailurePolicy.RETRY_THEN_FAIL_TASK
            and step.error.retryable
            and op is not None
            and step.attempt < op.max_attempts
        )
        kind2 = {
            FailurePolicy.WAIT_FOR_USER: ("NEEDS_ACTION", "WARNING", "needs your action"),
            FailurePolicy.CONTINUE_WITH_WARNING: ("TASK_DEGRADED", "WARNING", "continues with a warning"),
        }.get(
            policy,
            ("STEP_RETRYING", "WARNING", "step failed, retrying")
            if retrying
            else ("STEP_FAILED", "ERROR", "step failed"),
        )
        return {
            "id": nid,
            "type": kind2[0],
            "level": kind2[1],
            "title": f"{after.title}: {kind2[2]}"[:300],
            "message": step.error.user_message,
            "stepId": step.step_id,
            "operationCode": step.operation_code,
            "errorCode": step.error.code,
            "retryable": step.error.retryable,
            "requiresAction": policy is FailurePolicy.WAIT_FOR_USER,
            "actions": ["VIEW_DETAILS"],
        }
    if after.health is Health.STALE and before.health is not Health.STALE:
        return {
            "id": nid,
            "type": "TASK_STALE",
            "level": "WARNING",
            "title": f"{after.title}: status cannot be confirmed right now"[:300],
            "message": "The task is still running; its executor has not reported for a while.",
            "requiresAction": False,
        }
    return None


NEVER_SUPERSEDED_EVENTS = frozenset({EventType.STEP_ATTEMPT_CREATED})
"""Events whose version is urgent whatever its state (seed §13.3: new attempts). A new task's
first version is never superseded either, by its own priority (``NEW_AGGREGATE``, outbox.py)."""


def project(
    before: TaskState,
    after: TaskState,
    steps: Mapping[str, StepState],
    step: StepState | None,
    trigger: Trigger,
    ops: OperationDefinitionSet,
    statuses: StatusDefinitionSet | None = None,
) -> Projected:
    """One payload per projection channel for the version ``after.version`` (seed §5.1);
    ``statuses`` adds the registered display names (seed §4.6)."""
    notice = notice_for(before, after, step, trigger, ops)
    as_of = trigger.committed_at
    out = [
        ChannelPayload(
            Projection.USER_SUMMARY,
            user_channel(after.tenant_id, after.owner_id),
            summary_message(after, steps, ops, as_of, notice, statuses),
        ),
        ChannelPayload(
            Projection.TASK_DETAIL,
            detail_channel(after.tenant_id, after.id),
            detail_message(after, steps, as_of, trigger, ops, statuses),
        ),
    ]
    if after.project_id:
        out.append(
            ChannelPayload(
                Projection.PROJECT_BROADCAST,
                project_channel(after.tenant_id, after.project_id),
                project_message(after, steps),
            )
        )
    # Seed §13.3: a notice, a terminal state and a new attempt are never superseded (relay) or
    # conflated (gateway).
    urgent = (
        notice is not None
        or after.lifecycle in TERMINAL
        or after.attempt != before.attempt
        or trigger.event_type in NEVER_SUPERSEDED_EVENTS
    )
    return Projected(tuple(out), urgent)
