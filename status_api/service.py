"""Status API write use cases. Each one is ONE database transaction with the task row locked:
validate, decide (pure domain), save state, append the event log, the idempotency record and one
outbox row per projection — and it returns only after commit, because a 2xx means durable.

Must not import starlette; the HTTP layer calls these methods and maps ``DomainError`` to statuses.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from status_api.domain import creation, ingest
from status_api.domain.errors import DomainError, ErrorKind, conflict, forbidden, invalid, not_found
from status_api.domain.model import (
    JSON,
    DataBody,
    DurationSource,
    ErrorInfo,
    Event,
    EventType,
    ExecutionGrant,
    Health,
    Progress,
    Role,
    ServiceIdentity,
    StepState,
    TaskState,
)
from status_api.domain.projections import Trigger, iso, outbox_messages
from status_api.domain.registry import (
    TaskDefinitions,
    data_schema_names,
    operation_set_from_json,
    status_set_from_json,
)
from status_api.domain.sanitize import USER_MESSAGE_LIMIT, sanitize_error, sanitize_user_message
from status_api.schemas import SchemaStore
from status_api.storage import outbox
from status_api.storage import repository as repo
from status_api.storage.database import is_retryable
from status_api.tokens import TokenIssuer

log = logging.getLogger("status_api.service")
T = TypeVar("T")
Clock = Callable[[], datetime]
RECONCILER_PRODUCER = "health-reconciler"


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


def parse_event(body: Mapping[str, JSON], message_limit: int) -> Event:
    """Typed event from a schema-valid body; the error's userMessage is sanitized here, at entry."""
    err = body.get("error")
    error = None
    if err is not None:
        error = sanitize_error(
            ErrorInfo(
                err["category"],
                err["code"],
                bool(err["retryable"]),
                err.get("userMessage", ""),
                err.get("diagnosticsRef"),
            ),
            message_limit,
        )
    prog = body.get("progress")
    data = body.get("data")
    return Event(
        event_id=body["eventId"],
        task_id=body["taskId"],
        task_type=body.get("taskType"),
        task_attempt=int(body["taskAttempt"]),
        step_id=body.get("stepId"),
        operation_code=body.get("operationCode"),
        step_attempt=body.get("stepAttempt"),
        producer_id=body["producerId"],
        source_seq=int(body["sourceSeq"]),
        event_type=EventType(body["eventType"]),
        business_status=body.get("businessStatus"),
        occurred_at=parse_time(body["occurredAt"]),
        duration_ms=body.get("durationMs"),
        duration_source=DurationSource(body["durationSource"]) if body.get("durationSource") else None,
        progress=Progress(prog["current"], prog.get("total"), prog.get("unit")) if prog else None,
        message=sanitize_user_message(body.get("message"), message_limit) if body.get("message") else None,
        failed_step_id=body.get("failedStepId"),
        data=DataBody(data["schema"], data["value"]) if data else None,
        error=error,
    )


class StatusService:
    """Write side of the Status API. ``clock`` is injected (tests advance it by hand)."""

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

    # --- plumbing ----------------------------------------------------------------------------

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
            s = await repo.load_status_set(conn, tenant, product, task_type, status_version)
            o = await repo.load_operation_set(conn, tenant, product, task_type, operation_version)
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
        step = applied.step
        await repo.insert_event(
            conn,
            {
                "event_id": trigger.event_id,
                "task_id": after.id,
                "task_version": after.version,
                "step_id": step.step_id if step else None,
                "operation_code": step.operation_code if step else None,
                "step_version": step.version if step else None,
                "task_attempt": after.attempt,
                "step_attempt": step.attempt if step else None,
                "lifecycle_status": (step or after).lifecycle.value,
                "business_status": (step or after).business_status,
                "health": (step or after).health.value,
                "committed_at": trigger.committed_at,
                **log_row,
            },
        )
        messages = outbox_messages(before, after, new_steps, step, trigger, defs.operations)
        await outbox.append(conn, after.id, after.version, messages, trigger.committed_at)

    # --- task creation -------------------------------------------------------------------------

    async def create_task(
        self, body: Mapping[str, JSON], caller: ServiceIdentity, idempotency_key: str | None = None
    ) -> dict[str, JSON]:
        """``POST /internal/v1/tasks``: version 1, steps at attempt 1, an execution context per step.

        With an ``Idempotency-Key`` a retried creation returns the first result (fresh tokens).
        """
        if Role.COORDINATOR.value not in caller.roles:
            raise forbidden("ROLE_REQUIRED", "creating tasks needs the coordinator role")
        self.schemas.require("task-create", body)
        task_id = body.get("taskId") or str(uuid.uuid4())
        event_id = idempotency_key or str(uuid.uuid4())
        if len(event_id) > 64:
            raise invalid("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key is longer than 64 characters")
        payload_hash = canonical_hash(body)

        async def tx() -> dict[str, JSON]:
            async with self.engine.begin() as conn:
                now = self.clock()
                if idempotency_key:
                    prior = await repo.get_dedup(conn, event_id)
                    if prior is not None:
                        if prior["payload_hash"] != payload_hash:
                            raise conflict(
                                "EVENT_ID_CONFLICT", "Idempotency-Key reused with a different body"
                            )
                        return await self._created_response(conn, prior["task_id"], now, duplicate=True)
                defs = await self.definitions(
                    conn,
                    body["tenantId"],
                    body["product"],
                    body["taskType"],
                    int(body["statusDefinitionVersion"]),
                    int(body["operationDefinitionVersion"]),
                )
                task, steps = creation.create_task(body, task_id, defs, self.schemas.validate_data, now)
                if await repo.get_task(conn, task_id) is not None:
                    raise conflict("TASK_EXISTS", "a task with this taskId exists")
                await repo.insert_task(conn, task, steps.values())
                trigger = Trigger(event_id, EventType.TASK_CREATED, now)
                await repo.insert_event(
                    conn,
                    {
                        "event_id": event_id,
                        "task_id": task.id,
                        "task_version": 1,
                        "step_id": None,
                        "operation_code": None,
                        "step_version": None,
                        "task_attempt": 1,
                        "step_attempt": None,
                        "producer_id": caller.producer_id,
                        "source_seq": 0,
                        "event_type": EventType.TASK_CREATED.value,
                        "lifecycle_status": task.lifecycle.value,
                        "business_status": task.business_status,
                        "health": task.health.value,
                        "data_schema": None,
                        "error_code": None,
                        "occurred_at": now,
                        "received_at": now,
                        "committed_at": now,
                        "duration_ms": None,
                        "payload": {"steps": body["steps"]},
                    },
                )
                await outbox.append(
                    conn, task.id, 1, outbox_messages(task, task, steps, None, trigger, defs.operations), now
                )
                if idempotency_key:
                    await repo.insert_dedup(conn, event_id, task.id, payload_hash, {"taskId": task.id}, now)
                return self._created(task, steps, defs, now, duplicate=False)

        return await self._retrying(tx)

    def _created(
        self,
        task: TaskState,
        steps: Mapping[str, StepState],
        defs: TaskDefinitions,
        now: datetime,
        duplicate: bool,
    ) -> dict[str, JSON]:
        return {
            "taskId": task.id,
            "taskVersion": str(task.version),
            "duplicate": duplicate,
            "lifecycleStatus": task.lifecycle.value,
            "businessStatus": task.business_status,
            "createdAt": iso(task.created_at),
            "steps": [self.execution_context(task, s, defs, now) for s in steps.values()],
        }

    async def _created_response(
        self, conn: AsyncConnection, task_id: str, now: datetime, duplicate: bool
    ) -> dict[str, JSON]:
        task = await repo.get_task(conn, task_id)
        if task is None:
            raise not_found()
        steps = await repo.current_steps(conn, task_id)
        out = self._created(task, steps, await self._task_defs(conn, task), now, duplicate)
        out["taskVersion"] = "1"
        return out

    # --- event ingestion -----------------------------------------------------------------------

    async def ingest_event(
        self,
        body: Mapping[str, JSON],
        caller: ExecutionGrant | ServiceIdentity,
        idempotency_key: str | None = None,
    ) -> dict[str, JSON]:
        """``POST /internal/v1/task-events`` (seed §3.5). Returns the response body (seed §3.5 shape).

        Raises:
            DomainError: see ``ingest.authorize`` / ``check_registered`` / ``apply_*``; CONFLICT
                ``EVENT_ID_CONFLICT`` for a reused eventId with different content.
        """
        self.schemas.require("task-event", body, "INVALID_EVENT")
        if idempotency_key is not None and idempotency_key != body["eventId"]:
            raise invalid("IDEMPOTENCY_KEY_MISMATCH", "Idempotency-Key must equal eventId")
        event = parse_event(body, self.settings.user_message_limit)
        payload_hash = canonical_hash(body)
        received_at = self.clock()
        return await self._retrying(lambda: self._ingest_tx(event, caller, payload_hash, received_at))

    async def _ingest_tx(
        self, event: Event, caller: ExecutionGrant | ServiceIdentity, payload_hash: str, received_at: datetime
    ) -> dict[str, JSON]:
        async with self.engine.begin() as conn:
            task = await repo.lock_task(conn, event.task_id)
            if task is None:
                raise not_found()
            steps = await repo.current_steps(conn, task.id)
            step = steps.get(event.step_id) if event.step_id else None
            ingest.authorize(event, caller, task, step)
            defs = await self._task_defs(conn, task)
            ingest.check_registered(event, defs, self.schemas.validate_data, self.settings.max_data_bytes)
            heartbeat = event.event_type is EventType.STEP_HEARTBEAT
            if not heartbeat:
                prior = await repo.get_dedup(conn, event.event_id)
                if prior is not None:
                    if prior["payload_hash"] != payload_hash or prior["task_id"] != task.id:
                        raise conflict("EVENT_ID_CONFLICT", "eventId was already used with different content")
                    return {**prior["result"], "duplicate": True}
            now = self.clock()
            if event.is_step_event:
                outcome = ingest.apply_step_event(task, steps, event, defs, now)
            else:
                last = await repo.last_task_level_seq(conn, task.id, event.producer_id, event.task_attempt)
                outcome = ingest.apply_task_event(task, steps, event, defs, now, last)
            if isinstance(outcome, ingest.Heartbeat):
                await repo.touch_heartbeat(conn, outcome.step)
                return self._response(event, task, outcome.step, now, accepted=True)
            if isinstance(outcome, ingest.Stale):
                result = self._response(event, task, step, now, accepted=False, stale=outcome.reason)
                if not heartbeat:
                    await repo.insert_dedup(conn, event.event_id, task.id, payload_hash, result, now)
                return result
            trigger = Trigger(
                event.event_id,
                event.event_type,
                now,
                event.step_id,
                event.operation_code,
                event.step_attempt,
                outcome.step.version if outcome.step else None,
                event.duration_ms,
                event.data,
                event.error,
            )
            await self._commit_change(
                conn,
                task,
                steps,
                outcome,
                defs,
                trigger,
                {
                    "producer_id": event.producer_id,
                    "source_seq": event.source_seq,
                    "event_type": event.event_type.value,
                    "data_schema": event.data.schema if event.data else None,
                    "error_code": event.error.code if event.error else None,
                    "occurred_at": event.occurred_at,
                    "received_at": received_at,
                    "duration_ms": event.duration_ms,
                    "payload": _event_payload(event),
                },
            )
            result = self._response(event, outcome.task, outcome.step, now, accepted=True)
            await repo.insert_dedup(conn, event.event_id, task.id, payload_hash, result, now)
            return result

    @staticmethod
    def _response(
        event: Event,
        task: TaskState,
        step: StepState | None,
        now: datetime,
        *,
        accepted: bool,
        stale: str | None = None,
    ) -> dict[str, JSON]:
        out: dict[str, JSON] = {
            "accepted": accepted,
            "duplicate": False,
            "stale": stale is not None,
            "eventId": event.event_id,
            "taskId": task.id,
            "stepId": event.step_id,
            "operationCode": event.operation_code,
            "taskVersion": str(task.version),
            "stepVersion": str(step.version) if step is not None else None,
            "lifecycleStatus": task.lifecycle.value,
            "businessStatus": task.business_status,
            "stepLifecycleStatus": step.lifecycle.value if step is not None else None,
            "committedAt": iso(now),
        }
        if stale is not None:
            out["staleReason"] = stale
        return out

    # --- coordinator: retries ------------------------------------------------------------------

    async def create_step_attempt(
        self, task_id: str, step_id: str, caller: ServiceIdentity
    ) -> dict[str, JSON]:
        """``POST /internal/v1/tasks/{taskId}/steps/{stepId}/attempts``: attempt n+1 and its new token."""
        if Role.COORDINATOR.value not in caller.roles:
            raise forbidden("ROLE_REQUIRED", "creating attempts needs the coordinator role")

        async def tx() -> dict[str, JSON]:
            async with self.engine.begin() as conn:
                task = await repo.lock_task(conn, task_id)
                if task is None:
                    raise not_found()
                steps = await repo.current_steps(conn, task_id)
                defs = await self._task_defs(conn, task)
                now = self.clock()
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
                await self._commit_change(
                    conn,
                    task,
                    steps,
                    applied,
                    defs,
                    trigger,
                    {
                        "producer_id": caller.producer_id,
                        "source_seq": 0,
                        "event_type": EventType.STEP_ATTEMPT_CREATED.value,
                        "data_schema": None,
                        "error_code": None,
                        "occurred_at": now,
                        "received_at": now,
                        "duration_ms": None,
                        "payload": None,
                    },
                    new_attempt=True,
                )
                ctx = self.execution_context(applied.task, step, defs, now)
                return {"taskVersion": str(applied.task.version), "stepVersion": str(step.version), **ctx}

        return await self._retrying(tx)

    # --- admin correction (seed §4.2) ----------------------------------------------------------

    async def admin_correct(
        self, task_id: str, body: Mapping[str, JSON], caller: ServiceIdentity
    ) -> dict[str, JSON]:
        """Operator correction: own role, records operator, reason, old and new values; new version."""
        if Role.ADMIN.value not in caller.roles:
            raise forbidden("ROLE_REQUIRED", "corrections need the admin role")
        self.schemas.require("admin-correction", body)

        async def tx() -> dict[str, JSON]:
            async with self.engine.begin() as conn:
                task = await repo.lock_task(conn, task_id)
                if task is None:
                    raise not_found()
                steps = await repo.current_steps(conn, task_id)
                defs = await self._task_defs(conn, task)
                now = self.clock()
                step_id = body.get("stepId")
                health = Health(body["health"]) if body.get("health") else None
                applied = ingest.admin_correct(
                    task, steps, step_id, body["businessStatus"], health, defs, now
                )
                old_subject: TaskState | StepState = steps[step_id] if step_id else task
                new_subject: TaskState | StepState = applied.step if applied.step else applied.task

                def snap(x: TaskState | StepState) -> dict[str, JSON]:
                    return {
                        "lifecycleStatus": x.lifecycle.value,
                        "businessStatus": x.business_status,
                        "health": x.health.value,
                        "version": str(x.version),
                    }

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
                audit = {
                    "operator": caller.producer_id,
                    "reason": body["reason"],
                    "old": snap(old_subject),
                    "new": snap(new_subject),
                }
                await self._commit_change(
                    conn,
                    task,
                    steps,
                    applied,
                    defs,
                    trigger,
                    {
                        "producer_id": f"admin:{caller.producer_id}"[:128],
                        "source_seq": applied.task.version,
                        "event_type": EventType.ADMIN_CORRECTION.value,
                        "data_schema": None,
                        "error_code": None,
                        "occurred_at": now,
                        "received_at": now,
                        "duration_ms": None,
                        "payload": audit,
                    },
                )
                return {
                    "eventId": event_id,
                    "taskVersion": str(applied.task.version),
                    "committedAt": iso(now),
                    **audit,
                }

        return await self._retrying(tx)

    # --- health reconciler (seed §4.3) ---------------------------------------------------------

    async def apply_health(
        self, task_id: str, step_id: str, attempt: int, wanted: Health, cutoff: datetime
    ) -> bool:
        """Re-check under the task lock and commit STEP_HEALTH_CHANGED; False if no longer applicable."""

        async def tx() -> bool:
            async with self.engine.begin() as conn:
                task = await repo.lock_task(conn, task_id)
                if task is None:
                    return False
                steps = await repo.current_steps(conn, task_id)
                step = steps.get(step_id)
                if step is None or step.attempt != attempt or step.lifecycle.value != "RUNNING":
                    return False
                alive = step.last_heartbeat_at or step.started_at or step.created_at
                if step.health is wanted or (wanted is Health.STALE) != (alive < cutoff):
                    return False
                defs = await self._task_defs(conn, task)
                now = self.clock()
                applied = ingest.change_step_health(task, steps, step_id, wanted, defs.operations, now)
                assert applied.step is not None
                trigger = Trigger(
                    str(uuid.uuid4()),
                    EventType.STEP_HEALTH_CHANGED,
                    now,
                    step_id,
                    step.operation_code,
                    attempt,
                    applied.step.version,
                )
                await self._commit_change(
                    conn,
                    task,
                    steps,
                    applied,
                    defs,
                    trigger,
                    {
                        "producer_id": RECONCILER_PRODUCER,
                        "source_seq": applied.task.version,
                        "event_type": EventType.STEP_HEALTH_CHANGED.value,
                        "data_schema": None,
                        "error_code": None,
                        "occurred_at": now,
                        "received_at": now,
                        "duration_ms": None,
                        "payload": {
                            "from": step.health.value,
                            "to": wanted.value,
                            "lastHeartbeatAt": iso(step.last_heartbeat_at),
                        },
                    },
                )
                return True

        return await self._retrying(tx)

    # --- registries ------------------------------------------------------------------------------

    async def publish_definitions(
        self, kind: str, doc: Mapping[str, JSON], *, if_absent: bool = False
    ) -> bool:
        """Register a new definition version (``kind`` = status-definitions | operation-definitions).

        Published versions are immutable: re-publishing identical content is a no-op, different content
        is ``DEFINITION_VERSION_EXISTS``. Returns True when inserted.
        """
        self.schemas.require(kind, doc, "INVALID_DEFINITION")
        async with self.engine.begin() as conn:
            args = (doc["tenantId"], doc["product"], doc["taskType"], int(doc["definitionVersion"]))
            if kind == "status-definitions":
                sset = status_set_from_json(doc)
                existing_s = await repo.load_status_set(conn, *args)
                if existing_s is not None and existing_s.tenant_id == sset.tenant_id:
                    if existing_s == sset:
                        return False
                    raise conflict(
                        "DEFINITION_VERSION_EXISTS", "definition versions are immutable; publish a new one"
                    )
                await repo.insert_status_set(conn, sset)
                return True
            oset = operation_set_from_json(doc)
            missing = data_schema_names(oset) - self.schemas.data_schema_names
            if missing:
                raise invalid(
                    "UNKNOWN_DATA_SCHEMA", f"data schemas not registered in schema/data: {sorted(missing)}"
                )
            existing_o = await repo.load_operation_set(conn, *args)
            if existing_o is not None and existing_o.tenant_id == oset.tenant_id:
                if existing_o == oset:
                    return False
                raise conflict(
                    "DEFINITION_VERSION_EXISTS", "definition versions are immutable; publish a new one"
                )
            await repo.insert_operation_set(conn, oset)
            return True

    async def load_registry_files(self) -> int:
        """Publish every definition in ``schema/registry/`` that is not registered yet (startup, init-db)."""
        count = 0
        for kind in ("status-definitions", "operation-definitions"):
            for doc in self.schemas.load_registry_file(kind):
                count += await self.publish_definitions(kind, doc)
        return count


def _event_payload(event: Event) -> dict[str, JSON]:
    """What the event log keeps for audit and replay (server-side only; diagnosticsRef included)."""
    out: dict[str, JSON] = {}
    if event.data is not None:
        out["data"] = event.data.to_json()
    if event.progress is not None:
        out["progress"] = event.progress.to_json()
    if event.error is not None:
        out["error"] = {**event.error.public_json(), "diagnosticsRef": event.error.diagnostics_ref}
    if event.message:
        out["message"] = event.message
    if event.duration_source is not None:
        out["durationSource"] = event.duration_source.value
    if event.failed_step_id:
        out["failedStepId"] = event.failed_step_id
    return out
