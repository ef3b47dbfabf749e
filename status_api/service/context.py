"""The explicit context every Status API use case runs over, and the shape of a use case.

:class:`ServiceContext` holds the engine, validators, token issuer, clock (injected: tests advance
it by hand) and settings, and offers what every use case needs: the definition cache, transaction
retries, :meth:`ServiceContext.transact` (run a use case in ONE transaction and save the
:class:`~status_api.storage.write.Change` values it returns with the one writer; after the commit,
the ``on_commit`` hook wakes the relays when outbox rows were written) and the execution
context handed to a step's service. :func:`version_change` turns a domain decision into the Change
of one new task version (task + step, event-log row, outbox messages).

Must not import starlette, nor the use-case modules built on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import orjson
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from httpwire.tracing import OFF, Tracing
from status_api.domain import attempts, ingest, progress_window
from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import JSON, ExecutionGrant, StepState, TaskState
from status_api.domain.projections import Projected, Trigger, iso, project
from status_api.domain.registry import TaskDefinitions
from status_api.domain.sanitize import USER_MESSAGE_LIMIT
from status_api.schemas import SchemaStore
from status_api.storage import registries
from status_api.storage.database import Clock, is_retryable, utc_now
from status_api.storage.outbox import OutboxMessage, Priority, Publication, version_message
from status_api.storage.write import Change, DedupRow, write
from status_api.tokens import TokenIssuer, epoch

log = logging.getLogger("status_api.service")
T = TypeVar("T")
R = TypeVar("R")


#: Where orjson's text of a number may differ from the standard library's: an exponent (``1e-07``
#: against ``1e-7``), or the range below 1e-4 that orjson prints positionally (``0.00001``). A
#: number token follows ``:``, ``[`` or ``,``; the same characters inside a string only cost the
#: slower encoder, never a different hash.
_NUMBER_FORMS_DIFFER = re.compile(rb"[:\[,]-?[0-9]+(?:\.[0-9]+)?[eE]|[:\[,]-?0\.0000")


def canonical_hash(body: Mapping[str, JSON]) -> str:
    """SHA-256 of the canonical JSON of a request body: the UTF-8 of ``json.dumps(body,
    sort_keys=True, separators=(",", ":"), ensure_ascii=False)``. orjson writes the same bytes for
    strings, integers, booleans, null and floats without an exponent (both print the shortest
    round-trip digits), several times faster; a body whose orjson text shows a number form where
    the two may differ is encoded by the standard library, so the hash never changes."""
    try:
        raw: bytes | None = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON types orjson takes (an int beyond 64 bits, say)
        raw = None
    if raw is None or _NUMBER_FORMS_DIFFER.search(raw):
        raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(raw).hexdigest()


def parse_time(value: str) -> datetime:
    ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return ts.replace(microsecond=ts.microsecond // 1000 * 1000)


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    max_data_bytes: int = ingest.DEFAULT_MAX_DATA_BYTES
    user_message_limit: int = USER_MESSAGE_LIMIT
    #: Task attempts a task may reach unless its operation definitions set ``maxTaskAttempts``.
    max_task_attempts: int = 10
    max_transaction_retries: int = 5
    #: Group commit (``service.ingest``): at most this many events share one transaction; 1 turns
    #: batching off (each event runs its own transaction in the caller's task).
    ingest_batch_max: int = 64
    #: Group-commit transactions in flight at once (each holds one pooled connection).
    ingest_batch_runners: int = 3
    #: The longest a group-commit batch waits for the events the arrival rate promises (0 = never).
    ingest_commit_delay_ms: float = 10.0
    #: The progress window of a task type without ``progressMinIntervalMs`` (``domain/progress_window.py``).
    progress_min_interval_ms: int = progress_window.DEFAULT_MIN_INTERVAL_MS
    #: Event-log retention (``service.retention``): entries older than this are purged by the
    #: scheduled run; None keeps the event log forever.
    event_log_retention_seconds: float | None = None
    #: How often the scheduled run purges, and how many tasks' prefixes one transaction deletes.
    retention_interval_seconds: float = 3600.0
    retention_batch_size: int = 500


@dataclass(frozen=True, slots=True)
class Decision(Generic[R]):
    """What a use case decided inside its transaction: the changes to save and the caller's answer."""

    changes: Sequence[Change]
    result: R


def outbox_messages(projected: Projected) -> tuple[OutboxMessage, ...]:
    """The outbox row of a projected version: ONE message carrying every projection's payload for
    its channel (``outbox.version_message``: a VERSION row, or the plain row of a version with one
    payload), of one priority: an urgent version outranks and is never superseded."""
    if not projected.payloads:
        return ()
    priority = Priority.of(urgent=projected.urgent)
    pubs = [Publication(p.channel, p.projection.name, p.payload) for p in projected.payloads]
    return (version_message(pubs, priority),)


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


def version_change(
    before: TaskState,
    steps: Mapping[str, StepState],
    applied: ingest.Applied,
    defs: TaskDefinitions,
    trigger: Trigger,
    log_fields: Mapping[str, Any],
    *,
    new_attempt: bool = False,
    dedup: DedupRow | None = None,
    coalesce: bool = False,
    due_at: datetime | None = None,
    traceparent: str | None = None,
) -> Change:
    """The Change of one new task version: task (+ step), its event-log row, its one outbox
    message (every projection channel's payload). ``steps`` is the state before; ``new_attempt``
    inserts the step row; ``coalesce``, ``due_at`` and ``traceparent`` are the Change's own
    (``storage/write.py``)."""
    after, step = applied.task, applied.step
    new_steps = {**steps, step.step_id: step} if step is not None else steps
    messages = outbox_messages(
        project(before, after, new_steps, step, trigger, defs.operations, defs.statuses)
    )
    written = (step,) if step is not None else ()
    return Change(
        at=trigger.committed_at,
        task=after,
        base_version=before.version,
        steps=() if new_attempt else written,
        new_steps=written if new_attempt else (),
        log=(event_log_row(trigger, after, step, log_fields),),
        outbox=messages,
        dedup=dedup,
        coalesce=coalesce,
        due_at=due_at,
        traceparent=traceparent,
    )


def audit_fields(
    producer_id: str, source_seq: int, event_type: str, at: datetime, payload: JSON
) -> dict[str, Any]:
    """Event-log fields of a version the service itself produces (no worker report behind it)."""
    return {
        "producer_id": producer_id[:128],
        "source_seq": source_seq,
        "event_type": event_type,
        "data_schema": None,
        "error_code": None,
        "occurred_at": at,
        "received_at": at,
        "duration_ms": None,
        "payload": payload,
    }


class ServiceContext:
    """Engine, validators, token issuer, clock and settings, shared by every use case."""

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
        #: Post-commit hook: called with the number of outbox rows a transaction wrote,
        #: right after it COMMITTED, on the event loop; must not block nor raise (``status_api.wake``).
        self.on_commit: Callable[[int], None] | None = None
        #: The process's tracer (``status_api.app`` sets it; OFF: the use cases trace nothing).
        self.tracing: Tracing = OFF

    async def retrying(self, fn: Callable[[], Awaitable[T]], retries: int | None = None) -> T:
        """Re-run a whole transaction on deadlock / lock timeout / a lost unique-key race, at most
        ``retries`` runs in all (default ``max_transaction_retries``).

        Raises:
            DomainError: UNAVAILABLE ``STORAGE_BUSY`` when lock conflicts outlast the retries.
        """
        runs = retries or self.settings.max_transaction_retries
        for attempt in range(runs):
            try:
                return await fn()
            except IntegrityError:
                if attempt == runs - 1:
                    raise
                log.info("integrity race, retrying transaction")
            except DBAPIError as exc:
                if not is_retryable(exc) or attempt == runs - 1:
                    if is_retryable(exc):
                        raise DomainError(
                            ErrorKind.UNAVAILABLE, "STORAGE_BUSY", "storage busy; retry"
                        ) from exc
                    raise
                log.info("retryable storage error, retrying: %s", exc.orig)
        raise AssertionError("unreachable")

    async def transact(
        self, decide: Callable[[AsyncConnection], Awaitable[Decision[R]]], retries: int | None = None
    ) -> R:
        """Run ``decide`` in one transaction, save its changes with the one writer, commit, answer.

        The whole transaction is retried on lock conflicts (``retries``: see :meth:`retrying`); a
        DomainError from ``decide`` rolls back and propagates (nothing is written).
        """

        async def tx() -> R:
            async with self.engine.begin() as conn:
                decision = await decide(conn)
                # the transaction's last statements: on MariaDB the writer sends the COMMIT
                outbox_rows = await write(conn, decision.changes, self.clock, commit=True)
            if outbox_rows:  # committed: the rows are visible to the relays now
                self._committed(outbox_rows)
            return decision.result

        return await self.retrying(tx, retries)

    def committed(self, outbox_rows: int) -> None:
        """The post-commit hook for a use case that committed outbox rows outside :meth:`transact`."""
        self._committed(outbox_rows)

    def _committed(self, outbox_rows: int) -> None:
        """Run the post-commit hook; a failing hook only costs latency (the safety-net poll)."""
        if self.on_commit is None:
            return
        try:
            self.on_commit(outbox_rows)
        except Exception:
            log.exception("post-commit wake-up hook failed (the relay's poll will publish)")

    async def definitions(
        self,
        conn: AsyncConnection,
        tenant: str,
        product: str,
        task_type: str,
        status_version: int,
        operation_version: int,
    ) -> TaskDefinitions:
        """The immutable definition sets a task binds to (cached: published versions never change).

        Raises:
            DomainError: INVALID ``UNKNOWN_DEFINITION_VERSION``.
        """
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

    async def task_definitions(self, conn: AsyncConnection, t: TaskState) -> TaskDefinitions:
        """The definition sets ``t`` was created with."""
        return await self.definitions(
            conn,
            t.tenant_id,
            t.product,
            t.task_type,
            t.status_definition_version,
            t.operation_definition_version,
        )

    def execution_context(
        self,
        t: TaskState,
        s: StepState,
        defs: TaskDefinitions,
        now: datetime,
        chain_started: int | None = None,
    ) -> dict[str, JSON]:
        """Seed §3.3: what the coordinator hands to the service that runs one step attempt.

        ``chain_started``: a renewal's token chain start (see ``TokenIssuer.execution_token``).
        ``expiresInSeconds`` lets a worker schedule its renewal on its own monotonic clock."""
        op = defs.operations.operations[s.operation_code]
        grant = ExecutionGrant(
            t.id, s.step_id, s.operation_code, t.attempt, s.attempt, s.producer_id, op.allowed_event_types
        )
        token, exp = self.tokens.execution_token(grant, now, chain_started)
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
            "expiresInSeconds": max(0, exp - int(now.replace(tzinfo=UTC).timestamp())),
        }

    async def renewal(
        self,
        conn: AsyncConnection,
        task: TaskState | None,
        steps: Mapping[str, StepState],
        grant: ExecutionGrant,
        chain_started: int,
        at: datetime,
    ) -> tuple[dict[str, JSON], dict[str, JSON]]:
        """The one renewal decision, for the renewal endpoint (service/tasks.py) and for a heartbeat
        in its renewal window (service/ingest.py): over the locked task and its current steps, the
        new execution context (same task, step, attempts, producer and event types; never past the
        chain's maximum lifetime) and its ``execution_token_renewal`` audit row, to write in the
        caller's transaction.

        Raises:
            DomainError: those of ``attempts.check_renewal``.
        """
        step = attempts.check_renewal(
            task, steps, grant, chain_started, epoch(at), self.tokens.s.execution_max_lifetime_seconds
        )
        assert task is not None
        defs = await self.task_definitions(conn, task)
        out = self.execution_context(task, step, defs, at, chain_started)
        row: dict[str, JSON] = {
            "task_id": grant.task_id,
            "step_id": grant.step_id,
            "task_attempt": grant.task_attempt,
            "step_attempt": grant.step_attempt,
            "producer_id": grant.producer_id[:128],
            "chain_started_at": datetime.fromtimestamp(chain_started, UTC).replace(tzinfo=None),
            "renewed_at": at,
            "expires_at": parse_time(str(out["expiresAt"])),
        }
        return out, row
