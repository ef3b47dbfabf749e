"""The operator UI's JSON (status_api/operator_ui.py) over a real database (SQLite, MariaDB):
the operator credential rule, tasks by state and search, a task's timeline with its outbox rows,
the backlog by priority and age, relays by their leases and the lag, DEAD rows requeued and
deleted with an audit row in the same transaction."""

from __future__ import annotations

import sqlalchemy as sa

from status_api.storage import outbox_claims
from status_api.storage.tables import operator_action, task_outbox
from tests.status_api.harness import ADMIN, COORDINATOR, Harness

AUTH = {"authorization": f"Bearer {ADMIN}"}


async def _dead_row(h: Harness, task_id: str) -> int:
    """Lease the task's rows as relay "relay-a" and dead-letter the first one."""
    async with h.comp.engine.begin() as conn:
        rows = await outbox_claims.claim(conn, "relay-a", 100, h.clock())
        row = next(r for r in rows if r.aggregate_id == task_id)
        await outbox_claims.mark_dead(conn, row.id, "relay-a", "gateway refused: 400")
    return row.id


async def test_only_operators_with_the_admin_role_get_in(h: Harness) -> None:
    assert (await h.http.get("/admin/v1/tasks")).status_code == 401
    r = await h.http.get("/admin/v1/relays", headers={"authorization": f"Bearer {COORDINATOR}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "ROLE_REQUIRED"
    r = await h.http.post("/admin/v1/outbox/dead/requeue", json={"ids": [1]})
    assert r.status_code == 401
    page = await h.http.get("/admin/ui/")
    assert page.status_code == 200 and "/admin/ui/operator.js" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert (await h.http.get("/admin/ui/operator.js")).status_code == 200
    assert (await h.http.get("/admin/ui/app.py")).status_code == 404


async def test_tasks_by_state_and_search_and_one_timeline(h: Harness) -> None:
    first = await h.create_task(title="Contract parsing")
    second = await h.create_task(title="Invoice export")
    await h.report(first, "01_prepare", "STEP_STARTED", "PREPARING")
    body = (await h.http.get("/admin/v1/tasks", headers=AUTH)).json()
    assert sum(body["counts"].values()) == 2
    assert {t["taskId"] for t in body["tasks"]} == {first.id, second.id}
    running = (await h.http.get("/admin/v1/tasks?state=RUNNING", headers=AUTH)).json()["tasks"]
    assert [t["taskId"] for t in running] == [first.id]
    found = (await h.http.get("/admin/v1/tasks?q=Invoice", headers=AUTH)).json()["tasks"]
    assert [t["taskId"] for t in found] == [second.id]
    assert (await h.http.get("/admin/v1/tasks?q=%25", headers=AUTH)).json()["tasks"] == []  # % is literal
    by_prefix = (await h.http.get(f"/admin/v1/tasks?q={first.id[:-1]}", headers=AUTH)).json()["tasks"]
    assert first.id in [t["taskId"] for t in by_prefix]
    assert (await h.http.get("/admin/v1/tasks?limit=0", headers=AUTH)).status_code == 422

    timeline = (await h.http.get(f"/admin/v1/tasks/{first.id}/timeline", headers=AUTH)).json()
    assert timeline["task"]["version"] == 2
    assert [e["version"] for e in timeline["events"]] == [1, 2]
    assert {o["version"] for o in timeline["outbox"]} == {1, 2}
    assert all(o["status"] == "PENDING" and "payload" not in o for o in timeline["outbox"])
    # a version's one row shows its publications' channels and projections
    assert {(o["channel"], o["projection"]) for o in timeline["outbox"]} == {
        (f"task_user:t1/u1,task_detail:t1/{first.id}", "USER_SUMMARY,TASK_DETAIL")
    }
    r = await h.http.get("/admin/v1/tasks/nope/timeline", headers=AUTH)
    assert r.status_code == 404


async def test_backlog_relays_and_dead_rows_requeued_and_deleted_with_an_audit_trail(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    h.clock.advance(120)
    backlog = (await h.http.get("/admin/v1/outbox/backlog", headers=AUTH)).json()
    assert backlog["counts"]["PENDING"] == sum(b["rows"] for b in backlog["backlog"]) > 0
    for b in backlog["backlog"]:
        assert b["status"] == "PENDING" and sum(b["byAge"]) == b["rows"] and b["byAge"][1] == b["rows"]
        assert b["oldestAgeSeconds"] >= 120
    relays = (await h.http.get("/admin/v1/relays", headers=AUTH)).json()
    assert relays["instances"] == [] and relays["oldestDuePendingAgeSeconds"] >= 120

    dead = await _dead_row(h, t.id)
    relays = (await h.http.get("/admin/v1/relays", headers=AUTH)).json()
    assert [r["relayId"] for r in relays["instances"]] == ["relay-a"]  # still leases the other rows
    listed = (await h.http.get("/admin/v1/outbox/dead", headers=AUTH)).json()["dead"]
    assert [(d["id"], d["lastError"]) for d in listed] == [(dead, "gateway refused: 400")]
    assert (listed[0]["channel"], listed[0]["projection"]) == (
        f"task_user:t1/u1,task_detail:t1/{t.id}",
        "USER_SUMMARY,TASK_DETAIL",
    )

    r = await h.http.post("/admin/v1/outbox/dead/requeue", json={"ids": [dead]}, headers=AUTH)
    assert r.json() == {"affected": 1}
    async with h.comp.engine.connect() as conn:
        status = await conn.scalar(sa.select(task_outbox.c.status).where(task_outbox.c.id == dead))
    assert status == "PENDING"
    dead = await _dead_row(h, t.id)
    r = await h.http.post("/admin/v1/outbox/dead/delete", json={"ids": [dead, 999999]}, headers=AUTH)
    assert r.json() == {"affected": 1}
    assert (await h.http.get("/admin/v1/outbox/dead", headers=AUTH)).json()["dead"] == []

    bad_bodies: list[object] = [
        {"ids": []},
        {"ids": ["1"]},
        {"ids": [True]},
        {"ids": list(range(1, 1002))},
        [1],
    ]
    for bad in bad_bodies:
        r = await h.http.post("/admin/v1/outbox/dead/requeue", json=bad, headers=AUTH)
        assert r.status_code == 422 and r.json()["error"]["code"] == "INVALID_IDS"
    assert (
        await h.http.post("/admin/v1/outbox/dead/purge", json={"ids": [1]}, headers=AUTH)
    ).status_code == 404

    actions = (await h.http.get("/admin/v1/audit", headers=AUTH)).json()["actions"]
    assert [(a["operatorId"], a["action"], a["affected"]) for a in actions] == [
        ("ops-alice", "dead.delete", 1),
        ("ops-alice", "dead.requeue", 1),
    ]
    assert actions[0]["target"] == f"{dead},999999"
    async with h.comp.engine.connect() as conn:
        assert await conn.scalar(sa.select(sa.func.count()).select_from(operator_action)) == 2
