"""Seed §17 security (安全) lines and tenant isolation: every user endpoint refuses other tenants' and
users' tasks. On SQLite and MariaDB."""

from __future__ import annotations

import logging

import jwt
import pytest

from tests.status_api.harness import (
    COORDINATOR,
    EXEC_SECRET,
    POLICY,
    REALTIME_SECRET,
    SERVICE_SECRET,
    USER_SECRET,
    Harness,
    auth,
    service_token,
    user_token,
)


def _rt(token: str) -> dict[str, object]:
    return dict(jwt.decode(token, REALTIME_SECRET, algorithms=["HS256"]))


async def test_connection_jwt_comes_from_verified_login_identity(h: Harness) -> None:
    """连接 JWT 来自已验证登录身份"""
    r = await h.http.get("/api/realtime/session")
    assert r.status_code == 401
    forged = jwt.encode(
        {"sub": "u1", "tenant": "t1", "exp": 9999999999}, "wrong-secret-wrong-secret-0000000000", "HS256"
    )
    r = await h.http.get("/api/realtime/session?tenant=t2&user=u9", headers=auth(forged))
    assert r.status_code == 401
    out = await h.user_get("/api/realtime/session?tenant=t2&user=u9", tenant="t1", user="u1")
    claims = _rt(out["token"])
    assert claims["sub"] == "t1/u1" and claims["channels"] == ["task_user:t1/u1"]
    assert 0 < int(claims["exp"]) - int(claims["iat"]) <= 300  # type: ignore[call-overload]


async def test_detail_token_rechecks_task_acl_on_server(h: Harness) -> None:
    """任务详情 Token 在服务端重新检查权限"""
    mine = await h.create_task(owner="u1", project="p9")
    sess = await h.user_get("/api/realtime/session", user="u2", projects=["p9"])
    ok = await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": mine.id, "sessionId": sess["sessionId"]},
        user="u2",
        projects=["p9"],
    )
    assert _rt(ok["token"])["channel"] == f"task_detail:t1/{mine.id}" and _rt(ok["token"])["sub"] == "t1/u2"
    sess3 = await h.user_get("/api/realtime/session", user="u3")
    r = await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": mine.id, "sessionId": sess3["sessionId"]},
        user="u3",
        expect=404,
    )
    assert r["error"]["code"] == "TASK_NOT_FOUND"


async def test_browser_cannot_choose_another_tenants_channel(h: Harness) -> None:
    """浏览器无法自行指定其他租户频道"""
    other = await h.create_task(tenant="t2", owner="u1")
    sess = await h.user_get("/api/realtime/session", tenant="t1", user="u1")
    await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": other.id, "sessionId": sess["sessionId"]},
        tenant="t1",
        user="u1",
        expect=404,
    )
    # a session of another user cannot be borrowed either
    sess_other = await h.user_get("/api/realtime/session", tenant="t2", user="u1")
    mine = await h.create_task(tenant="t1", owner="u1")
    r = await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": mine.id, "sessionId": sess_other["sessionId"]},
        tenant="t1",
        user="u1",
        expect=401,
    )
    assert r["error"]["code"] == "SESSION_INVALID"
    # the channel is whatever the server computes, not something the body can carry
    await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": mine.id, "sessionId": sess["sessionId"], "channel": "task_detail:t2/x"},
        tenant="t1",
        user="u1",
        expect=422,
    )


async def test_no_signing_keys_or_api_keys_reach_the_browser(h: Harness) -> None:
    """JWT 密钥、Server API Key 不出现在前端"""
    t = await h.create_task()
    sess = await h.user_get("/api/realtime/session")
    payloads = [
        str(sess),
        str(
            await h.user_post(
                "/api/realtime/subscription-token", {"taskId": t.id, "sessionId": sess["sessionId"]}
            )
        ),
        str(await h.user_get(f"/api/tasks/{t.id}")),
        str(await h.user_get("/api/tasks")),
        str(await h.user_get(f"/api/tasks/{t.id}/events")),
        (await h.http.get("/openapi.json")).text,
        *(str(r["payload"]) for r in await h.outbox_publications()),
    ]
    for secret in (SERVICE_SECRET, USER_SECRET, REALTIME_SECRET, EXEC_SECRET):
        assert not any(secret in p for p in payloads)


async def test_internal_reporting_needs_service_identity_is_rate_limited_and_audited(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """内部上报有服务身份认证、限流和审计"""
    t = await h.create_task()
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    assert (await h.http.post("/internal/v1/task-events", json=body)).status_code == 401
    assert (
        await h.http.post("/internal/v1/task-events", json=body, headers=auth("garbage"))
    ).status_code == 401
    r = await h.http.post("/internal/v1/tasks", json={}, headers=auth(service_token("worker", [])))
    assert r.status_code == 403 and r.json()["error"]["code"] == "ROLE_REQUIRED"
    # worker tokens cannot finish the task; a policy executor may only fail it
    r = await h.task_event(t, "TASK_COMPLETED", "COMPLETED", token=t.steps["01_prepare"].token, expect=403)
    assert r["error"]["code"] == "TOKEN_MISMATCH"
    r = await h.task_event(
        t, "TASK_COMPLETED", "COMPLETED", token=POLICY, producer="policy-executor", expect=403
    )
    assert r["error"]["code"] == "ROLE_REQUIRED"
    with caplog.at_level(logging.INFO, logger="status_api.audit"):
        await h.send(body, t.steps["01_prepare"].token)
    assert any(
        body["eventId"] in rec.getMessage() and "file-worker" in rec.getMessage() for rec in caplog.records
    )
    h.comp.api.limiter.rate, h.comp.api.limiter.burst = 1.0, 1.0
    h.comp.api.limiter.clock = lambda: 0.0
    await h.report(t, "01_prepare", "STEP_PROGRESS", "PREPARING")
    r = await h.report(t, "01_prepare", "STEP_PROGRESS", "PREPARING", expect=429)
    assert r["error"]["code"] == "RATE_LIMITED" and r["error"]["retryable"] is True


async def test_detail_subscription_quota_enforced_and_tokens_short_lived(h: Harness) -> None:
    """任务详情订阅数在服务端强制限额，Token 短期有效"""
    tasks = [await h.create_task() for _ in range(4)]
    sess = await h.user_get("/api/realtime/session")
    for t in tasks[:3]:
        tok = await h.user_post(
            "/api/realtime/subscription-token", {"taskId": t.id, "sessionId": sess["sessionId"]}
        )
        c = _rt(tok["token"])
        assert int(c["exp"]) - int(c["iat"]) <= 300  # type: ignore[call-overload]
    r = await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": tasks[3].id, "sessionId": sess["sessionId"]},
        expect=429,
    )
    assert r["error"]["code"] == "DETAIL_SUBSCRIPTION_LIMIT"
    # renewing an already-held subscription does not take a slot
    await h.user_post(
        "/api/realtime/subscription-token", {"taskId": tasks[0].id, "sessionId": sess["sessionId"]}
    )
    await h.user_post(
        "/api/realtime/subscription-release", {"taskId": tasks[0].id, "sessionId": sess["sessionId"]}
    )
    await h.user_post(
        "/api/realtime/subscription-token", {"taskId": tasks[3].id, "sessionId": sess["sessionId"]}
    )
    # leases expire with the token
    h.clock.advance(301)
    await h.user_post(
        "/api/realtime/subscription-token", {"taskId": tasks[0].id, "sessionId": sess["sessionId"]}
    )


async def test_project_broadcast_carries_no_private_task_details(h: Harness) -> None:
    """项目、租户和系统广播不包含越权任务详情"""
    t = await h.create_task(
        project="p9",
        summaryData={"schema": "document.process.summary.v1", "value": {"fileName": "salary-2026.pdf"}},
    )
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.report(
        t,
        "02_parse",
        "STEP_FAILED",
        "PARSE_FAILED",
        error={
            "category": "BUSINESS_INPUT",
            "code": "BAD_PDF",
            "retryable": False,
            "userMessage": "salary-2026.pdf is broken",
            "diagnosticsRef": "trace://x",
        },
    )
    project_rows = [r for r in await h.outbox_publications(t.id) if r["projection"] == "PROJECT_BROADCAST"]
    assert project_rows and all(r["channel"] == "task_project:t1/p9" for r in project_rows)
    for r in project_rows:
        text = str(r["payload"])
        for private in ("salary", "Contract parsing", "u1", "BAD_PDF", "trace://"):
            assert private not in text


@pytest.mark.parametrize("who", [("t2", "u1"), ("t1", "u2")])
async def test_tenant_and_user_isolation_on_every_user_endpoint(h: Harness, who: tuple[str, str]) -> None:
    """A user never reads, lists or subscribes to another tenant's or user's task."""
    tenant, user = who
    t = await h.create_task(tenant="t1", owner="u1", project="p9")
    assert (await h.user_get("/api/tasks", tenant=tenant, user=user))["items"] == []
    await h.user_get(f"/api/tasks/{t.id}", tenant=tenant, user=user, expect=404)
    await h.user_get(f"/api/tasks/{t.id}/events", tenant=tenant, user=user, expect=404)
    out = await h.user_post("/api/tasks/status:batchGet", {"taskIds": [t.id]}, tenant=tenant, user=user)
    assert out["tasks"] == [] and out["notFound"] == [t.id]
    sess = await h.user_get("/api/realtime/session", tenant=tenant, user=user)
    await h.user_post(
        "/api/realtime/subscription-token",
        {"taskId": t.id, "sessionId": sess["sessionId"]},
        tenant=tenant,
        user=user,
        expect=404,
    )
    # project membership only helps inside the same tenant
    await h.user_get(
        f"/api/tasks/{t.id}", tenant=tenant, user=user, projects=["p9"], expect=200 if tenant == "t1" else 404
    )
    # and the owner sees it
    assert [i["id"] for i in (await h.user_get("/api/tasks"))["items"]] == [t.id]


async def test_user_list_paging_and_batch_get_known_versions(h: Harness) -> None:
    ids = [(await h.create_task()).id for _ in range(5)]
    page1 = await h.user_get("/api/tasks?limit=2")
    page2 = await h.user_get(f"/api/tasks?limit=2&cursor={page1['nextCursor']}")
    page3 = await h.user_get(f"/api/tasks?limit=2&cursor={page2['nextCursor']}")
    seen = [i["id"] for p in (page1, page2, page3) for i in p["items"]]
    assert sorted(seen) == sorted(ids) and page3["nextCursor"] is None
    t = await h.create_task()
    out = await h.user_post("/api/tasks/status:batchGet", {"knownVersions": {t.id: "1", ids[0]: "1"}})
    assert out["tasks"] == [] and sorted(out["unchanged"]) == sorted([t.id, ids[0]])
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    out = await h.user_post("/api/tasks/status:batchGet", {"knownVersions": {t.id: "1", ids[0]: "1"}})
    assert [x["id"] for x in out["tasks"]] == [t.id] and out["tasks"][0]["version"] == "2"


async def test_user_token_signature_and_claims_are_required(h: Harness) -> None:
    none_alg = jwt.encode({"sub": "u1", "tenant": "t1", "exp": 9999999999}, key=None, algorithm="none")
    assert (await h.http.get("/api/tasks", headers=auth(none_alg))).status_code == 401
    no_tenant = jwt.encode({"sub": "u1", "exp": 9999999999}, USER_SECRET, "HS256")
    assert (await h.http.get("/api/tasks", headers=auth(no_tenant))).status_code == 401
    assert (await h.http.get("/api/tasks", headers=auth(user_token("t1", "u1")))).status_code == 200
    assert (await h.http.get("/api/tasks", headers=auth(COORDINATOR))).status_code == 401


async def test_a_service_credential_bound_to_a_tenant_acts_only_for_it(h: Harness) -> None:
    """The service JWT's ``tenant`` claim binds the credential (auth.py); creating a task of another
    tenant is refused. A malformed ``tenant`` claim is not a credential at all."""
    bound = jwt.encode(
        {"sub": "task-coordinator", "roles": ["coordinator"], "tenant": "t2", "exp": 9999999999},
        SERVICE_SECRET,
        "HS256",
    )
    r = await h.http.post("/internal/v1/tasks", json=_create_body("t1"), headers=auth(bound))
    assert r.status_code == 403 and r.json()["error"]["code"] == "TENANT_MISMATCH", r.text
    r = await h.http.post("/internal/v1/tasks", json=_create_body("t2"), headers=auth(bound))
    assert r.status_code == 201, r.text
    bad = jwt.encode(
        {"sub": "task-coordinator", "roles": ["coordinator"], "tenant": 7, "exp": 9999999999},
        SERVICE_SECRET,
        "HS256",
    )
    r = await h.http.post("/internal/v1/tasks", json=_create_body("t1"), headers=auth(bad))
    assert r.status_code == 401 and r.json()["error"]["code"] == "INVALID_SERVICE_CREDENTIAL"


def test_service_keys_carry_their_tenant() -> None:
    from status_api.auth import ServiceAuthenticator, ServiceAuthSettings, service_keys_from_config
    from status_api.tokens import TokenIssuer, TokenSettings

    keys = service_keys_from_config(
        [{"producer_id": "coord-a", "key": "k-a", "roles": ["coordinator"], "tenant_id": "t9"}]
    )
    tokens = TokenIssuer(TokenSettings(execution_secret=EXEC_SECRET, realtime_secret=REALTIME_SECRET))
    ident = ServiceAuthenticator(ServiceAuthSettings(mode="keys", keys=keys), tokens).service("k-a")
    assert ident.tenant_id == "t9" and ident.serves("t9") and not ident.serves("t1")


async def test_a_user_token_whose_projects_claim_is_not_a_list_is_refused(h: Harness) -> None:
    token = jwt.encode(
        {"sub": "u1", "tenant": "t1", "projects": "p1", "exp": 9999999999}, USER_SECRET, "HS256"
    )
    r = await h.http.get("/api/tasks", headers=auth(token))
    assert r.status_code == 401 and r.json()["error"]["code"] == "INVALID_USER_TOKEN"


def _create_body(tenant: str) -> dict[str, object]:
    return {
        "tenantId": tenant,
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "Contract parsing",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
    }
