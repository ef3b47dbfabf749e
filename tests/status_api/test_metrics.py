"""Status API metrics (seed §14.1): ingestion outcomes per operation code, requests per route
template, and the database-backed gauges — through the real app on SQLite and MariaDB."""

from __future__ import annotations

import re

from tests.status_api.harness import Harness


def _value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_events_requests_and_gauges_are_exported(h: Harness):
    task = await h.create_task()
    step_id = "02_parse"
    await h.report(task, step_id, "STEP_STARTED", "PARSING")
    first = h.step_event(task, step_id, "STEP_PROGRESS", "PARSING", progress={"current": 1, "total": 10})
    await h.send(first, task.steps[step_id].token)
    await h.send(first, task.steps[step_id].token)  # the same eventId again: a duplicate
    bad = h.step_event(task, step_id, "STEP_PROGRESS", "NO_SUCH_STATUS", progress={"current": 2, "total": 10})
    await h.send(bad, task.steps[step_id].token, expect=422)
    text = (await h.http.get("/metrics")).text
    op = str(task.steps[step_id].ctx["operationCode"])
    assert _value(text, "taskcast_status_api_events_total", operation_code=op, outcome="accepted") >= 2
    assert _value(text, "taskcast_status_api_events_total", operation_code=op, outcome="duplicate") == 1
    rejected = _value(
        text, "taskcast_status_api_events_total", outcome="rejected", code="UNKNOWN_BUSINESS_STATUS"
    )
    assert rejected == 1
    route = "/internal/v1/task-events"
    assert _value(text, "taskcast_status_api_requests_total", route=route, status="200") >= 3
    assert _value(text, "taskcast_status_api_requests_total", route=route, status="422") == 1
    assert not re.search(r'route="/api/tasks/[0-9a-f-]{8,}', text), "raw paths must not become labels"
    assert _value(text, "taskcast_status_api_active_tasks") == 1
    # every accepted or refused event ran in a group-commit batch of one (sent one at a time)
    assert _value(text, "taskcast_status_api_batch_events_count") >= 3
    assert _value(text, "taskcast_status_api_batch_events_bucket", le="1.0") >= 3
    assert _value(text, "taskcast_status_api_database_up") == 1
    assert _value(text, "taskcast_status_api_outbox_oldest_pending_age_seconds", priority="0") >= 0
