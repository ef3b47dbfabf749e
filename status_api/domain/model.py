"""Value types of the task-status domain (seed §3.3, §3.5, §4, §5).

Versions are ints here and decimal strings on the wire (seed §8.1). Datetimes are naive UTC with
millisecond precision, as stored in ``DATETIME(3)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

JSON = Any


class Lifecycle(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL: frozenset[Lifecycle] = frozenset({Lifecycle.SUCCEEDED, Lifecycle.FAILED, Lifecycle.CANCELLED})

#: Allowed lifecycle moves within one attempt (seed §4.2): terminal states never regress.
TRANSITIONS: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.PENDING: frozenset(
        {Lifecycle.RUNNING, Lifecycle.SUCCEEDED, Lifecycle.FAILED, Lifecycle.CANCELLED}
    ),
    Lifecycle.RUNNING: frozenset(
        {Lifecycle.RUNNING, Lifecycle.SUCCEEDED, Lifecycle.FAILED, Lifecycle.CANCELLED}
    ),
    Lifecycle.SUCCEEDED: frozenset(),
    Lifecycle.FAILED: frozenset(),
    Lifecycle.CANCELLED: frozenset(),
}


class Health(StrEnum):
    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    STALE = "STALE"


class EventType(StrEnum):
    TASK_CREATED = "TASK_CREATED"
    STEP_ATTEMPT_CREATED = "STEP_ATTEMPT_CREATED"
    TASK_ATTEMPT_CREATED = "TASK_ATTEMPT_CREATED"
    STEP_STARTED = "STEP_STARTED"
    STEP_PROGRESS = "STEP_PROGRESS"
    STEP_COMPLETED = "STEP_COMPLETED"
    STEP_FAILED = "STEP_FAILED"
    STEP_HEARTBEAT = "STEP_HEARTBEAT"
    STEP_HEALTH_CHANGED = "STEP_HEALTH_CHANGED"
    TASK_COMPLETED = "TASK_COMPLETED"
    TASK_FAILED = "TASK_FAILED"
    TASK_CANCELLED = "TASK_CANCELLED"
    ADMIN_CORRECTION = "ADMIN_CORRECTION"


STEP_REPORTED: frozenset[EventType] = frozenset(
    {
        EventType.STEP_STARTED,
        EventType.STEP_PROGRESS,
        EventType.STEP_COMPLETED,
        EventType.STEP_FAILED,
        EventType.STEP_HEARTBEAT,
    }
)

#: The lifecycle each reported event type moves its subject to (seed §3.5 table).
EVENT_LIFECYCLE: dict[EventType, Lifecycle] = {
    EventType.STEP_STARTED: Lifecycle.RUNNING,
    EventType.STEP_PROGRESS: Lifecycle.RUNNING,
    EventType.STEP_COMPLETED: Lifecycle.SUCCEEDED,
    EventType.STEP_FAILED: Lifecycle.FAILED,
    EventType.TASK_COMPLETED: Lifecycle.SUCCEEDED,
    EventType.TASK_FAILED: Lifecycle.FAILED,
    EventType.TASK_CANCELLED: Lifecycle.CANCELLED,
}


class FailurePolicy(StrEnum):
    FAIL_TASK = "FAIL_TASK"
    RETRY_THEN_FAIL_TASK = "RETRY_THEN_FAIL_TASK"
    CONTINUE_WITH_WARNING = "CONTINUE_WITH_WARNING"
    WAIT_FOR_USER = "WAIT_FOR_USER"


class DurationSource(StrEnum):
    MONOTONIC = "MONOTONIC"
    WALL_CLOCK_ESTIMATE = "WALL_CLOCK_ESTIMATE"


class Role(StrEnum):
    """Roles of a service identity (coordinator side)."""

    COORDINATOR = "coordinator"  # creates tasks and attempts, reports TASK_* events
    POLICY_EXECUTOR = "policy-executor"  # may report TASK_FAILED (seed §4.4)
    ADMIN = "admin"  # corrections and registry publication (seed §4.2)


WAITING_USER_ACTION = "WAITING_USER_ACTION"


@dataclass(frozen=True, slots=True)
class DataBody:
    schema: str
    value: Mapping[str, JSON]

    def to_json(self) -> dict[str, JSON]:
        return {"schema": self.schema, "value": dict(self.value)}


@dataclass(frozen=True, slots=True)
class Progress:
    current: float
    total: float | None = None
    unit: str | None = None

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"current": self.current}
        if self.total is not None:
            out["total"] = self.total
        if self.unit is not None:
            out["unit"] = self.unit
        return out


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A structured, already sanitized error (seed §4.4). ``diagnostics_ref`` is server-side only."""

    category: str
    code: str
    retryable: bool
    user_message: str
    diagnostics_ref: str | None = None

    def public_json(self) -> dict[str, JSON]:
        return {
            "category": self.category,
            "code": self.code,
            "retryable": self.retryable,
            "userMessage": self.user_message,
        }


@dataclass(frozen=True, slots=True)
class StepState:
    task_id: str
    step_id: str
    attempt: int
    operation_code: str
    producer_id: str
    source_seq: int
    version: int
    lifecycle: Lifecycle
    business_status: str
    health: Health
    created_at: datetime
    updated_at: datetime
    last_heartbeat_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    duration_source: DurationSource | None = None
    progress: Progress | None = None
    data: DataBody | None = None
    error: ErrorInfo | None = None


@dataclass(frozen=True, slots=True)
class TaskState:
    id: str
    tenant_id: str
    owner_id: str
    project_id: str | None
    product: str
    task_type: str
    title: str
    lifecycle: Lifecycle
    business_status: str
    status_definition_version: int
    operation_definition_version: int
    attempt: int
    coordinator_source_seq: int
    version: int
    health: Health
    created_at: datetime
    updated_at: datetime
    summary: DataBody | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    failed_step_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    duration_source: DurationSource | None = None
    #: The coordinator that created the task; only it reports TASK_* events and opens attempts
    #: (seed §3.5, §3.9). None on tasks created before the binding existed (any coordinator).
    coordinator_id: str | None = None
    #: When the task's latest STEP_PROGRESS version is due for publication; the task's next
    #: progress window starts there (``domain/progress_window.py``). None before its first progress.
    progress_due_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """A reported event after envelope validation (seed §3.5)."""

    event_id: str
    task_id: str
    task_type: str | None
    task_attempt: int
    step_id: str | None
    operation_code: str | None
    step_attempt: int | None
    producer_id: str
    source_seq: int
    event_type: EventType
    business_status: str | None
    #: The producer's wall clock (informational, seed §3.7); None when the body omits it.
    occurred_at: datetime | None
    duration_ms: int | None = None
    duration_source: DurationSource | None = None
    progress: Progress | None = None
    message: str | None = None
    failed_step_id: str | None = None
    data: DataBody | None = None
    error: ErrorInfo | None = None

    @property
    def is_step_event(self) -> bool:
        return self.event_type in STEP_REPORTED


@dataclass(frozen=True, slots=True)
class ExecutionGrant:
    """What an ``executionToken`` allows (seed §3.3): one step attempt of one task, one producer."""

    task_id: str
    step_id: str
    operation_code: str
    task_attempt: int
    step_attempt: int
    producer_id: str
    event_types: frozenset[str]


@dataclass(frozen=True, slots=True)
class ServiceIdentity:
    """A verified service credential (coordinator side). ``tenant_id`` None = not bound to a tenant."""

    producer_id: str
    roles: frozenset[str]
    tenant_id: str | None = None

    def serves(self, tenant_id: str) -> bool:
        """True when the credential may act for ``tenant_id``."""
        return self.tenant_id is None or self.tenant_id == tenant_id


@dataclass(frozen=True, slots=True)
class UserIdentity:
    """A verified end user: tenant and user from the identity provider's claims."""

    tenant_id: str
    user_id: str
    projects: frozenset[str] = frozenset()

    def can_view(self, task: TaskState) -> bool:
        """Owner, or member of the task's project, and always the same tenant (seed §7.2)."""
        if task.tenant_id != self.tenant_id:
            return False
        return task.owner_id == self.user_id or (
            task.project_id is not None and task.project_id in self.projects
        )


def ms_between(start: datetime | None, end: datetime | None) -> int | None:
    """Whole milliseconds from ``start`` to ``end``; None when either is unknown; never negative."""
    if start is None or end is None:
        return None
    return max(0, int((end - start).total_seconds() * 1000))
