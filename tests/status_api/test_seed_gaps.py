"""Seed gaps of issue 30 item 5 on the Status API (SQLite and MariaDB): idempotency before
authentication (§3.2), ``allowedFrom`` for TASK_* events (§4.6), progress coalescing (§3.5,
§9.1), the per-user detail-subscription quota (§6.5), purging expired realtime sessions."""

from __future__ import annotations

import time
import uuid
from typing import Any

import jwt
import sqlalchemy as sa

from status_api.queries import RealtimeQuota
from status_api.storage.tables import (
    realtime_session,
    realtime_subscription,
    realtime_user_quota,
    task_event_dedup,
)
from tests.status_api.harness import ADMIN, COORDINATOR, EXEC_SECRET, REALTIME_SECRET, SERVICE_SECRET, Harness


def _expired(token: str, secret: str) -> str:
    """The same credential (same claims, same key) whose ``exp`` has just passed."""
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    claims["exp"] = int(time.time()) - 5
    return jwt.encode(claims, secret, "HS256")


async def test_an_exact_duplicate_gets_its_first_result_after_its_token_expired(h: Harness) -> None:
    t = await h.create_task()
    step = t.steps["01_prepare"]
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    first = await h.send(body, step.token)
    assert first["accepted"] is True and first["duplicate"] is False
    rows = len(await h.outbox_rows(t.id))
    expired = _expired(step.token, EXEC_SECRET)

    again = await h.send(body, expired)  # the retry of a timed-out request, token expired meanwhile
    assert again["duplicate"] is True
    assert again["taskVersion"] == first["taskVersion"] and again["committedAt"] == first["committedAt"]
    assert len(await h.outbox_rows(t.id)) == rows

    # Anything but an exact duplicate still needs a valid credential: a new event ...
    fresh = h.step_event(t, "01_prepare", "STEP_PROGRESS", "PREPARING", progress={"current": 1})
    r = await h.send(fresh, expired, expect=401)
    assert r["error"]["code"] == "EXECUTION_TOKEN_EXPIRED"
    # ... the same eventId with other content (401, not 409: nothing is revealed to an expired token)
    r = await h.send({**body, "occurredAt": "2026-09-21T07:10:19Z"}, expired, expect=401)
    assert r["error"]["code"] == "EXECUTION_TOKEN_EXPIRED"
    # ... a forged signature
    forged = jwt.encode(jwt.decode(expired, options={"verify_signature": False}), "x" * 40, "HS256")
    await h.send(body, forged, expect=401)
    # ... another producer's expired token replaying this producer's body
    other = _expired(t.steps["02_parse"].token, EXEC_SECRET)
    await h.send(body, other, expect=401)
    async with h.comp.engine.connect() as conn:
        n = await conn.scalar(sa.select(sa.func.count()).select_from(task_event_dedup))
    assert n == 1


async def test_a_coordinator_duplicate_is_answered_after_its_service_jwt_expired(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    body = {
        "eventId": f"evt-{uuid.uuid4().hex}",
        "taskId": t.id,
        "taskAttempt": 1,
        "producerId": "task-coordinator",
        "sourceSeq": 1,
        "eventType": "TASK_CANCELLED",
        "businessStatus": "CANCELLED",
        "occurredAt": "2026-09-21T07:11:00Z",
    }
    first = await h.send(body, COORDINATOR)
    again = await h.send(body, _expired(COORDINATOR, SERVICE_SECRET))
    assert again["duplicate"] is True and again["taskVersion"] == first["taskVersion"]


async def test_allowed_from_binds_task_level_events(h: Harness) -> None:
    v1 = h.schemas.load_registry_file("status-definitions")[0]
    statuses = [
        {**s, "allowedFrom": ["PERSISTED"]} if s["code"] == "COMPLETED" else s for s in v1["statuses"]
    ]
    r = await h.http.post(
        "/admin/v1/registry/status-definitions",
        json={**v1, "definitionVersion": 30, "statuses": statuses},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code in (200, 201), r.text
    t = await h.create_task(statusDefinitionVersion=30)
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    rows = len(await h.outbox_rows(t.id))
    r = await h.task_event(t, "TASK_COMPLETED", "COMPLETED", expect=409)
    assert r["error"]["code"] == "INVALID_TRANSITION" and "PREPARING" in r["error"]["message"]
    assert len(await h.outbox_rows(t.id)) == rows
    await h.report(t, "03_store", "STEP_STARTED", "PERSISTING")
    await h.report(t, "03_store", "STEP_COMPLETED", "PERSISTED")
    done = await h.task_event(t, "TASK_COMPLETED", "COMPLETED")
    assert done["accepted"] is True and done["lifecycleStatus"] == "SUCCEEDED"


async def test_progress_is_coalesced_in_the_outbox(h: Harness) -> None:
    """Seed §3.5/§9.1: ten progress reports while no relay has published do not leave twenty
    outbox rows: each replaces the older progress rows still pending; the newest state survives,
    other versions (creation, STEP_STARTED, a later STEP_COMPLETED) keep their rows."""
    t = await h.create_task()
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    for i in range(1, 11):
        await h.report(t, "01_prepare", "STEP_PROGRESS", "PREPARING", progress={"current": i, "total": 10})
    assert len(await h.outbox_rows(t.id)) == 3  # one row per version
    rows = await h.outbox_publications(t.id)
    versions = sorted({r["aggregate_version"] for r in rows})
    assert versions == [1, 2, 12], versions  # creation, STEP_STARTED, the newest progress
    assert len(rows) == 6
    newest = [r for r in rows if r["aggregate_version"] == 12]
    assert {r["projection"] for r in newest} == {"USER_SUMMARY", "TASK_DETAIL"}
    summary = next(r for r in newest if r["projection"] == "USER_SUMMARY")["payload"]
    assert summary["task"]["currentOperation"]["progress"]["current"] == 10
    await h.report(t, "01_prepare", "STEP_COMPLETED", "PREPARED", durationMs=5)
    assert 13 in {r["aggregate_version"] for r in await h.outbox_rows(t.id)}
    assert await h.check_outbox_messages() == len(await h.outbox_publications())


# --- seed §6.5: the detail-subscription quota is per user ---------------------------------------


async def _token(h: Harness, task_id: str, session: str, expect: int = 200) -> Any:
    return await h.user_post(
        "/api/realtime/subscription-token", {"taskId": task_id, "sessionId": session}, expect=expect
    )


async def test_the_detail_quota_is_per_user_across_sessions_and_refreshes(h: Harness) -> None:
    h.comp.queries.quota = RealtimeQuota(
        max_detail_subscriptions_per_session=3, max_detail_subscriptions_per_user=3
    )
    tasks = [(await h.create_task()).id for _ in range(5)]
    first = (await h.user_get("/api/realtime/session"))["sessionId"]
    for tid in tasks[:3]:
        await _token(h, tid, first)
    # A token refresh opens a new session: the quota does not start over ...
    refreshed = (await h.user_get("/api/realtime/session"))["sessionId"]
    r = await _token(h, tasks[3], refreshed, expect=429)
    assert r["error"]["code"] == "DETAIL_SUBSCRIPTION_LIMIT"
    assert r["error"]["details"] == {"limit": 3, "scope": "user"}
    # ... nor does another tab of the same user
    other_tab = (await h.user_get("/api/realtime/session"))["sessionId"]
    await _token(h, tasks[4], other_tab, expect=429)
    # re-subscribing a task the old session holds does not count twice
    await _token(h, tasks[0], refreshed)
    # releasing it (from the new session) frees it in every session of the user
    await h.user_post("/api/realtime/subscription-release", {"taskId": tasks[0], "sessionId": refreshed})
    await _token(h, tasks[3], refreshed)
    # another user has a quota of their own
    mine = await h.create_task(owner="u2")
    s2 = (await h.user_get("/api/realtime/session", user="u2"))["sessionId"]
    await h.user_post("/api/realtime/subscription-token", {"taskId": mine.id, "sessionId": s2}, user="u2")
    # a session of another user is refused as before
    r = await h.user_post(
        "/api/realtime/subscription-token", {"taskId": tasks[1], "sessionId": s2}, expect=401
    )
    assert r["error"]["code"] == "SESSION_INVALID"


async def test_expired_realtime_sessions_are_purged_with_their_leases(h: Harness) -> None:
    t = await h.create_task()
    old = (await h.user_get("/api/realtime/session"))["sessionId"]
    await _token(h, t.id, old)
    h.clock.advance(3600)  # past the session's expiry (4 x the token TTLs)
    live = (await h.user_get("/api/realtime/session"))["sessionId"]
    reconciler = h.comp.reconciler
    assert await reconciler.purge_sessions_once() == 1
    assert await reconciler.purge_sessions_once() == 0  # not due again before retention.interval_seconds
    async with h.comp.engine.connect() as conn:
        left = {r[0] for r in await conn.execute(sa.select(realtime_session.c.session_id))}
        leases = await conn.scalar(sa.select(sa.func.count()).select_from(realtime_subscription))
        locks = await conn.scalar(sa.select(sa.func.count()).select_from(realtime_user_quota))
    assert left == {live} and leases == 0
    assert locks == 0  # the user's quota lock row, untouched since the old lease, went too


# --- seed §6.6: broadcast channels -------------------------------------------------------------


def _claims(token: str) -> dict[str, Any]:
    return dict(jwt.decode(token, REALTIME_SECRET, algorithms=["HS256"], options={"verify_aud": False}))


async def test_broadcast_tokens_are_built_from_the_users_identity(h: Harness) -> None:
    r = await h.user_post(
        "/api/realtime/broadcast-token", {"scope": "project", "projectId": "p9"}, projects=["p9"]
    )
    assert r["channel"] == "task_project:t1/p9" and _claims(r["token"])["channel"] == "task_project:t1/p9"
    r = await h.user_post(
        "/api/realtime/broadcast-token", {"scope": "project", "projectId": "p7"}, projects=["p9"], expect=403
    )
    assert r["error"]["code"] == "NOT_A_PROJECT_MEMBER"
    r = await h.user_post("/api/realtime/broadcast-token", {"scope": "project"}, expect=422)
    assert r["error"]["code"] == "PROJECT_REQUIRED"
    r = await h.user_post("/api/realtime/broadcast-token", {"scope": "tenant"}, tenant="t2")
    assert r["channel"] == "task_tenant:t2"
    # a client cannot name another tenant or a channel
    await h.user_post(
        "/api/realtime/broadcast-token", {"scope": "tenant", "tenantId": "t1"}, tenant="t2", expect=422
    )
    await h.user_post("/api/realtime/broadcast-token", {"scope": "task_user:t1/u1"}, expect=422)
    r = await h.user_post("/api/realtime/broadcast-token", {"scope": "system"})
    assert r["channel"] == "task_system:public" and _claims(r["token"])["sub"] == "t1/u1"


def _service(sub: str, roles: list[str], tenant: str | None = None) -> dict[str, str]:
    claims: dict[str, Any] = {"sub": sub, "roles": roles, "exp": int(time.time()) + 600}
    if tenant:
        claims["tenant"] = tenant
    return {"Authorization": f"Bearer {jwt.encode(claims, SERVICE_SECRET, 'HS256')}"}


async def test_tenant_and_system_broadcasts_are_published_through_the_outbox(h: Harness) -> None:
    body = {"scope": "system", "type": "MAINTENANCE", "severity": "WARNING", "message": "Down at 22:00 UTC"}
    r = await h.http.post("/admin/v1/broadcasts", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 201, r.text
    assert r.json()["channel"] == "task_system:public"
    r = await h.http.post(
        "/admin/v1/broadcasts",
        json={"scope": "tenant", "tenantId": "t1", "type": "BATCH_PROGRESS", "message": "Import 40 % done"},
        headers=_service("ops-t1", ["admin"], tenant="t1"),
    )
    assert r.status_code == 201 and r.json()["channel"] == "task_tenant:t1"
    rows = [r for r in await h.outbox_rows() if r["aggregate_type"] == "broadcast"]
    assert [(r["channel"], r["projection"], r["priority"]) for r in rows] == [
        ("task_system:public", "SYSTEM_BROADCAST", 10),
        ("task_tenant:t1", "TENANT_BROADCAST", 10),
    ]
    assert (
        rows[0]["payload"]["message"] == "Down at 22:00 UTC" and rows[0]["payload"]["severity"] == "WARNING"
    )
    # refusals: a tenant-bound admin cannot reach another tenant nor every tenant; no admin role
    for headers, payload, code in [
        (
            _service("ops-t1", ["admin"], "t1"),
            {**body, "scope": "tenant", "tenantId": "t2"},
            "TENANT_MISMATCH",
        ),
        (_service("ops-t1", ["admin"], "t1"), body, "SYSTEM_SCOPE_FORBIDDEN"),
        (_service("task-coordinator", ["coordinator"]), body, "ROLE_REQUIRED"),
    ]:
        r = await h.http.post("/admin/v1/broadcasts", json=payload, headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (403, code)
    r = await h.http.post(
        "/admin/v1/broadcasts", json={**body, "scope": "user"}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 422


# --- seed §4.6: registered display names and presentation reach clients ---------------------------


async def test_registered_display_names_and_presentation_reach_clients(h: Harness) -> None:
    v1 = h.schemas.load_registry_file("status-definitions")[0]
    statuses = [
        {**s, "displayName": "Warming up", "presentation": {"colorToken": "info", "iconKey": "flame"}}
        if s["code"] == "PREPARING"
        else s
        for s in v1["statuses"]
    ]
    r = await h.http.post(
        "/admin/v1/registry/status-definitions",
        json={**v1, "definitionVersion": 31, "statuses": statuses},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code in (200, 201), r.text
    t = await h.create_task(statusDefinitionVersion=31)
    await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    warming = {
        "name": "Warming up",
        "severity": "INFO",
        "presentation": {"colorToken": "info", "iconKey": "flame"},
    }
    pubs = await h.outbox_publications(t.id)
    rows = {r["projection"]: r["payload"] for r in pubs if r["aggregate_version"] == 2}
    summary = rows["USER_SUMMARY"]["task"]
    assert summary["businessStatusDisplay"] == warming
    assert summary["currentOperation"]["displayName"] == "Prepare file"
    detail = rows["TASK_DETAIL"]
    assert detail["businessStatusDisplay"] == warming
    step = next(s for s in detail["steps"] if s["id"] == "01_prepare")
    assert (step["displayName"], step["businessStatusDisplay"]) == ("Prepare file", warming)
    # the snapshots say the same
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert snap["businessStatusDisplay"] == warming and snap["steps"][0]["displayName"] == "Prepare file"
    listed = (await h.user_get("/api/tasks"))["items"]
    assert next(x for x in listed if x["id"] == t.id)["businessStatusDisplay"] == warming
    # a parse step's name comes from the operation registry, the pending status from the status one
    parse = next(s for s in snap["steps"] if s["id"] == "02_parse")
    assert parse["displayName"] == "Parse document" and parse["businessStatusDisplay"]["name"] == "Queued"
