"""One step attempt as its worker reports it (seed §3.2, §3.5, §3.7, §9.1).

:class:`AsyncStep` numbers events (``sourceSeq``, sent one at a time so the numbers reach the server
in order), gives each a fresh ``eventId`` that every retry reuses, stamps ``occurredAt`` and measures
``durationMs`` on the monotonic clock from ``start()``. In the background it sends heartbeats and
renews the executionToken before it expires (a step may outlast ``execution_token.ttl_seconds``):
a heartbeat's answer carries a renewed token once the server's renewal window opens (half the TTL
by default), and the renewal endpoint is the fallback when a third of the lifetime is left.
Progress is coalesced: at most one STEP_PROGRESS per ``progress_interval_seconds``; a newer value
replaces a waiting one, and the waiting one is sent when its interval ends or before the next state
change, so state changes and the last progress always reach the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self

from taskcast_worker.errors import ExecutionTokenExpired, Refused
from taskcast_worker.models import EventResult, ExecutionContext, StepError

if TYPE_CHECKING:
    from taskcast_worker.client import AsyncTaskcast

log = logging.getLogger("taskcast_worker")

EVENTS = "/internal/v1/task-events"
#: Renew when this share of the token's lifetime is left.
RENEW_AT_REMAINING = 1 / 3


def new_event_id() -> str:
    return f"evt-{uuid.uuid4().hex}"


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AsyncStep:
    """Reports one step attempt. Use as ``async with client.step(ctx) as step:`` (starts and stops
    the background heartbeat/renewal task), then ``await step.start(status)``, ``progress(...)``,
    ``complete(...)`` or ``fail(...)``.

    ``source_seq``: the last sourceSeq this attempt already used (a worker resuming the same
    attempt after a restart passes what it persisted, seed §3.3); ``step.source_seq`` is the last
    one sent.
    """

    def __init__(
        self,
        client: AsyncTaskcast,
        ctx: ExecutionContext,
        *,
        source_seq: int = 0,
        heartbeat_interval_seconds: float = 15.0,
        progress_interval_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ctx = ctx
        self.source_seq = source_seq
        self.heartbeat_interval_seconds = heartbeat_interval_seconds
        self.progress_interval_seconds = progress_interval_seconds
        self.renewals = 0
        self._clock = clock
        self._send_lock = asyncio.Lock()
        self._renew_lock = asyncio.Lock()
        self._started_mono: float | None = None
        self._last_progress_at: float | None = None
        self._pending_progress: dict[str, Any] | None = None
        self._flush: asyncio.Task[None] | None = None
        self._background: asyncio.Task[None] | None = None
        self._token_received = clock()
        self._finished = False

    # --- lifecycle of the helper -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._background = asyncio.create_task(self._keepalive(), name=f"taskcast-step-{self.ctx.step_id}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Send a waiting progress, stop the background task."""
        with contextlib.suppress(Refused):
            await self._flush_progress()
        for task in (self._flush, self._background):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._flush = self._background = None

    @property
    def token(self) -> str:
        return self.ctx.execution_token

    # --- reports -----------------------------------------------------------------------------------

    async def start(self, business_status: str, **extra: Any) -> EventResult:
        """STEP_STARTED; starts the monotonic duration clock (seed §3.7)."""
        self._started_mono = self._clock()
        return await self._state("STEP_STARTED", business_status, extra)

    async def progress(
        self,
        business_status: str,
        current: float,
        total: float | None = None,
        unit: str | None = None,
        *,
        data: Mapping[str, Any] | None = None,
    ) -> EventResult | None:
        """STEP_PROGRESS, coalesced: sent now when the interval since the last one has passed, else
        kept (replacing an older waiting one) and sent later; None when kept."""
        prog: dict[str, Any] = {"current": current}
        if total is not None:
            prog["total"] = total
        if unit is not None:
            prog["unit"] = unit
        fields: dict[str, Any] = {"businessStatus": business_status, "progress": prog}
        if data is not None:
            fields["data"] = dict(data)
        now = self._clock()
        due = (
            None
            if self._last_progress_at is None
            else self._last_progress_at + self.progress_interval_seconds
        )
        if due is None or now >= due:
            self._pending_progress = None
            return await self._send_progress(fields)
        self._pending_progress = fields
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._flush_at(due))
        return None

    async def complete(
        self,
        business_status: str,
        *,
        data: Mapping[str, Any] | None = None,
        progress: Mapping[str, Any] | None = None,
        duration_ms: int | None = None,
    ) -> EventResult:
        """STEP_COMPLETED with the monotonic ``durationMs`` (or ``duration_ms``)."""
        extra: dict[str, Any] = {}
        if data is not None:
            extra["data"] = dict(data)
        if progress is not None:
            extra["progress"] = dict(progress)
        return await self._finish("STEP_COMPLETED", business_status, extra, duration_ms)

    async def fail(
        self, business_status: str, error: StepError, *, duration_ms: int | None = None
    ) -> EventResult:
        """STEP_FAILED with a structured error (seed §4.4)."""
        return await self._finish("STEP_FAILED", business_status, {"error": error.to_json()}, duration_ms)

    async def heartbeat(self) -> EventResult:
        """STEP_HEARTBEAT: liveness only (no version, no publication). When the token is in the
        server's renewal window (``execution_token.heartbeat_renewal_seconds``) the answer carries
        a renewed one, which the step uses from then on (counted in ``renewals``)."""
        sent = self._clock()
        result = await self._send("STEP_HEARTBEAT", None, {})
        token = result.raw.get("executionToken")
        if isinstance(token, str) and token:
            async with self._renew_lock:
                self.ctx = dataclasses.replace(
                    self.ctx,
                    execution_token=token,
                    expires_at=str(result.raw["expiresAt"]),
                    expires_in_seconds=float(result.raw["expiresInSeconds"]),
                )
                self._token_received = sent
                self.renewals += 1
            log.info(
                "executionToken of %s/%s renewed by a heartbeat (expires %s)",
                self.ctx.task_id,
                self.ctx.step_id,
                self.ctx.expires_at,
            )
        return result

    async def renew(self) -> ExecutionContext:
        """A new executionToken for this attempt (``POST /internal/v1/execution-tokens/renew``)."""
        async with self._renew_lock:
            received = self._clock()
            out = await self.client.transport.post(
                "/internal/v1/execution-tokens/renew", None, lambda: self.ctx.execution_token
            )
            self.ctx = ExecutionContext.from_json(out)
            self._token_received = received
            self.renewals += 1
            log.info(
                "renewed executionToken of %s/%s (expires %s)",
                self.ctx.task_id,
                self.ctx.step_id,
                self.ctx.expires_at,
            )
            return self.ctx

    # --- internals -----------------------------------------------------------------------------

    async def _finish(
        self, event_type: str, business_status: str, extra: dict[str, Any], duration_ms: int | None
    ) -> EventResult:
        if duration_ms is None and self._started_mono is not None:
            duration_ms = int((self._clock() - self._started_mono) * 1000)
        if duration_ms is not None:
            extra["durationMs"] = duration_ms
        result = await self._state(event_type, business_status, extra)
        self._finished = True
        return result

    async def _state(self, event_type: str, business_status: str, extra: dict[str, Any]) -> EventResult:
        """A state change: the waiting progress goes first, then this event."""
        await self._flush_progress()
        return await self._send(event_type, business_status, extra)

    async def _flush_progress(self) -> None:
        flush, self._flush = self._flush, None
        if flush is not None and flush is not asyncio.current_task() and not flush.done():
            if self._pending_progress is not None:
                flush.cancel()  # still waiting for its interval: its value is sent below instead
            # else it is sending the value it took: let it finish (cancelling could lose it)
            with contextlib.suppress(asyncio.CancelledError, Refused):
                await flush
        pending, self._pending_progress = self._pending_progress, None
        if pending is not None:
            await self._send_progress(pending)

    async def _flush_at(self, due: float) -> None:
        await asyncio.sleep(max(0.0, due - self._clock()))
        pending, self._pending_progress = self._pending_progress, None
        if pending is not None:
            try:
                await self._send_progress(pending)
            except Refused as exc:
                log.warning("coalesced progress of %s refused: %s", self.ctx.step_id, exc.code)

    async def _send_progress(self, fields: dict[str, Any]) -> EventResult:
        self._last_progress_at = self._clock()
        business = fields.pop("businessStatus")
        return await self._send("STEP_PROGRESS", business, fields)

    async def _send(self, event_type: str, business_status: str | None, extra: dict[str, Any]) -> EventResult:
        async with self._send_lock:
            self.source_seq += 1
            c = self.ctx
            body: dict[str, Any] = {
                "eventId": new_event_id(),
                "taskId": c.task_id,
                "taskType": c.task_type,
                "taskAttempt": c.task_attempt,
                "stepId": c.step_id,
                "operationCode": c.operation_code,
                "stepAttempt": c.step_attempt,
                "producerId": c.producer_id,
                "sourceSeq": self.source_seq,
                "eventType": event_type,
                "occurredAt": utc_now_iso(),
                **extra,
            }
            if business_status is not None:
                body["businessStatus"] = business_status
            return await self._post_event(body)

    async def _post_event(self, body: dict[str, Any]) -> EventResult:
        key = str(body["eventId"])
        try:
            out = await self.client.transport.post(
                EVENTS, body, lambda: self.ctx.execution_token, idempotency_key=key
            )
        except ExecutionTokenExpired:
            # Expired while the event was on its way (a pause, an outage): renew within the
            # server's grace and resend the same eventId and body (answered once, seed §3.5).
            await self.renew()
            out = await self.client.transport.post(
                EVENTS, body, lambda: self.ctx.execution_token, idempotency_key=key
            )
        return EventResult.from_json(out)

    def _renew_due(self) -> float | None:
        lifetime = self.ctx.expires_in_seconds
        if lifetime is None:
            return None
        return self._token_received + lifetime * (1 - RENEW_AT_REMAINING)

    async def _keepalive(self) -> None:
        """Heartbeats every ``heartbeat_interval_seconds`` and renewals before expiry, until the
        attempt finishes. Failures are logged, never raised: the foreground reports decide."""
        next_beat = self._clock() + self.heartbeat_interval_seconds
        beats = "STEP_HEARTBEAT" in self.ctx.allowed_event_types
        while not self._finished:
            renew_at = self._renew_due()
            wake = min(next_beat, renew_at) if renew_at is not None else next_beat
            await asyncio.sleep(max(0.0, wake - self._clock()))
            if self._finished:
                return
            try:
                if renew_at is not None and self._clock() >= renew_at:
                    await self.renew()
                if self._clock() >= next_beat:
                    next_beat = self._clock() + self.heartbeat_interval_seconds
                    if beats and (self._started_mono is not None or self.source_seq > 0):
                        r = await self.heartbeat()
                        if r.stale:
                            return  # the attempt is over (terminal or superseded)
            except Refused as exc:
                log.warning("background report of %s refused: %s", self.ctx.step_id, exc.code)
                if exc.status in (401, 403, 404, 409):
                    return
            except Exception as exc:  # a task boundary: log, keep beating
                log.warning("background report of %s failed: %s", self.ctx.step_id, exc)
