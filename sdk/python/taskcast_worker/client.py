"""The asyncio client: the coordinator's calls (create a task, open step and task attempts,
report TASK_* events) and :meth:`AsyncTaskcast.step` for a worker's step attempt."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

import httpx

from taskcast_worker.errors import TaskcastError
from taskcast_worker.models import CreatedTask, EventResult, ExecutionContext, StepError, StepSpec
from taskcast_worker.step import EVENTS, AsyncStep, new_event_id, utc_now_iso
from taskcast_worker.transport import RetryPolicy, Sleep, Transport


class AsyncTaskcast:
    """A Status API client.

    Args:
        base_url: the Status API, e.g. ``http://127.0.0.1:8100``.
        service_token: the coordinator's service credential (a service JWT with role
            ``coordinator``, or a static key); workers that only report steps need none.
        producer_id: the coordinator's producerId (the credential's ``sub``) for TASK_* events.
        retry: backoff and the total retry budget of every call.
    """

    def __init__(
        self,
        base_url: str,
        *,
        service_token: str | None = None,
        producer_id: str | None = None,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        kwargs: dict[str, Any] = {"client": http_client, "clock": clock}
        if sleep is not None:
            kwargs["sleep"] = sleep
        self.transport = Transport(base_url, retry, **kwargs)
        self.service_token = service_token
        self.producer_id = producer_id
        self._clock = clock
        self._task_seq: dict[tuple[str, int], int] = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()

    def _service(self) -> str:
        if not self.service_token:
            raise TaskcastError("this call needs service_token (a coordinator credential)")
        return self.service_token

    # --- coordinator -------------------------------------------------------------------------

    async def create_task(
        self,
        *,
        tenant_id: str,
        owner_id: str,
        product: str,
        task_type: str,
        title: str,
        steps: Iterable[StepSpec],
        status_definition_version: int,
        operation_definition_version: int,
        task_id: str | None = None,
        project_id: str | None = None,
        idempotency_key: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> CreatedTask:
        """``POST /internal/v1/tasks``. Retried safely: the ``Idempotency-Key`` (generated when not
        given) returns the first result."""
        body: dict[str, Any] = {
            "tenantId": tenant_id,
            "ownerId": owner_id,
            "product": product,
            "taskType": task_type,
            "title": title,
            "statusDefinitionVersion": status_definition_version,
            "operationDefinitionVersion": operation_definition_version,
            "steps": [s.to_json() for s in steps],
            **(extra or {}),
        }
        if task_id is not None:
            body["taskId"] = task_id
        if project_id is not None:
            body["projectId"] = project_id
        key = idempotency_key or f"create-{uuid.uuid4().hex}"
        out = await self.transport.post("/internal/v1/tasks", body, self._service, idempotency_key=key)
        return CreatedTask.from_json(out)

    async def retry_step(self, task_id: str, step_id: str) -> ExecutionContext:
        """Attempt n+1 of a step whose attempt n is terminal (seed §4.1)."""
        out = await self.transport.post(
            f"/internal/v1/tasks/{task_id}/steps/{step_id}/attempts", None, self._service, idempotent=False
        )
        return ExecutionContext.from_json(out)

    async def retry_task(self, task_id: str) -> CreatedTask:
        """Task attempt n+1 after a failed step: a new attempt (and context) for every step; events
        of the old attempt are ignored from now on (seed §3.3)."""
        out = await self.transport.post(
            f"/internal/v1/tasks/{task_id}/attempts", None, self._service, idempotent=False
        )
        return CreatedTask.from_json(out)

    async def complete_task(
        self,
        task_id: str,
        business_status: str,
        *,
        task_attempt: int = 1,
        duration_ms: int | None = None,
        source_seq: int | None = None,
    ) -> EventResult:
        """TASK_COMPLETED (only the task's own coordinator, seed §3.9)."""
        extra = {"durationMs": duration_ms} if duration_ms is not None else {}
        return await self._task_event(
            "TASK_COMPLETED", task_id, business_status, task_attempt, extra, source_seq
        )

    async def fail_task(
        self,
        task_id: str,
        business_status: str,
        error: StepError,
        *,
        task_attempt: int = 1,
        failed_step_id: str | None = None,
        source_seq: int | None = None,
    ) -> EventResult:
        """TASK_FAILED with a structured error (the coordinator or a policy executor)."""
        extra: dict[str, Any] = {"error": error.to_json()}
        if failed_step_id is not None:
            extra["failedStepId"] = failed_step_id
        return await self._task_event(
            "TASK_FAILED", task_id, business_status, task_attempt, extra, source_seq
        )

    async def cancel_task(
        self, task_id: str, business_status: str, *, task_attempt: int = 1, source_seq: int | None = None
    ) -> EventResult:
        """TASK_CANCELLED (only the task's own coordinator)."""
        return await self._task_event(
            "TASK_CANCELLED", task_id, business_status, task_attempt, {}, source_seq
        )

    async def _task_event(
        self,
        event_type: str,
        task_id: str,
        business_status: str,
        task_attempt: int,
        extra: Mapping[str, Any],
        source_seq: int | None,
    ) -> EventResult:
        if not self.producer_id:
            raise TaskcastError("TASK_* events need producer_id (the coordinator's credential sub)")
        key = (task_id, task_attempt)
        seq = source_seq if source_seq is not None else self._task_seq.get(key, 0) + 1
        self._task_seq[key] = max(seq, self._task_seq.get(key, 0))
        body: dict[str, Any] = {
            "eventId": new_event_id(),
            "taskId": task_id,
            "taskAttempt": task_attempt,
            "producerId": self.producer_id,
            "sourceSeq": seq,
            "eventType": event_type,
            "businessStatus": business_status,
            "occurredAt": utc_now_iso(),
            **extra,
        }
        out = await self.transport.post(EVENTS, body, self._service, idempotency_key=body["eventId"])
        return EventResult.from_json(out)

    # --- worker ------------------------------------------------------------------------------

    def step(
        self,
        ctx: ExecutionContext | Mapping[str, Any],
        *,
        source_seq: int = 0,
        heartbeat_interval_seconds: float = 15.0,
        progress_interval_seconds: float = 1.0,
    ) -> AsyncStep:
        """The reporter of one step attempt (use with ``async with``)."""
        if not isinstance(ctx, ExecutionContext):
            ctx = ExecutionContext.from_json(ctx)
        return AsyncStep(
            self,
            ctx,
            source_seq=source_seq,
            heartbeat_interval_seconds=heartbeat_interval_seconds,
            progress_interval_seconds=progress_interval_seconds,
            clock=self._clock,
        )
