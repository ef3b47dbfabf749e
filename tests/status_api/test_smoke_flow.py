"""The seed §3.4 walk-through end to end over HTTP: create, three services report, coordinator completes."""

from __future__ import annotations

from tests.status_api.harness import Harness


async def test_full_task_walkthrough_versions_and_projections(h: Harness) -> None:
    t = await h.create_task(project="p9")
    r = await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    assert (r["accepted"], r["taskVersion"], r["stepVersion"], r["lifecycleStatus"]) == (
        True,
        "2",
        "2",
        "RUNNING",
    )
    r = await h.report(
        t,
        "01_prepare",
        "STEP_COMPLETED",
        "PREPARED",
        durationMs=3100,
        data={"schema": "file.prepare.completed.v1", "value": {"fileName": "c.pdf", "sizeBytes": 10}},
    )
    assert r["taskVersion"] == "3"
    r = await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    assert r["taskVersion"] == "4"
    r = await h.report(
        t,
        "02_parse",
        "STEP_PROGRESS",
        "PARSING",
        progress={"current": 18, "total": 36, "unit": "page"},
        data={"schema": "document.parse.progress.v1", "value": {"currentPage": 18, "totalPages": 36}},
    )
    assert r["taskVersion"] == "5"
    r = await h.report(
        t,
        "02_parse",
        "STEP_COMPLETED",
        "PARSE_COMPLETED",
        durationMs=18000,
        data={
            "schema": "document.parse.completed.v2",
            "value": {"pageCount": 36, "language": "zh-CN", "resultRef": "result://doc/1"},
        },
    )
    assert (r["taskVersion"], r["lifecycleStatus"], r["businessStatus"]) == (
        "6",
        "RUNNING",
        "PARSE_COMPLETED",
    )
    r = await h.task_event(t, "TASK_COMPLETED", "COMPLETED", durationMs=42600)
    assert (r["taskVersion"], r["lifecycleStatus"]) == ("7", "SUCCEEDED")

    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert snap["version"] == "7" and snap["lifecycleStatus"] == "SUCCEEDED"
    assert snap["durations"]["runMs"] == 42600
    assert [s["lifecycleStatus"] for s in snap["steps"]] == ["SUCCEEDED", "SUCCEEDED", "PENDING"]
    rows = await h.outbox_rows(t.id)
    versions = sorted({r["aggregate_version"] for r in rows})
    assert versions == list(range(1, 8))
    assert len(rows) == 7  # one row per version
    pubs = await h.outbox_publications(t.id)
    assert [p["projection"] for p in pubs] == ["USER_SUMMARY", "TASK_DETAIL", "PROJECT_BROADCAST"] * 7
    assert await h.check_outbox_messages() == 21
