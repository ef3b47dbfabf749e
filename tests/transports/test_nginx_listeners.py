"""deploy/nginx/taskcast.conf.template in a real nginx in front of a real gateway and a real
Status API: the public listener serves only what browsers need (connections, /emulation, the
board, the user API) and refuses metrics, /internal/v1, /admin/v1, /proxy/v1, health and the
server API; the internal listener serves those."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from taskcast.dev.nginx import nginx_proc
from taskcast.dev.procs import Proc, free_port
from tests.status_api.harness import ADMIN, COORDINATOR, TEST_CONFIG
from tests.support import ROOT, GatewayProcess, StatusApiProcess, mint_token, scaled

HMAC = "listeners-hmac-secret-0123456789abcdef"
ADMIN_PASSWORD = "listeners-admin-password"


@dataclass
class Front:
    public: str
    internal: str
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    workdir = tmp_path_factory.mktemp("listeners")
    cfg = json.loads((ROOT / "deploy/gateway.json").read_text())
    cfg.pop("engine")
    cfg["client"]["token"]["hmac_secret_key"] = HMAC
    cfg["admin"].update(password=ADMIN_PASSWORD, secret="listeners-admin-secret-0123456789abcdef")
    gateway = GatewayProcess(cfg, workdir / "gw")
    api = StatusApiProcess(
        {**TEST_CONFIG, "database": {"url": f"sqlite+aiosqlite:///{workdir / 'api.db'}"}}, workdir / "api"
    )
    public, internal = free_port(), free_port()
    nginx: Proc | None = None
    try:
        gateway.start()
        api.start()
        nginx = nginx_proc(
            workdir / "nginx", public, internal, [f"127.0.0.1:{gateway.port}"], [f"127.0.0.1:{api.port}"]
        ).start()
        nginx.wait_ready(scaled(30))
        yield Front(f"http://127.0.0.1:{public}", f"http://127.0.0.1:{internal}", gateway)
    finally:
        if nginx is not None:
            nginx.stop()
        api.terminate()
        gateway.terminate()


REFUSED_IN_PUBLIC = [
    ("GET", "/metrics"),
    ("GET", "/gateway/metrics"),
    ("GET", "/health"),
    ("GET", "/readyz"),
    ("GET", "/openapi.json"),
    ("POST", "/internal/v1/tasks"),
    ("POST", "/internal/v1/task-events"),
    ("GET", "/admin/v1/outbox/stats"),
    ("POST", "/proxy/v1/subscribe"),
    ("POST", "/api/publish"),
    ("POST", "/api/info"),
    ("GET", "/gateway-admin"),
    ("GET", "/gateway-admin/admin/init"),
    ("POST", "/gateway-admin/admin/auth"),
]


@pytest.mark.parametrize(("method", "path"), REFUSED_IN_PUBLIC)
async def test_the_public_listener_refuses_what_browsers_do_not_need(front: Front, method: str, path: str):
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        headers = {"Authorization": f"Bearer {ADMIN}", "X-API-Key": "k"}
        reply = await http.request(method, front.public + path, json={}, headers=headers)
    assert reply.status_code == 404, (path, reply.status_code, reply.text[:200])
    assert "taskcast_" not in reply.text and "centrifugo_" not in reply.text


async def test_the_public_listener_serves_the_board_the_user_api_and_connections(front: Front):
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        board = await http.get(f"{front.public}/board", follow_redirects=True)
        assert board.status_code == 200 and "<html" in board.text.lower()
        tasks = await http.get(f"{front.public}/api/tasks")
        assert tasks.status_code == 401, tasks.text  # the Status API's answer, not nginx's 404
        assert tasks.json()["error"]["code"]
        emulation = await http.post(f"{front.public}/emulation", content=b"{}")
        assert emulation.status_code != 404, emulation.text
    async with connect(
        front.public.replace("http", "ws") + "/connection/websocket", origin="http://localhost:8080"
    ) as ws:  # type: ignore[arg-type]
        await ws.send(orjson.dumps({"id": 1, "connect": {"token": mint_token(HMAC, "u1")}}).decode())
        reply = json.loads(await ws.recv())
        assert reply["id"] == 1 and "connect" in reply, reply


async def test_the_internal_listener_serves_metrics_internal_admin_proxy_and_the_server_api(front: Front):
    async with httpx.AsyncClient(base_url=front.internal, timeout=scaled(10)) as http:
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200 and "taskcast_status_api_requests_total" in metrics.text
        gw_metrics = await http.get("/gateway/metrics")
        assert gw_metrics.status_code == 200 and "centrifugo_node_num_clients" in gw_metrics.text
        assert (await http.get("/gateway/health")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        body: dict[str, Any] = {
            "taskId": "listeners-1",
            "tenantId": "t1",
            "ownerId": "u1",
            "product": "DOCUMENT",
            "taskType": "DOCUMENT_PROCESS",
            "title": "through the internal listener",
            "statusDefinitionVersion": 1,
            "operationDefinitionVersion": 1,
            "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
        }
        created = await http.post(
            "/internal/v1/tasks", json=body, headers={"Authorization": f"Bearer {COORDINATOR}"}
        )
        assert created.status_code == 201, created.text
        stats = await http.get("/admin/v1/outbox/stats", headers={"Authorization": f"Bearer {ADMIN}"})
        assert stats.status_code == 200, stats.text
        proxy = await http.post("/proxy/v1/subscribe", json={})  # disabled here: the Status API says so
        assert "subscribe proxy" in proxy.json()["error"]["message"], proxy.text
        info = await http.post("/api/info", json={}, headers={"X-API-Key": front.gateway.api_key})
        assert info.status_code == 200 and "nodes" in info.json()["result"], info.text
        assert (await http.get("/board")).status_code == 404


async def test_the_internal_listener_serves_the_gateway_admin_ui(front: Front):
    async with httpx.AsyncClient(base_url=front.internal, timeout=scaled(10)) as http:
        page = await http.get("/gateway-admin")
        assert page.status_code == 200, page.text[:300]
        assert "/gateway-admin/admin/static/admin.js" in page.text, page.text[:300]
        assert (await http.get("/gateway-admin/admin/static/admin.js")).status_code == 200
        refused = await http.post("/gateway-admin/admin/auth", json={"password": "wrong"})
        assert refused.status_code == 401, refused.text
        login = await http.post("/gateway-admin/admin/auth", json={"password": ADMIN_PASSWORD})
        assert login.status_code == 200, login.text
        token = login.json()["token"]
        info = await http.post(
            "/gateway-admin/admin/api",
            json={"method": "info", "params": {}},
            headers={"Authorization": f"token {token}"},
        )
        assert info.status_code == 200 and info.json()["result"]["nodes"], info.text
