"""Taskcast worker SDK: report task and step status to a Taskcast Status API.

Async (:class:`AsyncTaskcast`, :class:`AsyncStep`) and sync (:class:`Taskcast`, :class:`Step`)
APIs over the same code; depends on httpx only (nothing of the server). See
docs/quickstart-worker.md.
"""

from taskcast_worker.client import AsyncTaskcast
from taskcast_worker.errors import (
    BY_CODE,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    Refused,
    TaskcastError,
    TooLarge,
    TransportError,
    Unauthenticated,
    Unavailable,
)
from taskcast_worker.models import CreatedTask, EventResult, ExecutionContext, StepError, StepSpec
from taskcast_worker.step import AsyncStep
from taskcast_worker.sync import Step, Taskcast
from taskcast_worker.transport import RetryPolicy

__all__ = [
    "BY_CODE",
    "AsyncStep",
    "AsyncTaskcast",
    "Conflict",
    "CreatedTask",
    "EventResult",
    "ExecutionContext",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "RateLimited",
    "Refused",
    "RetryPolicy",
    "Step",
    "StepError",
    "StepSpec",
    "Taskcast",
    "TaskcastError",
    "TooLarge",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
]
