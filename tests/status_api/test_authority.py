"""Who may change a task (issue 14 defects 5 and 6), on SQLite and MariaDB.

* Coordinator authority (seed §3.5, §3.9, §4.4): a task is bound at creation to the coordinator that
  created it (and its tenant); only that coordinator reports TASK_* events, opens attempts and
  replays the creation, and a registered failure-policy executor may only fail it.
* A terminal task never changes (seed §4.2) — not by the reconciler's STEP_HEALTH_CHANGED, a
  heartbeat, a step event or a new attempt — except by an audited admin correction.
"""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
import sqlalchemy as sa

from status_api.domain.errors import DomainError
from status_api.domain.model import Health, ServiceIdentity
from status_api.storage.tables import task, task_event_log
from tests.status_api.harness import (
    ADMIN,
    COORDINATOR,
    POLICY,
    SERVICE_SECRET,
    Harness,
    auth,
    service_token,
)

OTHER = service_token("other-coordinator", ["coordinator"])
ERROR = {"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": False}


async def _version(h: Harness, task_id: str) -> int:
    return int(await h.scalar(sa.select(task.c.version).where(task.c.id == task_id)))


async def _event_types(h: Harness, task_id: str) -> list[str]:
    async with h.comp.engine.connect() as conn:
        q = (
            sa.select(task_event_log.c.event_type)
            .where(task_event_log.c.task_id == task_id)
            .order_by(task_event_log.c.task_version)
        )
        return [r[0] for r in await conn.execute(q)]


# --- defect 5: coordinator authority --------------------------------------------------------------


async def test_another_coordinator_cannot_complete_cancel_or_fail_the_task(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    for event_type, business in (
        ("TASK_COMPLETED", "COMPLETED"),
        ("TASK_CANCELLED", "CANCELLED"),
        ("TASK_FAILED", "REJECTED"),
    ):
        extra = {"error": ERROR} if event_type == "TASK_FAILED" else {}
        r = await h.task_event(
            t, event_type, business, token=OTHER, producer="other-coordinator", expect=403, **extra
        )
        assert r["error"]["code"] == "COORDINATOR_MISMATCH"
    assert await _version(h, t.id) == 2
    # the task's own coordinator still completes it
    done = await h.task_event(t, "TASK_COMPLETED", "COMPLETED")
    assert (done["lifecycleStatus"], done["taskVersion"]) == ("SUCCEEDED", "3")


async def test_registered_policy_executor_may_fail_but_not_complete(h: Harness) -> None:
    t = await h.create_task()
    r = await h.task_event(
        t, "TASK_COMPLETED", "COMPLETED", token=POLICY, producer="policy-executor", expect=403
    )
    assert r["error"]["code"] == "ROLE_REQUIRED"
    failed = await h.task_event(
        t, "TASK_FAILED", "REJECTED", token=POLICY, producer="policy-executor", error=ERROR
    )
    assert failed["lifecycleStatus"] == "FAILED"


async def test_another_coordinator_cannot_open_attempts(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(
        t,
        "02_parse",
        "STEP_FAILED",
        "PARSE_FAILED",
        error={**ERROR, "retryable": True},
    )
    path = f"/internal/v1/tasks/{t.id}/steps/02_parse/attempts"
    r = await h.http.post(path, headers=auth(OTHER))
    assert r.status_code == 403 and r.json()["error"]["code"] == "COORDINATOR_MISMATCH"
    ok = await h.http.post(path, headers=auth(COORDINATOR))
    assert ok.status_code in (200, 201) and ok.json()["stepAttempt"] == 2, ok.text


async def test_another_coordinator_cannot_replay_the_creation_for_fresh_tokens(h: Harness) -> None:
    body: dict[str, Any] = {
        "tenantId": "t1",
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "Contract parsing",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
    }
    key = {"Idempotency-Key": "create-authority-1"}
    first = await h.http.post("/internal/v1/tasks", json=body, headers={**auth(COORDINATOR), **key})
    assert first.status_code == 201, first.text
    r = await h.http.post("/internal/v1/tasks", json=body, headers={**auth(OTHER), **key})
    assert r.status_code == 403 and r.json()["error"]["code"] == "COORDINATOR_MISMATCH"
    assert "executionToken" not in r.text
    again = await h.http.post("/internal/v1/tasks", json=body, headers={**auth(COORDINATOR), **key})
    assert again.json()["duplicate"] is True


async def test_a_tenant_bound_coordinator_acts_only_in_its_tenant(h: Harness) -> None:
    t = await h.create_task(tenant="t1")
    body = {
        "tenantId": "t1",
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "x",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
    }
    bound = ServiceIdentity("task-coordinator", frozenset({"coordinator"}), tenant_id="t2")
    with pytest.raises(DomainError) as exc:
        await h.service.create_task(body, bound)
    assert exc.value.code == "TENANT_MISMATCH"
    event = {
        "eventId": "evt-tenant-bound-1",
        "taskId": t.id,
        "taskAttempt": 1,
        "producerId": "task-coordinator",
        "sourceSeq": 1,
        "eventType": "TASK_CANCELLED",
        "businessStatus": "CANCELLED",
        "occurredAt": "2026-09-21T07:11:00Z",
    }
    with pytest.raises(DomainError) as exc:
        await h.service.ingest_event(event, bound)
    assert exc.value.code == "TENANT_MISMATCH"
    same = ServiceIdentity("task-coordinator", frozenset({"coordinator"}), tenant_id="t1")
    assert (await h.service.ingest_event(event, same))["lifecycleStatus"] == "CANCELLED"


# --- defect 6: a terminal task never changes, except by an audited correction -------------------


async def test_reconciler_never_appends_health_changes_after_a_terminal_event(h: Harness) -> None:
    """The issue's case: TASK_CANCELLED at v3 while a step still runs; after the heartbeat timeout
    (a restart) the reconciler must not append STEP_HEALTH_CHANGED at v4."""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    cancelled = await h.task_event(t, "TASK_CANCELLED", "CANCELLED")
    assert cancelled["taskVersion"] == "3"
    rows = len(await h.outbox_rows(t.id))
    h.clock.advance(3600)
    assert await h.comp.reconciler.run_once() == 0
    assert await _version(h, t.id) == 3
    assert len(await h.outbox_rows(t.id)) == rows
    assert "STEP_HEALTH_CHANGED" not in await _event_types(h, t.id)
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert (snap["lifecycleStatus"], snap["health"]) == ("CANCELLED", "HEALTHY")
    # the reconciler's write itself refuses too (a candidate found before the cancel commits)
    cutoff = h.clock() - h.comp.reconciler.timeout
    assert await h.service.apply_health(t.id, "02_parse", 1, Health.STALE, cutoff) is False
    assert await _version(h, t.id) == 3


async def test_a_stale_step_of_a_terminal_task_is_not_flipped_back_to_healthy(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    h.clock.advance(61)
    assert await h.comp.reconciler.run_once() == 1  # STALE at v3
    await h.task_event(t, "TASK_FAILED", "REJECTED", error=ERROR)  # v4
    cutoff = h.clock() - h.comp.reconciler.timeout
    h.clock.advance(1)
    assert await h.service.apply_health(t.id, "02_parse", 1, Health.HEALTHY, h.clock()) is False
    assert await h.service.apply_health(t.id, "02_parse", 1, Health.STALE, cutoff) is False
    assert await h.comp.reconciler.run_once() == 0
    assert await _version(h, t.id) == 4


async def test_worker_reports_after_the_terminal_event_change_nothing(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.task_event(t, "TASK_CANCELLED", "CANCELLED")
    beat = await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert (beat["accepted"], beat["stale"], beat["taskVersion"]) == (False, True, "3")
    r = await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING", expect=409)
    assert r["error"]["code"] == "TASK_TERMINAL"
    r = await h.report(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED", expect=409)
    assert r["error"]["code"] == "TASK_TERMINAL"
    again = await h.task_event(t, "TASK_COMPLETED", "COMPLETED", expect=409)
    assert again["error"]["code"] == "TASK_TERMINAL"
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert snap["version"] == "3" and snap["steps"][1]["lastHeartbeatAt"] == snap["steps"][1]["startedAt"]


async def test_only_an_audited_admin_correction_changes_a_terminal_task(h: Harness) -> None:
    t = await h.create_task()
    await h.task_event(t, "TASK_CANCELLED", "CANCELLED")
    r = await h.http.post(
        f"/admin/v1/tasks/{t.id}/corrections",
        json={"businessStatus": "QUEUED", "reason": "cancelled by mistake"},
        headers=auth(ADMIN),
    )
    assert r.status_code in (200, 201), r.text
    out = r.json()
    assert (out["operator"], out["reason"]) == ("ops-alice", "cancelled by mistake")
    assert (out["old"]["lifecycleStatus"], out["new"]["lifecycleStatus"]) == ("CANCELLED", "PENDING")
    assert (await _event_types(h, t.id))[-1] == "ADMIN_CORRECTION"


async def test_a_tenant_claim_on_the_service_jwt_binds_the_coordinator_over_http(h: Harness) -> None:
    claims = {
        "sub": "task-coordinator",
        "roles": ["coordinator"],
        "tenant": "t2",
        "exp": int(time.time()) + 600,
    }
    t2_only = jwt.encode(claims, SERVICE_SECRET, "HS256")
    t = await h.create_task(tenant="t1")
    body = {
        "tenantId": "t1",
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "x",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
    }
    r = await h.http.post("/internal/v1/tasks", json=body, headers=auth(t2_only))
    assert r.status_code == 403 and r.json()["error"]["code"] == "TENANT_MISMATCH"
    out = await h.task_event(t, "TASK_CANCELLED", "CANCELLED", token=t2_only, expect=403)
    assert out["error"]["code"] == "TENANT_MISMATCH"
    assert await _version(h, t.id) == 1
