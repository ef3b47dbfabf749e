"""Event ingestion, ``POST /internal/v1/task-events`` (seed §3.5), with group commit.

Per event, outside any transaction: envelope JSON Schema, ``Idempotency-Key`` = eventId, parsing,
the canonical payload hash. Then the event joins a batch (:class:`~status_api.group_commit.GroupCommit`)
and :meth:`EventIngestor.decide_batch` decides the whole batch inside ONE transaction:

1. lock every task of the batch with one ``SELECT … FOR UPDATE`` in id order (two batches never
   deadlock on each other), read their steps and the batch's dedup rows with one query each (on
   MariaDB the three queries are one request);
2. for each event in arrival order, exactly the single-event sequence — authorize, check the
   registries (+ ``data.value`` schema), eventId idempotency, the pure state machine — against the
   in-memory state left by the events before it, so events of one task apply one after another and
   a duplicate eventId inside the batch sees the first one's result;
3. hand every event's :class:`~status_api.storage.write.Change` to the one writer, which writes
   each table once (executemany): tasks (version-checked), steps, event log, outbox, dedup (on
   MariaDB every write and the COMMIT are one request).

Every event's effects commit atomically with its state, and callers are answered only after the
commit. An event that the domain rejects gets its error and leaves no trace, as it would alone. If
the batch transaction fails (a constraint, a deadlock, anything), every event of the batch is re-run
in a transaction of its own (with the usual retries), so one poison event never fails the others.
With ``ingest_batch_max = 1`` the same code runs one event per transaction in the caller's task.

Must not import starlette.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain import ingest, progress_window
from status_api.domain.errors import DomainError, conflict, invalid, not_found
from status_api.domain.model import (
    JSON,
    DataBody,
    DurationSource,
    ErrorInfo,
    Event,
    EventType,
    ExecutionGrant,
    Progress,
    ServiceIdentity,
    StepState,
    TaskState,
)
from status_api.domain.projections import Trigger, iso
from status_api.domain.sanitize import sanitize_error, sanitize_user_message
from status_api.group_commit import GroupCommit
from status_api.service.context import (
    Decision,
    ServiceContext,
    canonical_hash,
    parse_time,
    version_change,
)
from status_api.storage import repository as repo
from status_api.storage.write import Change, DedupRow

log = logging.getLogger("status_api.service")
Response = dict[str, JSON]


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
        occurred_at=parse_time(body["occurredAt"]) if body.get("occurredAt") else None,
        duration_ms=body.get("durationMs"),
        duration_source=DurationSource(body["durationSource"]) if body.get("durationSource") else None,
        progress=Progress(prog["current"], prog.get("total"), prog.get("unit")) if prog else None,
        message=sanitize_user_message(body.get("message"), message_limit) if body.get("message") else None,
        failed_step_id=body.get("failedStepId"),
        data=DataBody(data["schema"], data["value"]) if data else None,
        error=error,
    )


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """A validated, parsed event waiting for its transaction."""

    event: Event
    caller: ExecutionGrant | ServiceIdentity
    payload_hash: str
    received_at: datetime
    #: A STEP_HEARTBEAT whose execution token is in its renewal window: (grant, chain start).
    renewal: tuple[ExecutionGrant, int] | None = None
    #: The W3C trace context the event's outbox rows carry (None unless the Status API traces).
    traceparent: str | None = None


@dataclass(slots=True)
class _Batch:
    """State of one batch transaction: what was locked and read, and the changes decided so far
    (each event sees the in-memory state the events before it left)."""

    tasks: dict[str, TaskState]
    steps: dict[str, dict[str, StepState]]
    #: eventId -> (task_id, payload_hash, result): the stored dedup rows plus this batch's.
    dedup: dict[str, tuple[str, str, Mapping[str, JSON]]]
    task_seqs: dict[tuple[str, str, int], int] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)


class EventIngestor:
    """The ingest use case over a :class:`ServiceContext`; owns the group-commit queue."""

    def __init__(self, core: ServiceContext) -> None:
        self.core = core
        s = core.settings
        self.group: GroupCommit[PendingEvent, Response] | None = None
        if s.ingest_batch_max > 1:
            self.group = GroupCommit(
                self._run_batch,
                max_batch=s.ingest_batch_max,
                max_runners=s.ingest_batch_runners,
                delay=s.ingest_commit_delay_ms / 1000,
            )

    async def ingest_event(
        self,
        body: Mapping[str, JSON],
        caller: ExecutionGrant | ServiceIdentity,
        idempotency_key: str | None = None,
        token: str | None = None,
        traceparent: str | None = None,
    ) -> Response:
        """Ingest one event. ``token``: the execution token ``caller`` was verified from; a
        STEP_HEARTBEAT sent with a token in its renewal window is answered a renewed one
        (``executionToken``, ``expiresAt``, ``expiresInSeconds``: :meth:`ServiceContext.renewal`).
        ``traceparent``: the caller's span (the request's), parent of the transaction's span."""
        core = self.core
        core.schemas.require("task-event", body, "INVALID_EVENT")
        if idempotency_key is not None and idempotency_key != body["eventId"]:
            raise invalid("IDEMPOTENCY_KEY_MISMATCH", "Idempotency-Key must equal eventId")
        event = parse_event(body, core.settings.user_message_limit)
        now = core.clock()
        due = None
        if (
            token is not None
            and isinstance(caller, ExecutionGrant)
            and event.event_type is EventType.STEP_HEARTBEAT
        ):
            due = core.tokens.due_on_heartbeat(token, now)
        if traceparent is not None and not core.tracing.enabled:
            traceparent = None  # untraced: no row carries a context
        item = PendingEvent(event, caller, canonical_hash(body), now, due, traceparent)
        if self.group is None:
            if traceparent is not None:
                result = (await self._traced_batch([item]))[0]
                if isinstance(result, Exception):
                    raise result
                return result
            return await self._one(item)
        return await self.group.submit(item)

    async def replay_duplicate(
        self, body: Mapping[str, JSON], producer_id: str, idempotency_key: str | None
    ) -> Response | None:
        """Idempotency first (seed §3.2): the stored first result of ``body`` when it is an exact
        duplicate (same eventId, task and canonical body) of an event ``producer_id`` reported, with
        ``duplicate: true``; None for anything else (nothing is written either way)."""
        core = self.core
        try:
            core.schemas.require("task-event", body, "INVALID_EVENT")
        except DomainError:
            return None
        if body["producerId"] != producer_id or idempotency_key not in (None, body["eventId"]):
            return None
        async with core.engine.connect() as conn:
            row = (await repo.get_dedups(conn, [str(body["eventId"])])).get(str(body["eventId"]))
        if row is None or row["task_id"] != body["taskId"] or row["payload_hash"] != canonical_hash(body):
            return None
        return {**row["result"], "duplicate": True}

    async def _run_batch(self, items: Sequence[PendingEvent]) -> list[Response | Exception]:
        if self.core.tracing.enabled:
            return await self._traced_batch(items)
        return await self._run_untraced(items)

    async def _traced_batch(self, items: Sequence[PendingEvent]) -> list[Response | Exception]:
        """The batch's transaction as one span: a child of the first traced event's request span
        (a root when none is), linked to the others'. The outbox rows of the events of that first
        trace carry this span's context; the others carry their own request's (their traces still
        reach the relay)."""
        tracing = self.core.tracing
        first = next((i.traceparent for i in items if i.traceparent), None)
        links = sorted({i.traceparent for i in items if i.traceparent and i.traceparent != first})
        with tracing.span(
            "status_api.transaction",
            # "" = a root: the group-commit runner task still holds the context of the request
            # that started it, which is not this batch's parent.
            parent=first or "",
            links=links,
            attributes={"taskcast.batch_size": len(items)},
        ) as span:
            own = tracing.traceparent(span)
            trace_id = (first or "")[3:35]
            items = [
                dataclasses.replace(i, traceparent=own) if (i.traceparent or "")[3:35] == trace_id else i
                for i in items
            ]
            results = await self._run_untraced(items)
            failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, DomainError)]
            if failed:  # a refusal (DomainError) is an answer, not a failure of the transaction
                tracing.mark_error(span, type(failed[0]).__name__)
            return results

    async def _run_untraced(self, items: Sequence[PendingEvent]) -> list[Response | Exception]:
        try:
            return await self.core.transact(functools.partial(self.decide_batch, items=items), retries=1)
        except Exception as exc:
            if len(items) > 1:
                cause = str(getattr(exc, "orig", None) or exc)[:200]
                log.warning(
                    "ingest batch of %d failed (%s: %s); one transaction per event",
                    len(items),
                    type(exc).__name__,
                    cause,
                )
        out: list[Response | Exception] = []
        for item in items:
            try:
                out.append(await self._one(item))
            except Exception as exc:
                out.append(exc)
        return out

    async def _one(self, item: PendingEvent) -> Response:
        result = (await self.core.transact(functools.partial(self.decide_batch, items=[item])))[0]
        if isinstance(result, Exception):
            raise result
        return result

    async def decide_batch(
        self, conn: AsyncConnection, items: Sequence[PendingEvent]
    ) -> Decision[list[Response | Exception]]:
        """Decide ``items`` in order inside the open transaction: one result or error each, and
        every accepted event's Change for the one writer.

        Domain rejections (``DomainError``) are returned in place and leave nothing to write;
        storage errors propagate (the batch rolls back and falls back to one transaction per event).
        """
        tasks, steps, stored = await repo.lock_batch(
            conn,
            (i.event.task_id for i in items),
            (i.event.event_id for i in items if i.event.event_type is not EventType.STEP_HEARTBEAT),
        )
        batch = _Batch(
            tasks, steps, {k: (r["task_id"], r["payload_hash"], r["result"]) for k, r in stored.items()}
        )
        out: list[Response | Exception] = []
        for item in items:
            try:
                out.append(await self._apply(conn, batch, item))
            except DomainError as exc:
                out.append(exc)
        return Decision(batch.changes, out)

    async def _apply(self, conn: AsyncConnection, b: _Batch, item: PendingEvent) -> Response:
        core, event = self.core, item.event
        task = b.tasks.get(event.task_id)
        if task is None:
            raise not_found()
        steps = b.steps[task.id]
        step = steps.get(event.step_id) if event.step_id else None
        ingest.authorize(event, item.caller, task, step)
        defs = await core.task_definitions(conn, task)
        ingest.check_registered(event, defs, core.schemas.validate_data, core.settings.max_data_bytes)
        heartbeat = event.event_type is EventType.STEP_HEARTBEAT
        if not heartbeat:
            prior = b.dedup.get(event.event_id)
            if prior is not None:
                prior_task, prior_hash, prior_result = prior
                if prior_hash != item.payload_hash or prior_task != task.id:
                    raise conflict("EVENT_ID_CONFLICT", "eventId was already used with different content")
                return {**prior_result, "duplicate": True}
        now = core.clock()
        seq_key = (task.id, event.producer_id, event.task_attempt)
        if event.is_step_event:
            outcome = ingest.apply_step_event(task, steps, event, defs, now)
        else:
            if seq_key not in b.task_seqs:
                b.task_seqs[seq_key] = await repo.last_task_level_seq(conn, *seq_key)
            outcome = ingest.apply_task_event(task, steps, event, defs, now, b.task_seqs[seq_key])
        if isinstance(outcome, ingest.Heartbeat):
            steps[outcome.step.step_id] = outcome.step
            return await self._heartbeat(conn, b, item, task, outcome.step, now)
        if isinstance(outcome, ingest.Stale):
            result = _response(event, task, step, now, accepted=False, stale=outcome.reason)
            if not heartbeat:
                b.changes.append(Change(at=now, dedup=self._dedup(b, item, task.id, result, now)))
            return result
        after, new_step = outcome.task, outcome.step
        if new_step is None:
            b.task_seqs[seq_key] = event.source_seq
        trigger = Trigger(
            event.event_id,
            event.event_type,
            now,
            event.step_id,
            event.operation_code,
            event.step_attempt,
            new_step.version if new_step else None,
            event.duration_ms,
            event.data,
            event.error,
        )
        result = _response(event, after, new_step, now, accepted=True)
        log_fields = {
            "producer_id": event.producer_id,
            "source_seq": event.source_seq,
            "event_type": event.event_type.value,
            "data_schema": event.data.schema if event.data else None,
            "error_code": event.error.code if event.error else None,
            # Informational (seed §3.7): the receive time stands in when the producer omits it.
            "occurred_at": event.occurred_at or item.received_at,
            "received_at": item.received_at,
            "duration_ms": event.duration_ms,
            "payload": _event_payload(event),
        }
        dedup = self._dedup(b, item, task.id, result, now)
        coalesce, due_at = False, None
        if event.event_type is EventType.STEP_PROGRESS:
            # Seed §3.5/§9.1: progress is throttled and overwritable: its rows are due when the
            # task's progress window allows, and replace the task's older supersedable rows still
            # waiting for a relay (storage/write.py coalesce, due_at). The projections do not show
            # the window, so the version is projected from the task that carries it.
            window = progress_window.window_ms(defs.operations, core.settings.progress_min_interval_ms)
            due = progress_window.progress_due(task.progress_due_at, now, timedelta(milliseconds=window))
            after = dataclasses.replace(after, progress_due_at=due)
            outcome = ingest.Applied(after, new_step)
            coalesce, due_at = True, due if due > now else None
        change = version_change(
            task,
            steps,
            outcome,
            defs,
            trigger,
            log_fields,
            dedup=dedup,
            coalesce=coalesce,
            due_at=due_at,
            traceparent=item.traceparent,
        )
        b.changes.append(change)
        b.tasks[task.id] = after
        if new_step is not None:
            steps[new_step.step_id] = new_step
        return result

    async def _heartbeat(
        self,
        conn: AsyncConnection,
        b: _Batch,
        item: PendingEvent,
        task: TaskState,
        step: StepState,
        now: datetime,
    ) -> Response:
        """An accepted heartbeat: liveness only, plus a renewed token when it is due."""
        result = _response(item.event, task, step, now, accepted=True)
        renewals: tuple[dict[str, JSON], ...] = ()
        if item.renewal is not None:
            grant, chain_started = item.renewal
            try:
                renewed, row = await self.core.renewal(
                    conn, task, b.steps[task.id], grant, chain_started, now
                )
            except DomainError as exc:
                # The heartbeat still counts; the renewal endpoint gives the same refusal.
                log.info("heartbeat renewal of %s/%s refused: %s", task.id, grant.step_id, exc.code)
            else:
                for name in ("executionToken", "expiresAt", "expiresInSeconds"):
                    result[name] = renewed[name]
                renewals = (row,)
        b.changes.append(Change(at=now, steps=(step,), renewals=renewals))
        return result

    @staticmethod
    def _dedup(b: _Batch, item: PendingEvent, task_id: str, result: Response, now: datetime) -> DedupRow:
        """Remember the first result of an eventId (later events of the batch see it)."""
        b.dedup[item.event.event_id] = (task_id, item.payload_hash, result)
        return DedupRow(item.event.event_id, task_id, item.payload_hash, result, now)


def _response(
    event: Event,
    task: TaskState,
    step: StepState | None,
    now: datetime,
    *,
    accepted: bool,
    stale: str | None = None,
) -> Response:
    out: Response = {
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
