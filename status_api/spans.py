"""The Status API's OpenTelemetry spans (``opentelemetry.enabled``; httpwire/tracing.py owns the
tracer): the event POST as a server span, and the ids an answered event adds to it. The ingest
transaction's span is the use case's (service/ingest.py). Imports nothing of the routes: they
hand their answer in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from httpwire.tracing import EVENT_ID, TASK_ID, TRACEPARENT, VERSION, Tracing

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
