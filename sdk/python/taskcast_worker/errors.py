"""Errors of the worker SDK: one exception class per coded refusal of the Status API.

::

    TaskcastError
    ├── TransportError          the Status API could not be reached within the retry budget
    └── Refused                 a coded 4xx/5xx answer: ``.code``, ``.status``, ``.retryable``, ``.details``
        ├── InvalidRequest (422)      UnknownBusinessStatus, DataInvalid, InvalidEvent, …
        ├── Unauthenticated (401)     ExecutionTokenExpired, InvalidServiceCredential, …
        ├── Forbidden (403)           TokenMismatch, CoordinatorMismatch, ExecutionTokenMaxLifetime, …
        ├── NotFound (404)            TaskNotFound, StepNotFound
        ├── Conflict (409)            TaskTerminal, InvalidTransition, AttemptInProgress, …
        ├── TooLarge (413)            DataTooLarge, BodyTooLarge
        ├── RateLimited (429)
        └── Unavailable (503)         StorageBusy, StorageUnavailable

An answer with a code this SDK does not know raises the class of its status (``.code`` still
carries it). Imports nothing of the server.
"""

from __future__ import annotations

from typing import Any


class TaskcastError(Exception):
    """Base class of every SDK error."""


class TransportError(TaskcastError):
    """The request could not be delivered (network errors, or 5xx/429 past the retry budget)."""


class Refused(TaskcastError):
    """A coded refusal: ``{"error": {"code", "message", "retryable", "details"?}}``."""

    status: int = 0
    code: str = ""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retryable: bool = False,
        details: Any = None,
    ) -> None:
        super().__init__(f"{code or self.code}: {message}")
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.retryable = retryable
        self.details = details


class InvalidRequest(Refused):
    status = 422


class Unauthenticated(Refused):
    status = 401


class Forbidden(Refused):
    status = 403


class NotFound(Refused):
    status = 404


class Conflict(Refused):
    status = 409


class TooLarge(Refused):
    status = 413


class RateLimited(Refused):
    status = 429
    code = "RATE_LIMITED"


class Unavailable(Refused):
    status = 503


_BY_STATUS: dict[int, type[Refused]] = {
    422: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    429: RateLimited,
    503: Unavailable,
}


class InvalidEvent(InvalidRequest):
    code = "INVALID_EVENT"


class InvalidJson(InvalidRequest):
    code = "INVALID_JSON"


class JsonTooDeep(InvalidRequest):
    code = "JSON_TOO_DEEP"


class NumberOutOfRange(InvalidRequest):
    code = "NUMBER_OUT_OF_RANGE"


class IdempotencyKeyMismatch(InvalidRequest):
    code = "IDEMPOTENCY_KEY_MISMATCH"


class InvalidIdempotencyKey(InvalidRequest):
    code = "INVALID_IDEMPOTENCY_KEY"


class UnknownOperation(InvalidRequest):
    code = "UNKNOWN_OPERATION"


class EventTypeNotAllowed(InvalidRequest):
    code = "EVENT_TYPE_NOT_ALLOWED"


class DataSchemaNotAllowed(InvalidRequest):
    code = "DATA_SCHEMA_NOT_ALLOWED"


class DataInvalid(InvalidRequest):
    code = "DATA_INVALID"


class DataNotAllowed(InvalidRequest):
    code = "DATA_NOT_ALLOWED"


class UnknownBusinessStatus(InvalidRequest):
    code = "UNKNOWN_BUSINESS_STATUS"


class BusinessStatusLifecycleMismatch(InvalidRequest):
    code = "BUSINESS_STATUS_LIFECYCLE_MISMATCH"


class UnknownStep(InvalidRequest):
    code = "UNKNOWN_STEP"


class UnknownDefinitionVersion(InvalidRequest):
    code = "UNKNOWN_DEFINITION_VERSION"


class DuplicateStep(InvalidRequest):
    code = "DUPLICATE_STEP"


class NoInitialStatus(InvalidRequest):
    code = "NO_INITIAL_STATUS"


class InvalidTask(InvalidRequest):
    code = "INVALID_TASK"


class RegistryInvalid(InvalidRequest):
    code = "REGISTRY_INVALID"


class UnknownDataSchema(InvalidRequest):
    code = "UNKNOWN_DATA_SCHEMA"


class InvalidCorrection(InvalidRequest):
    code = "INVALID_CORRECTION"


class InvalidQuery(InvalidRequest):
    code = "INVALID_QUERY"


class InvalidServiceCredential(Unauthenticated):
    code = "INVALID_SERVICE_CREDENTIAL"


class ExecutionTokenExpired(Unauthenticated):
    code = "EXECUTION_TOKEN_EXPIRED"


class InvalidUserToken(Unauthenticated):
    code = "INVALID_USER_TOKEN"


class InvalidExecutionToken(Unauthenticated):
    code = "INVALID_EXECUTION_TOKEN"


class TokenMismatch(Forbidden):
    code = "TOKEN_MISMATCH"


class StepDefinitionMismatch(Forbidden):
    code = "STEP_DEFINITION_MISMATCH"


class ExecutionTokenRequired(Forbidden):
    code = "EXECUTION_TOKEN_REQUIRED"


class ProducerMismatch(Forbidden):
    code = "PRODUCER_MISMATCH"


class ProducerNotAllowed(Forbidden):
    code = "PRODUCER_NOT_ALLOWED"


class RoleRequired(Forbidden):
    code = "ROLE_REQUIRED"


class TenantMismatch(Forbidden):
    code = "TENANT_MISMATCH"


class TenantRequired(InvalidRequest):
    """A tenant broadcast (``POST /admin/v1/broadcasts``) without a tenant."""

    code = "TENANT_REQUIRED"


class ProjectRequired(InvalidRequest):
    code = "PROJECT_REQUIRED"


class NotAProjectMember(Forbidden):
    code = "NOT_A_PROJECT_MEMBER"


class SystemScopeForbidden(Forbidden):
    """A tenant-bound credential broadcasting to every tenant."""

    code = "SYSTEM_SCOPE_FORBIDDEN"


class CoordinatorMismatch(Forbidden):
    code = "COORDINATOR_MISMATCH"


class ExecutionTokenMaxLifetime(Forbidden):
    code = "EXECUTION_TOKEN_MAX_LIFETIME"


class TaskNotFound(NotFound):
    code = "TASK_NOT_FOUND"


class StepNotFound(NotFound):
    code = "STEP_NOT_FOUND"


class EventIdConflict(Conflict):
    code = "EVENT_ID_CONFLICT"


class TaskExists(Conflict):
    code = "TASK_EXISTS"


class UnknownAttempt(Conflict):
    code = "UNKNOWN_ATTEMPT"


class TaskTerminal(Conflict):
    code = "TASK_TERMINAL"


class InvalidTransition(Conflict):
    code = "INVALID_TRANSITION"


class AttemptInProgress(Conflict):
    code = "ATTEMPT_IN_PROGRESS"


class AttemptsExhausted(Conflict):
    code = "ATTEMPTS_EXHAUSTED"


class AttemptSuperseded(Conflict):
    code = "ATTEMPT_SUPERSEDED"


class StepTerminal(Conflict):
    code = "STEP_TERMINAL"


class NoFailedStep(Conflict):
    code = "NO_FAILED_STEP"


class TaskAttemptsExhausted(Conflict):
    """The task reached its ``maxTaskAttempts`` (``.details``: ``{limit, taskAttempt}``)."""

    code = "TASK_ATTEMPTS_EXHAUSTED"


class DefinitionVersionExists(Conflict):
    code = "DEFINITION_VERSION_EXISTS"


class DataTooLarge(TooLarge):
    code = "DATA_TOO_LARGE"


class BodyTooLarge(TooLarge):
    code = "BODY_TOO_LARGE"


class StorageBusy(Unavailable):
    code = "STORAGE_BUSY"


class StorageUnavailable(Unavailable):
    code = "STORAGE_UNAVAILABLE"


#: code -> its exception class, e.g. ``"TASK_TERMINAL"`` -> :class:`TaskTerminal` (a :class:`Conflict`).
BY_CODE: dict[str, type[Refused]] = {
    cls.code: cls
    for cls in (
        InvalidEvent,
        InvalidJson,
        JsonTooDeep,
        NumberOutOfRange,
        IdempotencyKeyMismatch,
        InvalidIdempotencyKey,
        UnknownOperation,
        EventTypeNotAllowed,
        DataSchemaNotAllowed,
        DataInvalid,
        DataNotAllowed,
        UnknownBusinessStatus,
        BusinessStatusLifecycleMismatch,
        UnknownStep,
        UnknownDefinitionVersion,
        DuplicateStep,
        NoInitialStatus,
        InvalidTask,
        RegistryInvalid,
        UnknownDataSchema,
        InvalidCorrection,
        InvalidQuery,
        InvalidServiceCredential,
        ExecutionTokenExpired,
        InvalidExecutionToken,
        InvalidUserToken,
        TokenMismatch,
        StepDefinitionMismatch,
        ExecutionTokenRequired,
        ProducerMismatch,
        ProducerNotAllowed,
        RoleRequired,
        TenantMismatch,
        CoordinatorMismatch,
        ExecutionTokenMaxLifetime,
        TaskNotFound,
        StepNotFound,
        EventIdConflict,
        TaskExists,
        UnknownAttempt,
        TaskTerminal,
        InvalidTransition,
        AttemptInProgress,
        AttemptsExhausted,
        AttemptSuperseded,
        StepTerminal,
        NoFailedStep,
        TaskAttemptsExhausted,
        DefinitionVersionExists,
        DataTooLarge,
        BodyTooLarge,
        RateLimited,
        StorageBusy,
        StorageUnavailable,
        TenantRequired,
        ProjectRequired,
        NotAProjectMember,
        SystemScopeForbidden,
    )
}

BY_CODE["UNAUTHENTICATED"] = Unauthenticated
BY_CODE["NOT_FOUND"] = NotFound


def refusal(status: int, body: Any) -> Refused:
    """The typed exception of an error answer (any status; unknown codes get their status's class)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        base = _BY_STATUS.get(status, Refused)
        return base(f"HTTP {status} without a coded body", code=f"HTTP_{status}", status=status)
    code = str(err.get("code") or f"HTTP_{status}")
    cls = BY_CODE.get(code) or _BY_STATUS.get(status, Refused)
    return cls(
        str(err.get("message", "")),
        code=code,
        status=status,
        retryable=bool(err.get("retryable", False)),
        details=err.get("details"),
    )
