"""Heartbeats, the health reconciler (STALE is not FAILED), failure policies, retries, corrections."""

from __future__ import annotations

import sqlalchemy as sa

from status_api.storage.tables import task_event_log
from tests.status_api.harness import ADMIN, COORDINATOR, POLICY, Harness, auth


async def test_heartbeat_updates_liveness_without_version_or_publication(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    rows = len(await h.outbox_rows())
    h.clock.advance(30)
    r = await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert (r["accepted"], r["taskVersion"]) == (True, "2")
    assert len(await h.outbox_rows()) == rows
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert snap["version"] == "2" and snap["steps"][1]["lastHeartbeatAt"] is not None


async def test_stale_only_changes_health_never_failed(h: Harness) -> None:
    """STALE 只改变健康状态，不会被误报成业务 FAILED"""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    rec = h.comp.reconciler
    h.clock.advance(59)
    assert await rec.run_once() == 0
    h.clock.advance(2)
    assert await rec.run_once() == 1
    assert await rec.run_once() == 0  # idempotent
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert (snap["version"], snap["lifecycleStatus"], snap["health"]) == ("3", "RUNNING", "STALE")
    assert (snap["steps"][1]["lifecycleStatus"], snap["steps"][1]["health"]) == ("RUNNING", "STALE")
    pubs = await h.outbox_publications(t.id)
    summary = [r for r in pubs if r["projection"] == "USER_SUMMARY"][-1]["payload"]
    assert summary["notice"]["type"] == "TASK_STALE" and summary["task"]["lifecycleStatus"] == "RUNNING"
    # heartbeats resume -> HEALTHY with a new version
    await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert await rec.run_once() == 1
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert (snap["version"], snap["health"], snap["steps"][1]["health"]) == ("4", "HEALTHY", "HEALTHY")
    types = [r[0] for r in await _events(h)]
    assert types.count("STEP_HEALTH_CHANGED") == 2 and "STEP_FAILED" not in types


async def _events(h: Harness) -> list[tuple[str]]:
    async with h.comp.engine.connect() as conn:
        q = sa.select(task_event_log.c.event_type).order_by(task_event_log.c.task_version)
        return [tuple(r) for r in await conn.execute(q)]  # type: ignore[misc]


async def test_failure_policies(h: Harness) -> None:
    t = await h.create_task()
    # CONTINUE_WITH_WARNING -> DEGRADED, task keeps running
    await h.report(t, "03_store", "STEP_STARTED", "PERSISTING")
    await h.report(
        t,
        "03_store",
        "STEP_FAILED",
        "PERSIST_FAILED",
        error={"category": "DEPENDENCY", "code": "S3_DOWN", "retryable": True},
    )
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert (snap["lifecycleStatus"], snap["health"]) == ("RUNNING", "DEGRADED")
    # RETRY_THEN_FAIL_TASK: attempts up to maxAttempts (3), then exhausted; task never failed implicitly
    for attempt in (1, 2, 3):
        await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
        await h.report(
            t,
            "02_parse",
            "STEP_FAILED",
            "PARSE_FAILED",
            error={"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True},
        )
        r = await h.http.post(f"/internal/v1/tasks/{t.id}/steps/02_parse/attempts", headers=auth(COORDINATOR))
        if attempt < 3:
            assert r.status_code == 201, r.text
            t.steps["02_parse"] = type(t.steps["02_parse"])(r.json())
        else:
            assert r.status_code == 409 and r.json()["error"]["code"] == "ATTEMPTS_EXHAUSTED"
    assert (await h.user_get(f"/api/tasks/{t.id}"))["lifecycleStatus"] == "RUNNING"
    # a registered policy executor commits TASK_FAILED
    r = await h.task_event(
        t,
        "TASK_FAILED",
        "REJECTED",
        token=POLICY,
        producer="policy-executor",
        failedStepId="02_parse",
        error={
            "category": "DEPENDENCY",
            "code": "OCR_TIMEOUT",
            "retryable": False,
            "userMessage": "OCR kept timing out",
        },
    )
    assert r["lifecycleStatus"] == "FAILED"
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert (snap["failedStepId"], snap["failureCode"], snap["failureMessage"]) == (
        "02_parse",
        "OCR_TIMEOUT",
        "OCR kept timing out",
    )


async def test_admin_correction_records_operator_reason_old_and_new(h: Harness) -> None:
    t = await h.create_task()
    await h.task_event(
        t, "TASK_FAILED", "REJECTED", error={"category": "SYSTEM", "code": "X", "retryable": False}
    )
    r = await h.http.post(
        f"/admin/v1/tasks/{t.id}/corrections",
        json={"reason": "false alarm", "businessStatus": "COMPLETED"},
        headers=auth(COORDINATOR),
    )
    assert r.status_code == 403
    r = await h.http.post(
        f"/admin/v1/tasks/{t.id}/corrections",
        json={"reason": "false alarm, verified output", "businessStatus": "COMPLETED"},
        headers=auth(ADMIN),
    )
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["operator"] == "ops-alice" and out["old"]["lifecycleStatus"] == "FAILED"
    assert out["new"]["lifecycleStatus"] == "SUCCEEDED" and out["taskVersion"] == "3"
    async with h.comp.engine.connect() as conn:
        row = (
            (await conn.execute(sa.select(task_event_log).where(task_event_log.c.task_version == 3)))
            .mappings()
            .one()
        )
    assert (
        row["event_type"] == "ADMIN_CORRECTION" and row["payload"]["reason"] == "false alarm, verified output"
    )
    assert row["producer_id"] == "admin:ops-alice"
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert (snap["lifecycleStatus"], snap["failureCode"]) == ("SUCCEEDED", None)


async def test_create_task_idempotency_key_and_registry_validation(h: Harness) -> None:
    body = {
        "tenantId": "t1",
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "x",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": [{"stepId": "a", "operationCode": "FILE.PREPARE", "producerId": "file-worker-2"}],
    }
    hdr = {**auth(COORDINATOR), "Idempotency-Key": "create-0001"}
    first = await h.http.post("/internal/v1/tasks", json=body, headers=hdr)
    again = await h.http.post("/internal/v1/tasks", json=body, headers=hdr)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["taskId"] == again.json()["taskId"] and again.json()["taskVersion"] == "1"
    bad = {**body, "steps": [{"stepId": "a", "operationCode": "RESULT.PERSIST", "producerId": "file-worker"}]}
    r = await h.http.post("/internal/v1/tasks", json=bad, headers=auth(COORDINATOR))
    assert r.status_code == 403 and r.json()["error"]["code"] == "PRODUCER_NOT_ALLOWED"
    r = await h.http.post(
        "/internal/v1/tasks", json={**body, "operationDefinitionVersion": 9}, headers=auth(COORDINATOR)
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "UNKNOWN_DEFINITION_VERSION"
    r = await h.http.post(
        "/internal/v1/tasks",
        json={**body, "steps": [{**body["steps"][0], "operationCode": "NOPE"}]},
        headers=auth(COORDINATOR),
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "UNKNOWN_OPERATION"
