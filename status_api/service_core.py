"""Shared plumbing of the Status API write side: the clock, settings, transaction retries, the
definition cache and the one way a change is saved (task + step, event log, outbox).

``service.StatusService`` builds on :class:`ServiceCore`; ``service_ingest`` (event ingestion with
group commit) and ``service_admin`` (operator corrections, the health reconciler's writes and the
registries) take it as their context. Must not import starlette, nor the modules built on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from status_api.domain import ingest
from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import JSON, ExecutionGrant, StepState, TaskState
from status_api.domain.projections import Trigger, iso, outbox_messages
from status_api.domain.registry import TaskDefinitions
from status_api.domain.sanitize import USER_MESSAGE_LIMIT
from status_api.schemas import SchemaStore
from status_api.storage import outbox, registries
from status_api.storage import repository as repo
from status_api.storage.database import is_retryable
from status_api.tokens import TokenIssuer

log = logging.getLogger("status_api.service")
T = TypeVar("T")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Naive UTC now, truncated to milliseconds (what DATETIME(3) stores)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def canonical_hash(body: Mapping[str, JSON]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no whitespace) of a request body."""
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


def parse_time(value: str) -> datetime:
    ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return ts.replace(microsecond=ts.microsecond // 1000 * 1000)


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    max_data_bytes: int = ingest.DEFAULT_MAX_DATA_BYTES
    user_message_limit: int = USER_MESSAGE_LIMIT
    max_transaction_retries: int = 5
    #: Group commit (``service_ingest``): at most this many events share one transaction; 1 turns
    #: batching off (each event runs its own transaction in the caller's task).
    ingest_batch_max: int = 64
    #: Group-commit transactions in flight at once (each holds one pooled connection).
    ingest_batch_runners: int = 3


def event_log_row(
    trigger: Trigger, after: TaskState, step: StepState | None, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``task_event_log`` row of a committed version; ``extra`` carries the producer's fields."""
    subject: TaskState | StepState = step or after
    return {
        "event_id": trigger.event_id,
        "task_id": after.id,
        "task_version": after.version,
        "step_id": step.step_id if step else None,
        "operation_code": step.operation_code if step else None,
        "step_version": step.version if step else None,
        "task_attempt": after.attempt,
        "step_attempt": step.attempt if step else None,
        "lifecycle_status": subject.lifecycle.value,
        "business_status": subject.business_status,
        "health": subject.health.value,
        "committed_at": trigger.committed_at,
        **extra,
    }


class ServiceCore:
    """Engine, validators, token issuer, clock (injected: tests advance it by hand) and settings."""

    def __init__(
        self,
        engine: AsyncEngine,
        schemas: SchemaStore,
        tokens: TokenIssuer,
        clock: Clock = utc_now,
        settings: ServiceSettings | None = None,
    ) -> None:
        self.engine = engine
        self.schemas = schemas
        self.tokens = tokens
        self.clock = clock
        self.settings = settings or ServiceSettings()
        self._defs: dict[tuple[str, str, str, int, int], TaskDefinitions] = {}

    async def _retrying(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Re-run a whole transaction on deadlock / lock timeout / a lost unique-key race."""
        for attempt in range(self.settings.max_transaction_retries):
            try:
                return await fn()
            except IntegrityError:
                if attempt == self.settings.max_transaction_retries - 1:
                    raise
                log.info("integrity race, retrying transaction")
            except DBAPIError as exc:
                if not is_retryable(exc) or attempt == self.settings.max_transaction_retries - 1:
                    if is_retryable(exc):
                        raise DomainError(
                            ErrorKind.UNAVAILABLE, "STORAGE_BUSY", "storage busy; retry"
                        ) from exc
                    raise
                log.info("retryable storage error, retrying: %s", exc.orig)
        raise AssertionError("unreachable")

    async def definitions(
        self,
        conn: AsyncConnection,
        tenant: str,
        product: str,
        task_type: str,
        status_version: int,
        operation_version: int,
    ) -> TaskDefinitions:
        """The immutable definition sets a task binds to (cached: published versions never change)."""
        key = (tenant, product, task_type, status_version, operation_version)
        defs = self._defs.get(key)
        if defs is None:
            s = await registries.load_status_set(conn, tenant, product, task_type, status_version)
            o = await registries.load_operation_set(conn, tenant, product, task_type, operation_version)
            if s is None or o is None:
                raise invalid(
                    "UNKNOWN_DEFINITION_VERSION", "status/operation definition version is not registered"
                )
            defs = self._defs[key] = TaskDefinitions(s, o)
        return defs

    async def _task_defs(self, conn: AsyncConnection, t: TaskState) -> TaskDefinitions:
        return await self.definitions(
            conn,
            t.tenant_id,
            t.product,
            t.task_type,
            t.status_definition_version,
            t.operation_definition_version,
        )

    def execution_context(
        self, t: TaskState, s: StepState, defs: TaskDefinitions, now: datetime
    ) -> dict[str, JSON]:
        """Seed §3.3: what the coordinator hands to the service that runs one step attempt."""
        op = defs.operations.operations[s.operation_code]
        grant = ExecutionGrant(
            t.id, s.step_id, s.operation_code, t.attempt, s.attempt, s.producer_id, op.allowed_event_types
        )
        token, exp = self.tokens.execution_token(grant, now)
        return {
            "taskId": t.id,
            "taskType": t.task_type,
            "taskAttempt": t.attempt,
            "stepId": s.step_id,
            "operationCode": s.operation_code,
            "stepAttempt": s.attempt,
            "producerId": s.producer_id,
            "statusDefinitionVersion": t.status_definition_version,
            "operationDefinitionVersion": t.operation_definition_version,
            "allowedEventTypes": sorted(op.allowed_event_types),
            "executionToken": token,
            "expiresAt": iso(datetime.fromtimestamp(exp, UTC).replace(tzinfo=None)),
        }

    async def _commit_change(
        self,
        conn: AsyncConnection,
        before: TaskState,
        steps: Mapping[str, StepState],
        applied: ingest.Applied,
        defs: TaskDefinitions,
        trigger: Trigger,
        log_row: Mapping[str, Any],
        *,
        new_attempt: bool = False,
    ) -> None:
        """Save task (+ step), append the event log and one outbox row per projection channel."""
        after = applied.task
        new_steps = dict(steps)
        await repo.update_task(conn, after, before.version)
        if applied.step is not None:
            new_steps[applied.step.step_id] = applied.step
            await repo.save_step(conn, applied.step, new_attempt=new_attempt)
        await repo.insert_event(conn, event_log_row(trigger, after, applied.step, log_row))
        messages = outbox_messages(before, after, new_steps, applied.step, trigger, defs.operations)
        await outbox.append(conn, after.id, after.version, messages, trigger.committed_at)
