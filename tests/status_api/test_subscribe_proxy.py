"""The subscribe proxy for ``task_detail:`` channels (status_api/subscribe_proxy.py), fed the
request bodies Centrifugo's HTTP subscribe / sub_refresh proxy sends.

In process on SQLite and MariaDB: the ACL (owner, project via ``meta.projects``, tenant), the
per-connection quota and its renewal, lease expiry, sub_refresh, the per-user quota shared with the
token path (a new connection resets nothing; a release frees a proxy lease), the shared secret and
malformed bodies. Then real ``taskcast status-api serve`` processes on both databases: concurrent
subscribes of one connection never get more than N grants, and concurrent subscribes of one user's
many connections spread over two Status API replicas never get more than the user's quota.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from status_api.app import create_app
from status_api.queries import RealtimeQuota
from tests.helpers.mysql_db import schema_database
from tests.status_api.harness import (
    COORDINATOR,
    DEFAULT_STEPS,
    REALTIME_SECRET,
    TEST_CONFIG,
    Harness,
    auth,
    load_config_dict,
)
from tests.support import StatusApiProcess, merge, scaled

SECRET = "proxy-secret-for-tests-0123456789abcdef"
HEADER = {"X-Taskcast-Proxy-Secret": SECRET}
LIMIT = TEST_CONFIG["realtime"]["max_detail_subscriptions_per_session"]
PROXY_CONFIG = {"subscribe_proxy": {"enabled": True, "secret": SECRET, "lease_seconds": 60}}


def proxy_body(channel: str, user: str = "t1/u1", client: str = "c-1", **extra: Any) -> dict[str, Any]:
    """What Centrifugo posts to a subscribe proxy (internal/proxy: SubscribeRequest as JSON)."""
    return {
        "client": client,
        "transport": "websocket",
        "protocol": "json",
        "encoding": "json",
        "user": user,
        "channel": channel,
        **extra,
    }


@pytest.fixture
async def proxy(h: Harness) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(load_config_dict(merge(TEST_CONFIG, PROXY_CONFIG)), components=h.comp)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://status") as client:
        yield client


async def _sub(proxy: httpx.AsyncClient, body: dict[str, Any], path: str = "subscribe") -> dict[str, Any]:
    r = await proxy.post(f"/proxy/v1/{path}", json=body, headers=HEADER)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_owner_is_granted_with_expire_at_others_get_103(h: Harness, proxy: httpx.AsyncClient) -> None:
    t = await h.create_task(project="p1")
    ch = f"task_detail:t1/{t.id}"
    ok = await _sub(proxy, proxy_body(ch))
    assert set(ok) == {"result"} and ok["result"]["expire_at"] > 0
    denied = {"error": {"code": 103, "message": "permission denied"}}
    assert await _sub(proxy, proxy_body(ch, user="t1/mallory")) == denied
    assert await _sub(proxy, proxy_body(ch, user="t2/u1")) == denied  # other tenant, same user id
    assert await _sub(proxy, proxy_body(f"task_detail:t2/{t.id}", user="t2/u1")) == denied
    assert await _sub(proxy, proxy_body("task_detail:t1/no-such-task")) == denied
    assert await _sub(proxy, proxy_body(f"task_user:t1/u1/{t.id}")) == denied
    assert await _sub(proxy, proxy_body(ch, user="u1")) == denied  # not in subject_format
    # A project member, as the connection's meta (set by its issuer) says.
    member = proxy_body(ch, user="t1/bob", client="c-bob", meta={"projects": ["p1"]})
    assert "result" in await _sub(proxy, member)
    assert (
        await _sub(proxy, proxy_body(ch, user="t1/bob", client="c-bob2", meta={"projects": ["p2"]})) == denied
    )
    # c-1 is u1's connection: another user presenting its id (and the task's project) gets nothing.
    assert await _sub(proxy, proxy_body(ch, user="t1/bob", meta={"projects": ["p1"]})) == denied


async def test_quota_per_connection_renewal_and_expiry(h: Harness, proxy: httpx.AsyncClient) -> None:
    tasks = [await h.create_task() for _ in range(LIMIT + 1)]
    chans = [f"task_detail:t1/{t.id}" for t in tasks]
    for ch in chans[:LIMIT]:
        assert "result" in await _sub(proxy, proxy_body(ch))
    assert await _sub(proxy, proxy_body(chans[LIMIT])) == {
        "error": {"code": 106, "message": "limit exceeded"}
    }
    assert "result" in await _sub(proxy, proxy_body(chans[0]))  # the same task again: a renewal
    assert "result" in await _sub(proxy, proxy_body(chans[LIMIT], client="c-2"))  # another connection
    refreshed = await _sub(proxy, proxy_body(chans[1]), "sub-refresh")
    assert refreshed["result"]["expire_at"] > 0 and "expired" not in refreshed["result"]
    assert (await _sub(proxy, proxy_body(chans[LIMIT]), "sub-refresh")) == {"result": {"expired": True}}
    assert (await _sub(proxy, proxy_body(chans[1], user="t1/x"), "sub-refresh")) == {
        "result": {"expired": True}
    }
    h.clock.advance(61)  # every lease ran out: the slots are free again
    assert "result" in await _sub(proxy, proxy_body(chans[LIMIT]))


async def test_the_user_quota_is_shared_by_every_connection_and_the_token_path(h: Harness) -> None:
    """Seed §6.5: the per-user limit counts every connection of the user (a reconnect or token
    refresh is a new ``client`` id and resets nothing) and the token path's sessions together."""
    app = create_app(
        load_config_dict(
            merge(merge(TEST_CONFIG, PROXY_CONFIG), {"realtime": {"max_detail_subscriptions_per_user": 4}})
        ),
        components=h.comp,
    )
    h.comp.queries.quota = RealtimeQuota(
        max_detail_subscriptions_per_session=LIMIT, max_detail_subscriptions_per_user=4
    )
    tasks = [await h.create_task() for _ in range(7)]
    chans = [f"task_detail:t1/{t.id}" for t in tasks]
    over = {"error": {"code": 106, "message": "limit exceeded"}}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://status") as proxy:
        for ch in chans[:LIMIT]:  # the connection's own limit (3) ...
            assert "result" in await _sub(proxy, proxy_body(ch, client="first"))
        assert await _sub(proxy, proxy_body(chans[LIMIT], client="first")) == over
        # ... a reconnect is a new connection: one more task reaches the user's limit (4), then 106
        assert "result" in await _sub(proxy, proxy_body(chans[LIMIT], client="reconnected"))
        assert await _sub(proxy, proxy_body(chans[LIMIT + 1], client="reconnected")) == over
        assert await _sub(proxy, proxy_body(chans[LIMIT + 1], client="third-tab")) == over
        # a task the user already holds is not counted twice (another tab opens the same detail)
        assert "result" in await _sub(proxy, proxy_body(chans[0], client="third-tab"))
        # the token path counts the proxy's leases: 429 DETAIL_SUBSCRIPTION_LIMIT, scope user
        session = (await h.user_get("/api/realtime/session"))["sessionId"]
        r = await h.user_post(
            "/api/realtime/subscription-token", {"taskId": tasks[5].id, "sessionId": session}, expect=429
        )
        assert r["error"]["code"] == "DETAIL_SUBSCRIPTION_LIMIT"
        assert r["error"]["details"] == {"limit": 4, "scope": "user"}
        # releasing a task (client-js evicting its oldest invisible detail) frees it in every
        # connection of the user at once, not one lease later
        await h.user_post("/api/realtime/subscription-release", {"taskId": tasks[0].id, "sessionId": session})
        assert "result" in await _sub(proxy, proxy_body(chans[LIMIT + 1], client="third-tab"))
        # the token path's grant counts for the proxy in turn
        await h.user_post("/api/realtime/subscription-release", {"taskId": tasks[1].id, "sessionId": session})
        await h.user_post("/api/realtime/subscription-token", {"taskId": tasks[5].id, "sessionId": session})
        assert await _sub(proxy, proxy_body(chans[6], client="fourth")) == over
        # another user has a quota of their own
        mine = await h.create_task(owner="u2")
        assert "result" in await _sub(
            proxy, proxy_body(f"task_detail:t1/{mine.id}", user="t1/u2", client="u2")
        )


async def test_secret_and_malformed_bodies(h: Harness, proxy: httpx.AsyncClient) -> None:
    t = await h.create_task()
    body = proxy_body(f"task_detail:t1/{t.id}")
    for headers in ({}, {"X-Taskcast-Proxy-Secret": SECRET[:-1] + "x"}, auth(COORDINATOR)):
        r = await proxy.post("/proxy/v1/subscribe", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "PROXY_UNAUTHENTICATED"
    for bad in (
        [1],
        {**body, "client": ""},
        {**body, "user": 5},
        {**body, "client": "c" * 59},
        {"channel": "x"},
    ):
        r = await proxy.post("/proxy/v1/subscribe", json=bad, headers=HEADER)
        assert r.status_code == 422 and r.json()["error"]["code"] == "INVALID_PROXY_REQUEST", r.text
    r = await proxy.post("/proxy/v1/subscribe", content=b"{", headers=HEADER)
    assert r.status_code == 422
    # Off by default: the plain app answers 404 and never looks at the secret.
    r = await h.http.post("/proxy/v1/subscribe", json=body, headers=HEADER)
    assert r.status_code == 404


# --- real processes, real concurrency ------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)], scope="module")
def proxy_api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StatusApiProcess]:
    workdir = tmp_path_factory.mktemp(f"proxy-{request.param}")
    with _database(request, workdir) as url:
        cfg = merge(merge(TEST_CONFIG, PROXY_CONFIG), {"database": {"url": url, "pool_size": 20}})
        proc = StatusApiProcess(cfg, workdir).start()
        yield proc
        proc.terminate()
        assert "Traceback" not in proc.log_text()


class _database:
    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self.kind = request.param
        self.workdir = workdir
        self.request = request
        self.ctx: Any = None

    def __enter__(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite+aiosqlite:///{self.workdir}/status.db"
        self.ctx = schema_database(str(self.request.getfixturevalue("mysql_url")), "taskcast_proxy")
        return str(self.ctx.__enter__())

    def __exit__(self, *exc: object) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


async def _create_task(http: httpx.AsyncClient, owner: str = "u1") -> str:
    body = {
        "tenantId": "t1",
        "ownerId": owner,
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "Proxy quota",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": DEFAULT_STEPS,
    }
    r = await http.post("/internal/v1/tasks", json=body, headers=auth(COORDINATOR))
    assert r.status_code == 201, r.text
    return str(r.json()["taskId"])


async def test_concurrent_subscribes_of_one_connection_never_exceed_the_quota(
    proxy_api: StatusApiProcess,
) -> None:
    async with httpx.AsyncClient(base_url=proxy_api.url, timeout=scaled(60)) as http:
        ids = [await _create_task(http) for _ in range(4 * LIMIT)]

        async def sub(task_id: str, client: str) -> dict[str, Any]:
            body = proxy_body(f"task_detail:t1/{task_id}", client=client)
            r = await http.post("/proxy/v1/subscribe", json=body, headers=HEADER)
            assert r.status_code == 200, r.text
            return dict(r.json())

        for rnd in range(3):  # three rounds, two connections each, all at once
            clients = [f"conc-{rnd}-a", f"conc-{rnd}-b"]
            replies = await asyncio.gather(*(sub(i, c) for c in clients for i in ids))
            for n, client in enumerate(clients):
                mine = replies[n * len(ids) : (n + 1) * len(ids)]
                granted = [r for r in mine if "result" in r]
                assert len(granted) == LIMIT, (client, mine)
                assert all(
                    r == {"error": {"code": 106, "message": "limit exceeded"}} for r in mine if "error" in r
                )


async def test_the_connection_token_carries_projects_in_meta_for_the_proxy(h: Harness) -> None:
    """The gateway forwards a connection's JWT ``meta`` to the subscribe proxy: a project member's
    connection token carries the memberships there (server-side only), an owner's none."""
    member = await h.user_get("/api/realtime/session", user="bob", projects=["p2", "p1"])
    claims = jwt.decode(member["token"], REALTIME_SECRET, algorithms=["HS256"])
    assert claims["meta"] == {"projects": ["p1", "p2"]}
    owner = await h.user_get("/api/realtime/session")
    assert "meta" not in jwt.decode(owner["token"], REALTIME_SECRET, algorithms=["HS256"])


USER_LIMIT = 5


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)], scope="module")
def replicas(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[StatusApiProcess]]:
    """Two Status API processes over one database, as two replicas behind a load balancer."""
    workdir = tmp_path_factory.mktemp(f"proxy-replicas-{request.param}")
    with _database(request, workdir) as url:
        cfg = merge(
            merge(TEST_CONFIG, PROXY_CONFIG),
            {
                "database": {"url": url, "pool_size": 20},
                "realtime": {"max_detail_subscriptions_per_user": USER_LIMIT},
            },
        )
        procs = [StatusApiProcess(cfg, workdir / f"r{n}").start() for n in range(2)]
        yield procs
        for proc in procs:
            proc.terminate()
        for proc in procs:
            assert "Traceback" not in proc.log_text()


async def test_one_users_connections_on_two_replicas_never_exceed_the_user_quota(
    replicas: list[StatusApiProcess],
) -> None:
    """The quota state is in the database: concurrent subscribes from many connections of one user,
    spread over two replicas, grant at most ``max_detail_subscriptions_per_user`` distinct tasks."""
    async with (
        httpx.AsyncClient(base_url=replicas[0].url, timeout=scaled(60)) as a,
        httpx.AsyncClient(base_url=replicas[1].url, timeout=scaled(60)) as b,
    ):

        async def sub(
            http: httpx.AsyncClient, user: str, task_id: str, client: str
        ) -> tuple[str, dict[str, Any]]:
            body = proxy_body(f"task_detail:t1/{task_id}", user=f"t1/{user}", client=client)
            r = await http.post("/proxy/v1/subscribe", json=body, headers=HEADER)
            assert r.status_code == 200, r.text
            return task_id, dict(r.json())

        for rnd in range(2):  # each round a user of its own, all at once
            user = f"u-rep-{rnd}"
            ids = [await _create_task(a, owner=user) for _ in range(3 * USER_LIMIT)]
            # Six connections (3 per replica, 3 leases each: room for 18), each task asked by two
            # of them on different replicas: only the user's quota can refuse.
            calls = [
                sub(http, user, task_id, f"rep-{rnd}-{side}{n % 3}")
                for n, task_id in enumerate(ids)
                for side, http in (("a", a), ("b", b))
            ]
            replies = await asyncio.gather(*calls)
            granted = {task_id for task_id, r in replies if "result" in r}
            assert len(granted) == USER_LIMIT, replies
            refused = [r for _, r in replies if "error" in r]
            assert all(r == {"error": {"code": 106, "message": "limit exceeded"}} for r in refused)
