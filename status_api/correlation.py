"""What ties one event's change together across traces and logs (seed §14.2): the event POST's
OpenTelemetry server span (``opentelemetry.enabled``; httpwire/tracing.py owns the tracer), the ids
an answered event puts on it, and the event's audit line (``status_api.audit``: traceId when
tracing, eventId, taskId, stepId, type, operationCode, attempts, sourceSeq, dataSchema, errorCode,
taskVersion; never a token or a payload). The ingest transaction's span is the use case's
(service/ingest.py). Imports nothing of the routes: they hand their answer in.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any

from httpwire.tracing import EVENT_ID, TASK_ID, TRACEPARENT, VERSION, Tracing

audit = logging.getLogger("status_api.audit")

EVENT_ROUTE = "/internal/v1/task-events"
_EVENT_ATTRIBUTES = {"http.request.method": "POST", "http.route": EVENT_ROUTE}


async def event_span(
    tracing: Tracing, headers: Mapping[str, str], answer: Awaitable[tuple[int, bytes]]
) -> tuple[int, bytes]:
    """``answer`` (the event route's ``(status, body)``) inside a server span named ``POST
    /internal/v1/task-events``, a child of the request's ``traceparent``; a 5xx marks it failed."""
    with tracing.span(
        f"POST {EVENT_ROUTE}", parent=headers.get(TRACEPARENT), kind="server", attributes=_EVENT_ATTRIBUTES
    ) as span:
        status, body = await answer
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            tracing.mark_error(span, f"HTTP {status}")
        return status, body


def annotate_event(tracing: Tracing, answer: Mapping[str, Any]) -> None:
    """Put an ingested event's ``eventId``, ``taskId`` and ``taskVersion`` on the current span."""
    span = tracing.current_span()
    span.set_attribute(EVENT_ID, str(answer["eventId"]))
    span.set_attribute(TASK_ID, str(answer["taskId"]))
    span.set_attribute(VERSION, int(str(answer["taskVersion"])))


def log_event(producer_id: str, body: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
    """The audit line of an answered event (``body``: the validated request)."""
    if not audit.isEnabledFor(logging.INFO):
        return
    data, error = body.get("data") or {}, body.get("error") or {}
    audit.info(
        "event producer=%s event=%s task=%s type=%s step=%s op=%s attempt=%s/%s seq=%s schema=%s"
        " error=%s accepted=%s duplicate=%s stale=%s version=%s",
        producer_id,
        answer["eventId"],
        answer["taskId"],
        body.get("eventType"),
        body.get("stepId"),
        body.get("operationCode"),
        body.get("taskAttempt"),
        body.get("stepAttempt"),
        body.get("sourceSeq"),
        data.get("schema"),
        error.get("code"),
        answer["accepted"],
        answer["duplicate"],
        answer["stale"],
        answer["taskVersion"],
    )
