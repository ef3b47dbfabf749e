"""``taskcast up --allowed-origin URL`` (issue 30): an app on its own dev server reaches the
gateway's WebSocket and the Status API (CORS) of a real ``taskcast up`` process; an origin it was
not given is refused by both; a malformed origin is a usage error; ``make up ARGS=…`` passes
options through. Also tenant/system broadcasts (seed §6.6) through the real pipeline."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from centrifuge import Client, PublicationContext, SubscriptionEventHandler
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from taskcast.dev.procs import ROOT, Proc, service_argv
from tests.support import free_port, scaled, wait_until, wait_until_blocking
from tests.support.procs import READY_TIMEOUT_SECONDS

APP = "http://localhost:5173"
OTHER = "http://localhost:5174"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    tmp = tmp_path_factory.mktemp("up-origins")
    pg, pa = free_port(), free_port()
    while pa == pg:
        pa = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKCAST_", "CENTRIFUGO_"))}
    argv = service_argv("up", "--port-gateway", str(pg), "--port-api", str(pa), "--no-demo")
    argv += [
        "--data-dir",
        str(tmp / "var"),
        "--allowed-origin",
        APP,
        "--allowed-origin",
        "https://App.Example.com",
    ]
    child = Proc("taskcast-up-origins", argv, env, tmp / "up.log").start()
    gateway, api = f"http://127.0.0.1:{pg}", f"http://127.0.0.1:{pa}"

    def healthy() -> bool:
        assert child.running, f"taskcast up exited early:\n{child.log_text()}"
        try:
            return (
                httpx.get(f"{gateway}/health", timeout=scaled(5)).status_code == 200
                and httpx.get(f"{api}/healthz", timeout=scaled(5)).status_code == 200
                and "Task board:" in child.log_text()
            )
        except httpx.TransportError:
            return False

    try:
        wait_until_blocking(healthy, READY_TIMEOUT_SECONDS, "taskcast up healthy")
        yield gateway, api, tmp / "var"
    finally:
        child.kill()


async def _ws_status(gateway: str, origin: str) -> int:
    url = gateway.replace("http://", "ws://") + "/connection/websocket"
    try:
        async with asyncio.timeout(scaled(10)), connect(url, origin=origin) as ws:  # type: ignore[arg-type]
            await ws.close()
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def test_the_app_origin_reaches_gateway_and_status_api(up: tuple[str, str, Path]) -> None:
    gateway, api, data_dir = up
    assert asyncio.run(_ws_status(gateway, APP)) == 101
    assert asyncio.run(_ws_status(gateway, "https://app.example.com")) == 101
    gw_cfg = json.loads((data_dir / "gateway.json").read_text())
    assert APP in gw_cfg["client"]["allowed_origins"]
    r = httpx.options(
        f"{api}/api/tasks",
        headers={
            "Origin": APP,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "x-taskcast-dev-user",
        },
        timeout=scaled(10),
    )
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == APP
    r = httpx.get(
        f"{api}/api/tasks",
        headers={"Origin": APP, "X-Taskcast-Dev-User": "demo/alice", "Sec-Fetch-Site": "same-site"},
        timeout=scaled(10),
    )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
    assert r.headers["access-control-allow-credentials"] == "true"


def test_an_origin_not_given_is_refused_by_both(up: tuple[str, str, Path]) -> None:
    gateway, api, _ = up
    assert asyncio.run(_ws_status(gateway, OTHER)) == 403
    r = httpx.options(
        f"{api}/api/tasks",
        headers={"Origin": OTHER, "Access-Control-Request-Method": "GET"},
        timeout=scaled(10),
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "CORS_ORIGIN_NOT_ALLOWED"
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("origin", ["localhost:5173", "http://localhost:5173/app", "*"])
def test_a_malformed_origin_is_a_usage_error(tmp_path: Path, origin: str) -> None:
    argv = service_argv("up", "--port-gateway", str(free_port()), "--port-api", str(free_port()))
    r = subprocess.run(
        [*argv, "--data-dir", str(tmp_path / "var"), "--allowed-origin", origin],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(30),
    )
    assert r.returncode == 2
    assert "--allowed-origin" in r.stderr and "is not an origin" in r.stderr


def test_make_up_passes_args_to_taskcast_up() -> None:
    r = subprocess.run(
        ["make", "-n", "up", f"ARGS=--allowed-origin {APP} --port-gateway 8001"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(30),
    )
    assert r.returncode == 0, r.stderr
    assert f"-m taskcast up --allowed-origin {APP} --port-gateway 8001" in r.stdout


class _Received(SubscriptionEventHandler):
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    async def on_publication(self, ctx: PublicationContext) -> None:
        self.items.append(ctx.pub.data)


async def _broadcast_reaches_a_subscriber(gateway: str, api: str, data_dir: Path) -> list[dict[str, Any]]:
    keys = json.loads((data_dir / "secrets.json").read_text())
    admin = jwt.encode(
        {"sub": "ops", "roles": ["admin"], "exp": int(time.time()) + 600}, keys["service_jwt_secret"], "HS256"
    )
    user = {"X-Taskcast-Dev-User": "demo/alice"}
    async with httpx.AsyncClient(base_url=api, timeout=scaled(30)) as http:
        session = (await http.get("/api/realtime/session", headers=user)).json()
        grants = {}
        for scope in ("system", "tenant"):
            r = await http.post("/api/realtime/broadcast-token", json={"scope": scope}, headers=user)
            assert r.status_code == 200, r.text
            grants[scope] = r.json()
        client = Client(
            f"{gateway.replace('http', 'ws')}/connection/websocket", token=session["token"], proxy=None
        )
        received = _Received()
        subs = [
            client.new_subscription(g["channel"], events=received, token=g["token"]) for g in grants.values()
        ]
        await client.connect()
        try:
            for sub in subs:
                await sub.subscribe()
                await sub.ready(timeout=scaled(10))
            for body in (
                {"scope": "system", "type": "MAINTENANCE", "message": "Maintenance at 22:00 UTC"},
                {"scope": "tenant", "tenantId": "demo", "type": "BATCH_PROGRESS", "message": "Import 40 %"},
            ):
                r = await http.post(
                    "/admin/v1/broadcasts", json=body, headers={"Authorization": f"Bearer {admin}"}
                )
                assert r.status_code == 201, r.text
            await wait_until(lambda: len(received.items) >= 2, 20, "both broadcasts delivered")
            return received.items
        finally:
            await client.disconnect()
            me = asyncio.current_task()
            await wait_until(lambda: asyncio.all_tasks() == {me}, 10, "the SDK to close its connection")


def test_tenant_and_system_broadcasts_reach_subscribers(up: tuple[str, str, Path]) -> None:
    """Seed §6.6 end to end: a user's broadcast tokens, an operator's notices through the outbox and
    the relay, a centrifuge client receiving both."""
    items = asyncio.run(_broadcast_reaches_a_subscriber(*up))
    assert sorted((d["scope"], d["type"], d["kind"]) for d in items) == [
        ("system", "MAINTENANCE", "broadcast.notice"),
        ("tenant", "BATCH_PROGRESS", "broadcast.notice"),
    ]
