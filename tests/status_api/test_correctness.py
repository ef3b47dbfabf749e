"""Seed §17 correctness (正确性) checklist lines that concern the Status API, one named test each,
on SQLite and MariaDB (the ``h`` fixture is parametrized over both). docs/status-api.md maps them."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from status_api.storage import write
from status_api.storage.tables import task, task_event_dedup, task_event_log, task_outbox
from tests.status_api.harness import ADMIN, Harness


async def _count(h: Harness, table: sa.Table) -> int:
    return int(await h.scalar(sa.select(sa.func.count()).select_from(table)))


async def test_same_event_id_retry_makes_no_second_change(h: Harness) -> None:
    """相同 eventId 重试不会产生第二次状态变化"""
    t = await h.create_task()
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    first = await h.send(body, t.steps["01_prepare"].token)
    events, rows = await _count(h, task_event_log), await _count(h, task_outbox)
    again = await h.send(body, t.steps["01_prepare"].token)
    assert again["duplicate"] is True and again["taskVersion"] == first["taskVersion"] == "2"
    assert (await _count(h, task_event_log), await _count(h, task_outbox)) == (events, rows)
    assert await h.scalar(sa.select(task.c.version)) == 2


async def test_same_event_id_with_different_content_is_rejected(h: Harness) -> None:
    """相同 eventId 携带不同内容会被拒绝"""
    t = await h.create_task()
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    await h.send(body, t.steps["01_prepare"].token)
    changed = {**body, "occurredAt": "2026-09-21T07:10:19.000Z"}
    r = await h.http.post(
        "/internal/v1/task-events",
        json=changed,
        headers={"Authorization": f"Bearer {t.steps['01_prepare'].token}"},
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "EVENT_ID_CONFLICT"


async def test_lost_response_retry_returns_first_version(h: Harness) -> None:
    """A client that loses the connection after commit and retries with the same eventId gets the
    first version back, even after other events moved the task on."""
    t = await h.create_task()
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    await h.service.ingest_event(body, h.comp.api.service_auth.event_caller(t.steps["01_prepare"].token))
    # ... the response is lost; meanwhile another service reports ...
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    retry = await h.send(body, t.steps["01_prepare"].token)
    assert (retry["taskVersion"], retry["stepVersion"], retry["duplicate"]) == ("2", "2", True)


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("stepId", "02_parse", "TOKEN_MISMATCH"),
        ("operationCode", "VIDEO.TRANSCODE", "TOKEN_MISMATCH"),
        ("producerId", "document-parser", "TOKEN_MISMATCH"),
        ("stepAttempt", 2, "TOKEN_MISMATCH"),
        ("taskType", "VIDEO_EXPORT", "TOKEN_MISMATCH"),
        ("eventType", "STEP_HEALTH_CHANGED", "INVALID_EVENT"),
    ],
)
async def test_token_step_definition_and_body_mismatch_rejected(
    h: Harness, field: str, value: object, code: str
) -> None:
    """Token、步骤定义与请求中的 taskType/operationCode/producerId 不一致时会被拒绝"""
    t = await h.create_task()
    body = {**h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING"), field: value}
    r = await h.http.post(
        "/internal/v1/task-events",
        json=body,
        headers={"Authorization": f"Bearer {t.steps['01_prepare'].token}"},
    )
    assert r.status_code in (403, 422) and r.json()["error"]["code"] == code, r.text
    assert await h.scalar(sa.select(task.c.version)) == 1


async def test_token_of_another_task_is_rejected(h: Harness) -> None:
    a = await h.create_task()
    b = await h.create_task()
    body = h.step_event(b, "01_prepare", "STEP_STARTED", "PREPARING")
    r = await h.send(body, a.steps["01_prepare"].token, expect=403)
    assert r["error"]["code"] == "TOKEN_MISMATCH"


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (
            {"schema": "video.transcode.progress.v1", "value": {"frame": 1, "totalFrames": 2}},
            422,
            "DATA_SCHEMA_NOT_ALLOWED",
        ),
        ({"schema": "document.parse.unknown.v9", "value": {}}, 422, "DATA_SCHEMA_NOT_ALLOWED"),
        (
            {"schema": "document.parse.progress.v1", "value": {"currentPage": "x", "totalPages": 3}},
            422,
            "DATA_INVALID",
        ),
        (
            {
                "schema": "document.parse.progress.v1",
                "value": {"currentPage": 1, "totalPages": 3, "secret": "k"},
            },
            422,
            "DATA_INVALID",
        ),
        (
            {
                "schema": "document.parse.progress.v1",
                "value": {"currentPage": 1, "totalPages": 3, "pad": "x" * 9000},
            },
            413,
            "DATA_TOO_LARGE",
        ),
    ],
)
async def test_only_registered_data_schema_accepted_state_untouched(
    h: Harness, data: dict[str, object], status: int, code: str
) -> None:
    """功能数据只接受注册过的 data.schema，未知 Schema 不会污染当前状态"""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    r = await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING", data=data, expect=status)
    assert r["error"]["code"] == code
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert snap["version"] == "2" and snap["steps"][1]["data"] is None


async def test_projections_follow_their_field_whitelists(h: Harness) -> None:
    """同一功能的摘要、详情和广播投影遵守各自字段白名单"""
    t = await h.create_task(project="p9")
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(
        t,
        "02_parse",
        "STEP_COMPLETED",
        "PARSE_COMPLETED",
        durationMs=5,
        data={
            "schema": "document.parse.completed.v2",
            "value": {"pageCount": 36, "language": "zh-CN", "resultRef": "result://d/1"},
        },
    )
    await h.report(t, "03_store", "STEP_STARTED", "PERSISTING")
    await h.report(
        t,
        "03_store",
        "STEP_FAILED",
        "PERSIST_FAILED",
        error={
            "category": "DEPENDENCY",
            "code": "STORE_DOWN",
            "retryable": True,
            "userMessage": "Storage unavailable",
            "diagnosticsRef": "trace://secret-trace",
        },
    )
    pubs = await h.outbox_publications(t.id)
    rows = {r["projection"]: r["payload"] for r in pubs if r["aggregate_version"] == 5}
    summary, detail, project = rows["USER_SUMMARY"], rows["TASK_DETAIL"], rows["PROJECT_BROADCAST"]
    # summary: summaryFields of the operation only (no resultRef), no steps
    assert summary["task"]["summaryData"] == {
        "schema": "document.parse.completed.v2",
        "value": {"pageCount": 36, "language": "zh-CN"},
    }
    assert "steps" not in summary["task"]
    # detail: full validated data, public error without diagnosticsRef
    assert detail["steps"][1]["data"]["value"]["resultRef"] == "result://d/1"
    assert detail["steps"][2]["error"] == {
        "category": "DEPENDENCY",
        "code": "STORE_DOWN",
        "retryable": True,
        "userMessage": "Storage unavailable",
    }
    # project: aggregates only
    assert set(project["task"]) == {
        "id",
        "product",
        "taskType",
        "lifecycleStatus",
        "health",
        "version",
        "createdAt",
        "startedAt",
        "finishedAt",
        "stepsTotal",
        "stepsSucceeded",
        "stepsFailed",
    }
    for r in await h.outbox_publications():
        assert "trace://" not in str(r["payload"]) and "diagnosticsRef" not in str(r["payload"])


async def test_old_attempt_and_old_source_seq_cannot_overwrite(h: Harness) -> None:
    """旧 attempt、旧 sourceSeq、旧 version 都不能覆盖新状态"""
    t = await h.create_task()
    old = t.steps["02_parse"]
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(
        t,
        "02_parse",
        "STEP_FAILED",
        "PARSE_FAILED",
        error={"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True},
    )
    r = await h.http.post(
        f"/internal/v1/tasks/{t.id}/steps/02_parse/attempts",
        headers={"Authorization": f"Bearer {h_coordinator()}"},
    )
    assert r.status_code == 201, r.text
    new_ctx = r.json()
    assert new_ctx["stepAttempt"] == 2 and new_ctx["stepVersion"] == "4"
    # a late event of attempt 1 is stale and changes nothing
    late = h.step_event(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED", seq=99)
    res = await h.send(late, old.token)
    assert (res["accepted"], res["stale"], res["staleReason"]) == (False, True, "STALE_STEP_ATTEMPT")
    t.steps["02_parse"] = type(old)(new_ctx)
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING", seq=5)
    stale = await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING", seq=3)
    assert (stale["stale"], stale["staleReason"]) == (True, "STALE_SOURCE_SEQ")
    same = await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING", seq=5)
    assert same["stale"] is True
    snap = await h.user_get(f"/api/tasks/{t.id}")
    parse = snap["steps"][1]
    assert (parse["attempt"], parse["lifecycleStatus"], parse["version"]) == (2, "RUNNING", "5")


def h_coordinator() -> str:
    from tests.status_api.harness import COORDINATOR

    return COORDINATOR


async def test_source_seq_is_per_producer_not_shared(h: Harness) -> None:
    """同一任务中，服务 A 的 sourceSeq=2 不会让服务 B 的 sourceSeq=1 被误判为旧事件"""
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING", seq=1)
    await h.report(t, "01_prepare", "STEP_COMPLETED", "PREPARED", seq=2, durationMs=10)
    r = await h.report(t, "02_parse", "STEP_STARTED", "PARSING", seq=1)
    assert (r["accepted"], r["stale"], r["taskVersion"]) == (True, False, "4")


async def test_two_services_reporting_concurrently_get_distinct_consecutive_versions(h: Harness) -> None:
    """两个服务并发上报时得到不同且连续递增的 taskVersion"""
    t = await h.create_task()
    bodies = []
    for step in ("01_prepare", "02_parse"):
        starting = {"01_prepare": "PREPARING", "02_parse": "PARSING"}[step]
        for _ in range(6):
            bodies.append(
                (
                    h.step_event(t, step, "STEP_STARTED" if _ == 0 else "STEP_PROGRESS", starting),
                    t.steps[step].token,
                )
            )
    # each service sends its own stream in order; the services run concurrently

    async def stream(step: str) -> list[str]:
        out = []
        for b, tok in [x for x in bodies if x[0]["stepId"] == step]:
            out.append((await h.send(b, tok))["taskVersion"])
        return out

    results = await asyncio.gather(*(stream(s) for s in ("01_prepare", "02_parse")))
    versions = sorted(int(v) for r in results for v in r)
    assert versions == list(range(2, 14))
    logged = [
        r[0] for r in (await _rows(h, sa.select(task_event_log.c.task_version).order_by("task_version")))
    ]
    assert logged == list(range(1, 14))


async def _rows(h: Harness, q: sa.Select[tuple[int]]) -> list[tuple[int]]:
    async with h.comp.engine.connect() as conn:
        return [tuple(r) for r in await conn.execute(q)]  # type: ignore[misc]


async def test_duplicate_event_id_returns_first_task_version(h: Harness) -> None:
    """重复 eventId 返回第一次提交的 taskVersion，不会再次增加版本"""
    t = await h.create_task()
    body = h.step_event(t, "02_parse", "STEP_STARTED", "PARSING")
    first = await h.send(body, t.steps["02_parse"].token)
    await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING")
    for _ in range(3):
        dup = await h.send(body, t.steps["02_parse"].token)
        assert dup["taskVersion"] == first["taskVersion"] == "2"
    assert await h.scalar(sa.select(task.c.version)) == 3


async def test_terminal_state_never_returns_to_running(h: Harness) -> None:
    """终态不会退回运行态"""
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    await h.report(t, "01_prepare", "STEP_COMPLETED", "PREPARED", durationMs=1)
    r = await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING", expect=409)
    assert r["error"]["code"] == "INVALID_TRANSITION"
    await h.task_event(t, "TASK_COMPLETED", "COMPLETED")
    r = await h.report(t, "02_parse", "STEP_STARTED", "PARSING", expect=409)
    assert r["error"]["code"] == "TASK_TERMINAL"
    r = await h.task_event(
        t,
        "TASK_FAILED",
        "REJECTED",
        expect=409,
        error={"category": "SYSTEM", "code": "X", "retryable": False},
    )
    assert r["error"]["code"] == "TASK_TERMINAL"
    assert (await h.user_get(f"/api/tasks/{t.id}"))["lifecycleStatus"] == "SUCCEEDED"


@pytest.mark.parametrize(
    ("event_type", "business", "code"),
    [
        ("STEP_STARTED", "NOT_A_STATUS", "UNKNOWN_BUSINESS_STATUS"),
        ("STEP_STARTED", "LEGACY_STAGE", "UNKNOWN_BUSINESS_STATUS"),  # registered but disabled
        ("STEP_STARTED", "COMPLETED", "BUSINESS_STATUS_LIFECYCLE_MISMATCH"),  # caller cannot claim terminal
        ("STEP_COMPLETED", "PARSING", "BUSINESS_STATUS_LIFECYCLE_MISMATCH"),
    ],
)
async def test_unregistered_business_status_rejected_lifecycle_from_registry(
    h: Harness, event_type: str, business: str, code: str
) -> None:
    """未注册业务状态会被拒绝，业务状态只能映射到服务端定义的生命周期"""
    t = await h.create_task()
    r = await h.report(t, "02_parse", event_type, business, expect=422)
    assert r["error"]["code"] == code


async def test_status_definition_upgrade_keeps_running_task_semantics(h: Harness) -> None:
    """状态定义升级不会改变运行中和历史任务的语义"""
    running = await h.create_task()
    await h.report(running, "02_parse", "STEP_STARTED", "PARSING")
    v1 = h.schemas.load_registry_file("status-definitions")[0]
    v2 = {
        **v1,
        "definitionVersion": 2,
        "statuses": [
            s for s in v1["statuses"] if s["code"] != "PARSING" and "PARSING" not in s.get("allowedFrom", [])
        ],
    }
    r = await h.http.post(
        "/admin/v1/registry/status-definitions", json=v2, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 201, r.text
    # same version with different content is refused: versions are immutable
    r = await h.http.post(
        "/admin/v1/registry/status-definitions",
        json={**v1, "statuses": v2["statuses"]},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "DEFINITION_VERSION_EXISTS"
    # the running v1 task still accepts PARSING ...
    ok = await h.report(running, "02_parse", "STEP_PROGRESS", "PARSING")
    assert ok["accepted"] is True
    # ... a v2 task does not know it
    newer = await h.create_task(statusDefinitionVersion=2)
    r2 = await h.report(newer, "02_parse", "STEP_STARTED", "PARSING", expect=422)
    assert r2["error"]["code"] == "UNKNOWN_BUSINESS_STATUS"


async def test_state_event_dedup_and_outbox_commit_in_one_transaction(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """当前状态、不可变事件、版本、幂等结果与 Outbox 在同一个事务里提交"""
    t = await h.create_task()
    before = [await _count(h, tb) for tb in (task_event_log, task_event_dedup, task_outbox)]

    async def failing_append(*args: object, **kwargs: object) -> None:
        raise RuntimeError("outbox write failed")

    monkeypatch.setattr(write, "append_outbox", failing_append)
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    caller = h.comp.api.service_auth.event_caller(t.steps["01_prepare"].token)
    with pytest.raises(RuntimeError):
        await h.service.ingest_event(body, caller)
    assert [await _count(h, tb) for tb in (task_event_log, task_event_dedup, task_outbox)] == before
    assert await h.scalar(sa.select(task.c.version)) == 1
    monkeypatch.undo()
    r = await h.send(body, t.steps["01_prepare"].token)
    assert (r["taskVersion"], r["duplicate"]) == ("2", False)


async def test_timeline_resumes_after_version_and_reports_purged_window(h: Harness) -> None:
    """事件时间线可以从 afterTaskVersion 断点续取，并能识别已被清理的历史窗口"""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    for _ in range(4):
        await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING")
    page = await h.user_get(f"/api/tasks/{t.id}/events?afterTaskVersion=0&limit=3")
    assert [e["taskVersion"] for e in page["events"]] == ["1", "2", "3"]
    assert page["hasMore"] is True and page["purged"] is False
    nxt = await h.user_get(
        f"/api/tasks/{t.id}/events?afterTaskVersion={page['nextAfterTaskVersion']}&limit=10"
    )
    assert [e["taskVersion"] for e in nxt["events"]] == ["4", "5", "6"] and nxt["hasMore"] is False
    from status_api.storage import repository as repo

    async with h.comp.engine.begin() as conn:
        assert await repo.purge_timeline(conn, t.id, 3) == 3
    gone = await h.user_get(f"/api/tasks/{t.id}/events?afterTaskVersion=1")
    assert gone["purged"] is True and gone["oldestAvailableTaskVersion"] == "4"
    kept = await h.user_get(f"/api/tasks/{t.id}/events?afterTaskVersion=3")
    assert kept["purged"] is False and [e["taskVersion"] for e in kept["events"]] == ["4", "5", "6"]


async def test_worker_monotonic_duration_not_overwritten_by_wall_clock(h: Harness) -> None:
    """Worker 上报的单调时钟耗时不会被跨机器墙钟差值覆盖"""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    h.clock.advance(95)  # 95 s of wall clock between the two commits
    await h.report(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED", durationMs=18000)
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    h.clock.advance(7)
    await h.report(t, "01_prepare", "STEP_COMPLETED", "PREPARED")  # could not measure
    h.clock.advance(3)
    await h.task_event(t, "TASK_COMPLETED", "COMPLETED", durationMs=100000)
    snap = await h.user_get(f"/api/tasks/{t.id}")
    prep, parse = snap["steps"][0], snap["steps"][1]
    assert (parse["durationMs"], parse["durationSource"]) == (18000, "MONOTONIC")
    assert (prep["durationMs"], prep["durationSource"]) == (7000, "WALL_CLOCK_ESTIMATE")
    d = snap["durations"]
    assert (d["runMs"], d["durationSource"], d["totalMs"]) == (100000, "MONOTONIC", 105000)
    assert d["queueMs"] == 0 and parse["queueDurationMs"] == 0


async def test_failure_reaches_user_summary_channel_without_detail_subscription(h: Harness) -> None:
    """用户未订阅任务详情时，仍能从用户摘要频道收到任务失败或需操作提醒"""
    t = await h.create_task(
        steps=[
            {"stepId": "review", "operationCode": "REVIEW.MANUAL", "producerId": "review-service"},
            {"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE", "producerId": "document-parser"},
        ]
    )
    await h.report(t, "review", "STEP_STARTED", "WAITING_REVIEW")
    await h.report(
        t,
        "review",
        "STEP_FAILED",
        "REVIEW_NEEDED",
        error={
            "category": "BUSINESS_INPUT",
            "code": "SIGNATURE_MISSING",
            "retryable": False,
            "userMessage": "Please sign page 3",
        },
    )
    summaries = [r for r in await h.outbox_publications(t.id) if r["channel"] == "task_user:t1/u1"]
    action = summaries[-1]["payload"]
    assert action["task"]["businessStatus"] == "WAITING_USER_ACTION"
    assert action["notice"]["type"] == "NEEDS_ACTION" and action["notice"]["requiresAction"] is True
    assert action["notice"]["id"] == f"{t.id}:3"
    await h.task_event(
        t,
        "TASK_FAILED",
        "REJECTED",
        failedStepId="review",
        error={
            "category": "BUSINESS_INPUT",
            "code": "SIGNATURE_MISSING",
            "retryable": False,
            "userMessage": "Task rejected: <b>unsigned</b> see http://internal/x",
        },
    )
    pubs = await h.outbox_publications(t.id)
    final = [r for r in pubs if r["channel"] == "task_user:t1/u1"][-1]["payload"]
    assert final["task"]["lifecycleStatus"] == "FAILED" and final["notice"]["type"] == "TASK_FAILED"
    assert final["notice"]["message"] == "Task rejected: unsigned see [link]"
    assert final["notice"]["id"] == f"{t.id}:4" and final["task"]["failedStepId"] == "review"


async def test_failure_terminal_and_action_messages_are_not_coalescible_progress(h: Harness) -> None:
    """STEP_FAILED、终态和需操作通知不会被进度消息合并策略吞掉 (own rows, notice priority)"""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(t, "02_parse", "STEP_PROGRESS", "PARSING")
    await h.report(
        t,
        "02_parse",
        "STEP_FAILED",
        "PARSE_FAILED",
        error={"category": "BUSINESS_INPUT", "code": "BAD_PDF", "retryable": True},
    )
    await h.task_event(t, "TASK_COMPLETED", "COMPLETED")
    rows = await h.outbox_publications(t.id)
    by_version = {(r["aggregate_version"], r["projection"]): r for r in rows}
    assert by_version[(3, "USER_SUMMARY")]["priority"] == 0
    assert by_version[(4, "USER_SUMMARY")]["priority"] == 10
    assert by_version[(4, "USER_SUMMARY")]["payload"]["notice"]["type"] == "STEP_RETRYING"
    assert by_version[(5, "USER_SUMMARY")]["priority"] == 10
    assert by_version[(5, "USER_SUMMARY")]["payload"]["notice"]["type"] == "TASK_SUCCEEDED"
    # exactly one publication per projection per version, one row per version: nothing merged away
    assert len(rows) == len(by_version) == 5 * 2
    assert len(await h.outbox_rows(t.id)) == 5


async def test_new_task_and_new_attempt_rows_are_never_superseded_or_conflated(h: Harness) -> None:
    """新任务创建、新 attempt 开始不会被合并 (seed §13.3): their rows are never supersedable, and
    the relay tags them conflate=never for the gateway (progress rows only carry task=<id>)."""
    from relay.publisher import publish_params
    from status_api.storage.outbox import OutboxRow, supersedable

    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(
        t,
        "02_parse",
        "STEP_FAILED",
        "PARSE_FAILED",
        error={"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True},
    )
    r = await h.http.post(
        f"/internal/v1/tasks/{t.id}/steps/02_parse/attempts",
        headers={"Authorization": f"Bearer {h_coordinator()}"},
    )
    assert r.status_code == 201, r.text
    pubs = await h.outbox_publications(t.id)
    rows = {(row["aggregate_version"], row["projection"]): row for row in pubs}
    created, progress = rows[(1, "USER_SUMMARY")], rows[(2, "USER_SUMMARY")]
    attempt = rows[(max(v for v, _ in rows), "USER_SUMMARY")]
    assert not supersedable(created["priority"]) and not supersedable(attempt["priority"])
    assert supersedable(progress["priority"])
    for raw, never in ((created, True), (attempt, True), (progress, False)):
        columns = {name: raw[name] for name in ("id", "aggregate_type", "aggregate_id", "aggregate_version")}
        out = OutboxRow(
            **columns,
            channel=raw["channel"],
            projection=raw["projection"],
            payload={},
            priority=raw["priority"],
            attempts=0,
            created_at=raw["created_at"],
        )
        tags = publish_params(out)["tags"]
        assert tags["task"] == t.id
        assert (tags.get("conflate") == "never") is never
