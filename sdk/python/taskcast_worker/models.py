"""Values the SDK hands around: execution contexts, step specs, structured errors, event results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """What the Status API issues for one step attempt (seed §3.3): hand it to the step's worker."""

    task_id: str
    task_type: str
    task_attempt: int
    step_id: str
    operation_code: str
    step_attempt: int
    producer_id: str
    allowed_event_types: frozenset[str]
    execution_token: str
    expires_at: str
    expires_in_seconds: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ExecutionContext:
        return cls(
            task_id=str(d["taskId"]),
            task_type=str(d["taskType"]),
            task_attempt=int(d["taskAttempt"]),
            step_id=str(d["stepId"]),
            operation_code=str(d["operationCode"]),
            step_attempt=int(d["stepAttempt"]),
            producer_id=str(d["producerId"]),
            allowed_event_types=frozenset(d.get("allowedEventTypes", ())),
            execution_token=str(d["executionToken"]),
            expires_at=str(d["expiresAt"]),
            expires_in_seconds=float(d["expiresInSeconds"]) if "expiresInSeconds" in d else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The wire shape (to pass a context to another process, e.g. through a job queue)."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "taskType": self.task_type,
            "taskAttempt": self.task_attempt,
            "stepId": self.step_id,
            "operationCode": self.operation_code,
            "stepAttempt": self.step_attempt,
            "producerId": self.producer_id,
            "allowedEventTypes": sorted(self.allowed_event_types),
            "executionToken": self.execution_token,
            "expiresAt": self.expires_at,
        }
        if self.expires_in_seconds is not None:
            out["expiresInSeconds"] = self.expires_in_seconds
        return out


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step of a task to create: which operation, run by which producer (seed §3.1)."""

    step_id: str
    operation_code: str
    producer_id: str

    def to_json(self) -> dict[str, str]:
        return {"stepId": self.step_id, "operationCode": self.operation_code, "producerId": self.producer_id}


@dataclass(frozen=True, slots=True)
class StepError:
    """A structured failure (seed §4.4): ``code`` machine-readable, ``user_message`` safe to show,
    ``diagnostics_ref`` server-side only (never projected to clients)."""

    category: str
    code: str
    retryable: bool
    user_message: str = ""
    diagnostics_ref: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"category": self.category, "code": self.code, "retryable": self.retryable}
        if self.user_message:
            out["userMessage"] = self.user_message
        if self.diagnostics_ref:
            out["diagnosticsRef"] = self.diagnostics_ref
        return out


@dataclass(frozen=True, slots=True)
class EventResult:
    """The Status API's answer to one event (versions as strings, seed §8.1)."""

    accepted: bool
    duplicate: bool
    stale: bool
    task_version: str
    lifecycle_status: str
    business_status: str
    step_version: str | None = None
    step_lifecycle_status: str | None = None
    stale_reason: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EventResult:
        return cls(
            accepted=bool(d["accepted"]),
            duplicate=bool(d["duplicate"]),
            stale=bool(d["stale"]),
            task_version=str(d["taskVersion"]),
            lifecycle_status=str(d["lifecycleStatus"]),
            business_status=str(d["businessStatus"]),
            step_version=d.get("stepVersion"),
            step_lifecycle_status=d.get("stepLifecycleStatus"),
            stale_reason=d.get("staleReason"),
            raw=dict(d),
        )


@dataclass(frozen=True, slots=True)
class CreatedTask:
    """A created task (or a new task attempt): its id, attempt, version and one context per step."""

    task_id: str
    task_attempt: int
    task_version: str
    steps: Mapping[str, ExecutionContext]
    duplicate: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CreatedTask:
        steps = {c["stepId"]: ExecutionContext.from_json(c) for c in d["steps"]}
        attempt = int(d.get("taskAttempt") or next(iter(steps.values())).task_attempt if steps else 1)
        return cls(str(d["taskId"]), attempt, str(d["taskVersion"]), steps, bool(d.get("duplicate", False)))
