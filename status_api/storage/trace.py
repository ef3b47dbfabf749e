"""Where one event went: eventId → the task version it produced → that version's outbox rows
(channel, projection, status, attempts, commit and publish times, the last error). Read-only, for
operators (``taskcast trace EVENT_ID``, docs/operations.md *Tracing an event*); no payloads (they
may hold user data) and nothing a caller must not log.

A PUBLISHED row deleted by the relay's retention (``retention_seconds``) is gone from the table:
the trace then shows the event and its version with no rows, and says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.outbox import VERSION_PROJECTION, MalformedRow, decode_publications
from status_api.storage.tables import task, task_event_log, task_outbox


@dataclass(frozen=True, slots=True)
class TracedEvent:
    event_id: str
    task_id: str
    task_version: int
    event_type: str
    step_id: str | None
    step_attempt: int | None
    producer_id: str
    source_seq: int
    lifecycle_status: str
    occurred_at: datetime
    committed_at: datetime
    #: The task's version now (greater than ``task_version`` once later events landed; None if
    #: the task itself was deleted by retention).
    current_version: int | None


@dataclass(frozen=True, slots=True)
class TracedRow:
    """One publication of an outbox row: a VERSION row (``outbox.VERSION_PROJECTION``) is one
    TracedRow per publication (its channel and projection), all with the row's id and columns."""

    id: int
    channel: str
    projection: str
    status: str
    priority: int
    attempts: int
    created_at: datetime
    published_at: datetime | None
    last_error: str | None
    #: The W3C trace context stored with the row when the Status API traced it (OpenTelemetry).
    traceparent: str | None


@dataclass(frozen=True, slots=True)
class Trace:
    event: TracedEvent
    rows: tuple[TracedRow, ...]

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (timestamps as ISO-8601 UTC strings)."""

        def fix(value: Any) -> Any:
            return value.isoformat() + "Z" if isinstance(value, datetime) else value

        return {
            "event": {k: fix(v) for k, v in asdict(self.event).items()},
            "rows": [{k: fix(v) for k, v in asdict(r).items()} for r in self.rows],
        }


async def trace_event(engine: AsyncEngine, event_id: str) -> Trace | None:
    """The trace of ``event_id``, or None when no such event was ever accepted (a refused or
    unknown eventId leaves no log row)."""
    log = task_event_log.c
    event_q = (
        sa.select(
            log.event_id, log.task_id, log.task_version, log.event_type, log.step_id, log.step_attempt,
            log.producer_id, log.source_seq, log.lifecycle_status, log.occurred_at, log.committed_at,
            task.c.version,
        )
        .select_from(task_event_log.outerjoin(task, task.c.id == log.task_id))
        .where(log.event_id == event_id)
    )  # fmt: skip
    out = task_outbox.c
    async with engine.connect() as conn:
        found = (await conn.execute(event_q)).first()
        if found is None:
            return None
        event = TracedEvent(*tuple(found))
        rows = await conn.execute(
            sa.select(
                out.id, out.channel, out.projection, out.status, out.priority, out.attempts,
                out.created_at, out.published_at, out.last_error, out.traceparent,
                sa.case((out.projection == VERSION_PROJECTION, sa.type_coerce(out.payload, sa.Text))),
            )
            .where(out.aggregate_id == event.task_id, out.aggregate_version == event.task_version)
            .order_by(out.id)
        )  # fmt: skip
        return Trace(event, tuple(t for r in rows for t in _traced(tuple(r))))


def _traced(r: tuple[Any, ...]) -> list[TracedRow]:
    """The :class:`TracedRow` of each publication of a row (the selected columns, the VERSION
    payload last); a malformed VERSION payload shows as the row's own channel and projection."""
    if r[-1] is None:
        return [TracedRow(*r[:-1])]
    try:
        pubs = decode_publications(r[-1])
    except MalformedRow:
        return [TracedRow(*r[:-1])]
    return [TracedRow(r[0], p.channel, p.projection, *r[3:-1]) for p in pubs]
