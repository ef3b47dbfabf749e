"""Task retries (seed §3.3, §4.1): task attempt n+1 after a failed step opens a fresh attempt of
every step; events of the old attempt are ``stale`` and never change the new one; the summary, the
detail and the timeline carry the task attempt; attempts are capped per task type (server default
``limits.max_task_attempts``). On SQLite and MariaDB."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.config import ConfigError
from tests.status_api.harness import (
    ADMIN,
    COORDINATOR,
    POLICY,
    TEST_CONFIG,
    FakeClock,
    Harness,
    Step,
    Task,
    auth,
    build,
    load_config_dict,
    service_token,
)
from tests.support import ROOT

ERROR = {"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True, "userMessage": "OCR timed out"}


async def retry_task(h: Harness, t: Task, token: str = COORDINATOR, expect: int = 201) -> dict[str, Any]:
    r = await h.http.post(f"/internal/v1/tasks/{t.id}/attempts", headers=auth(token))
    assert r.status_code == expect, r.text
    out = dict(r.json())
    if expect == 201:
        t.steps = {ctx["stepId"]: Step(ctx) for ctx in out["steps"]}
    return out


async def test_a_new_task_attempt_after_a_failure_ignores_the_old_attempt(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    await h.report(t, "01_prepare", "STEP_COMPLETED", "PREPARED")
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=ERROR)
    old = {sid: Step(dict(s.ctx), s.seq) for sid, s in t.steps.items()}
    out = await retry_task(h, t)
    assert out["taskAttempt"] == 2 and out["lifecycleStatus"] == "RUNNING"
    assert {c["stepId"]: (c["taskAttempt"], c["stepAttempt"]) for c in out["steps"]} == {
        "01_prepare": (2, 2),
        "02_parse": (2, 2),
        "03_store": (2, 1 + 1),
    }
    # A late event of attempt 1 (its token is still within its ttl) is stale and changes nothing.
    late = Task(t.id, t.tenant, t.owner, old)
    r = await h.report(late, "03_store", "STEP_STARTED", "PERSISTING")
    assert r["stale"] and r["staleReason"] == "STALE_TASK_ATTEMPT" and not r["accepted"]
    # Attempt 2 runs from sourceSeq 1 again.
    for sid, running, done in (
        ("01_prepare", "PREPARING", "PREPARED"),
        ("02_parse", "PARSING", "PARSE_COMPLETED"),
    ):
        await h.report(t, sid, "STEP_STARTED", running)
        assert (await h.report(t, sid, "STEP_COMPLETED", done))["accepted"]
    # The coordinator's TASK_* events carry the attempt: attempt 1 is stale, attempt 2 completes.
    stale = await h.task_event(t, "TASK_COMPLETED", "COMPLETED", taskAttempt=1)
    assert stale["stale"] and stale["staleReason"] == "STALE_TASK_ATTEMPT"
    done = await h.task_event(t, "TASK_COMPLETED", "COMPLETED", taskAttempt=2)
    assert done["accepted"] and done["lifecycleStatus"] == "SUCCEEDED"

    detail = await h.user_get(f"/api/tasks/{t.id}")
    assert detail["taskAttempt"] == 2
    assert {s["id"]: s["attempt"] for s in detail["steps"]} == {"01_prepare": 2, "02_parse": 2, "03_store": 2}
    listed = (await h.user_get("/api/tasks"))["items"]
    assert [x["taskAttempt"] for x in listed if x["id"] == t.id] == [2]
    events = (await h.user_get(f"/api/tasks/{t.id}/events"))["events"]
    created = [e for e in events if e["eventType"] == "TASK_ATTEMPT_CREATED"]
    assert len(created) == 1 and created[0]["taskAttempt"] == 2
    assert {e["taskAttempt"] for e in events if e["eventType"] == "STEP_FAILED"} == {1}
    # The new attempt's version was published as urgent (never superseded, seed §13.3).
    rows = await h.outbox_publications(t.id)
    attempt_rows = [
        r
        for r in rows
        if r["payload"].get("triggerEvent", {})
        and r["payload"]["triggerEvent"]["eventType"] == "TASK_ATTEMPT_CREATED"
    ]
    assert attempt_rows and all(r["priority"] > 0 for r in attempt_rows)


async def test_task_attempt_refusals(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    r = await retry_task(h, t, expect=409)
    assert r["error"]["code"] == "NO_FAILED_STEP"
    await h.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=ERROR)
    other = service_token("other-coordinator", ["coordinator"])
    assert (await retry_task(h, t, other, expect=403))["error"]["code"] == "COORDINATOR_MISMATCH"
    assert (await retry_task(h, t, ADMIN, expect=403))["error"]["code"] == "ROLE_REQUIRED"
    worker = t.steps["02_parse"].token
    r2 = await h.http.post(f"/internal/v1/tasks/{t.id}/attempts", headers=auth(worker))
    assert r2.status_code == 401
    # A registered failure-policy executor may open the retry (seed §4.4).
    assert (await retry_task(h, t, POLICY))["taskAttempt"] == 2
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=ERROR)
    await h.task_event(t, "TASK_FAILED", "REJECTED", taskAttempt=2, error=ERROR, failedStepId="02_parse")
    assert (await retry_task(h, t, expect=409))["error"]["code"] == "TASK_TERMINAL"
    missing = Task("no-such-task", "t1", "u1")
    assert (await retry_task(h, missing, expect=404))["error"]["code"] == "TASK_NOT_FOUND"


async def _fail_and_retry(h: Harness, t: Task, expect: int = 201) -> dict[str, Any]:
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=ERROR)
    return await retry_task(h, t, expect=expect)


async def test_task_attempts_are_capped_per_task_type_with_a_server_default(
    engine: AsyncEngine, clock: FakeClock
) -> None:
    """``limits.max_task_attempts`` (here 2) caps a task whose operation definitions set no
    ``maxTaskAttempts``; a definition version that sets it (here 3) takes precedence. Past the
    cap: 409 ``TASK_ATTEMPTS_EXHAUSTED`` with ``{limit, taskAttempt}``, and nothing changes."""
    h = Harness(build(engine, clock, {"limits": {"max_task_attempts": 2}}), clock)
    await h.service.load_registry_files()
    try:
        t = await h.create_task()
        assert (await _fail_and_retry(h, t))["taskAttempt"] == 2
        before = (await h.user_get(f"/api/tasks/{t.id}"))["taskVersion"]
        r = await _fail_and_retry(h, t, expect=409)
        assert r["error"]["code"] == "TASK_ATTEMPTS_EXHAUSTED"
        assert r["error"]["details"] == {"limit": 2, "taskAttempt": 2}
        detail = await h.user_get(f"/api/tasks/{t.id}")
        assert detail["taskAttempt"] == 2 and int(detail["taskVersion"]) == int(before) + 2  # the two reports

        ops = json.loads((ROOT / "schema" / "registry" / "operation-definitions.json").read_text())[0]
        v2 = {**ops, "definitionVersion": 2, "maxTaskAttempts": 3}
        r2 = await h.http.post("/admin/v1/registry/operation-definitions", json=v2, headers=auth(ADMIN))
        assert r2.status_code == 201, r2.text
        listed = await h.http.get("/admin/v1/registry", headers=auth(ADMIN))
        assert listed.status_code == 200, listed.text
        t2 = await h.create_task(operationDefinitionVersion=2)
        assert (await _fail_and_retry(h, t2))["taskAttempt"] == 2
        assert (await _fail_and_retry(h, t2))["taskAttempt"] == 3
        r = await _fail_and_retry(h, t2, expect=409)
        assert r["error"]["details"] == {"limit": 3, "taskAttempt": 3}
        bad = {**ops, "definitionVersion": 3, "maxTaskAttempts": 0}
        r3 = await h.http.post("/admin/v1/registry/operation-definitions", json=bad, headers=auth(ADMIN))
        assert r3.status_code == 422, r3.text
    finally:
        await h.http.aclose()


def test_max_task_attempts_option_is_checked() -> None:
    raw = {k: dict(v) for k, v in TEST_CONFIG.items()}
    for value in (0, 1001):
        with pytest.raises(ConfigError, match=r"limits\.max_task_attempts"):
            load_config_dict({**raw, "limits": {"max_task_attempts": value}})
    assert load_config_dict(raw).limits.max_task_attempts == 10
