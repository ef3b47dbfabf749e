"""The Status API's subscribe proxy behind a real gateway (issue 18, docs/security.md "proxy
mode"): a gateway whose ``task_detail`` namespace has ``subscribe_proxy_enabled`` asks
``POST /proxy/v1/subscribe`` of a real Status API process, authenticated by the shared-secret
static header. A browser connection (the Status API's own connection JWT) then subscribes to
detail channels WITHOUT subscription tokens: its own tasks are granted, another user's task is
refused 103, the per-connection quota refuses the next one 106, a reconnect does not reset the
per-user quota (106 past it on the new connection), and a wrong secret on the
gateway side fails closed (the proxy answers 401, the client gets a temporary error 100)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.helpers.raw_client import Raw
from tests.status_api.harness import (
    COORDINATOR,
    DEFAULT_STEPS,
    REALTIME_SECRET,
    TEST_CONFIG,
    auth,
    user_token,
)
from tests.support import GatewayProcess, StatusApiProcess, merge, scaled

SECRET = "proxy-secret-for-e2e-0123456789abcdef"
LIMIT = TEST_CONFIG["realtime"]["max_detail_subscriptions_per_session"]
USER_LIMIT = LIMIT + 1


@pytest.fixture(scope="module")
def status_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatusApiProcess]:
    workdir = tmp_path_factory.mktemp("proxy-e2e-api")
    cfg = merge(
        TEST_CONFIG,
        {
            "database": {"url": f"sqlite+aiosqlite:///{workdir}/status.db"},
            "subscribe_proxy": {"enabled": True, "secret": SECRET, "lease_seconds": 60},
            "realtime": {"max_detail_subscriptions_per_user": USER_LIMIT},
        },
    )
    proc = StatusApiProcess(cfg, workdir).start()
    yield proc
    proc.terminate()
    assert "Traceback" not in proc.log_text()


def _gateway(api: StatusApiProcess, workdir: Path, secret: str) -> GatewayProcess:
    config: dict[str, Any] = {
        "client": {"token": {"hmac_secret_key": REALTIME_SECRET}, "allowed_origins": ["*"]},
        "channel": {
            "proxy": {
                "subscribe": {
                    "endpoint": f"{api.url}/proxy/v1/subscribe",
                    "timeout": "5s",
                    "http": {"static_headers": {"X-Taskcast-Proxy-Secret": secret}},
                }
            },
            "namespaces": [
                {"name": "task_user", "history_size": 10, "history_ttl": "60s"},
                {"name": "task_detail", "subscribe_proxy_enabled": True},
            ],
        },
    }
    return GatewayProcess(config, workdir).start()


@pytest.fixture(scope="module")
def gateway(
    status_api: StatusApiProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gw = _gateway(status_api, tmp_path_factory.mktemp("proxy-e2e-gw"), SECRET)
    yield gw
    gw.terminate()


def _create_task(api: StatusApiProcess, owner: str) -> str:
    body = {
        "tenantId": "t1",
        "ownerId": owner,
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "Proxy e2e",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": DEFAULT_STEPS,
    }
    r = httpx.post(f"{api.url}/internal/v1/tasks", json=body, headers=auth(COORDINATOR), timeout=scaled(30))
    assert r.status_code == 201, r.text
    return str(r.json()["taskId"])


def _connection_token(api: StatusApiProcess, user: str) -> str:
    r = httpx.get(f"{api.url}/api/realtime/session", headers=auth(user_token("t1", user)), timeout=scaled(30))
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


async def _subscribe_all(gw: GatewayProcess, token: str, channels: list[str]) -> list[dict[str, Any]]:
    """Connect with ``token`` and subscribe to each channel (no subscription token); the replies."""
    async with connect(gw.ws_url) as ws:
        raw = Raw(ws)
        pump = asyncio.create_task(raw.pump())
        try:
            reply = await raw.call("connect", {"token": token})
            assert "connect" in reply, reply
            return [await raw.call("subscribe", {"channel": ch}) for ch in channels]
        finally:
            pump.cancel()


async def test_detail_channels_are_authorised_by_the_status_api_without_subscription_tokens(
    status_api: StatusApiProcess, gateway: GatewayProcess
) -> None:
    mine = [_create_task(status_api, "u1") for _ in range(USER_LIMIT + 1)]
    theirs = _create_task(status_api, "u2")
    channels = [f"task_detail:t1/{theirs}", *(f"task_detail:t1/{t}" for t in mine[: LIMIT + 1])]
    replies = await _subscribe_all(gateway, _connection_token(status_api, "u1"), channels)
    other, *own = replies
    assert other.get("error", {}).get("code") == 103, other  # not the user's task
    granted, over = own[:LIMIT], own[LIMIT]
    assert all("subscribe" in r for r in granted), granted
    assert over.get("error", {}).get("code") == 106, over  # the per-connection detail quota
    # A reconnect (a new connection, a new token) resets nothing: the per-user quota counts the
    # first connection's leases, so one more task fits, the next is refused.
    again = await _subscribe_all(
        gateway, _connection_token(status_api, "u1"), [f"task_detail:t1/{t}" for t in mine[LIMIT:]]
    )
    assert "subscribe" in again[0], again
    assert again[1].get("error", {}).get("code") == 106, again  # the per-user detail quota
    # The owner of the other task is granted it on its own connection.
    (theirs_reply,) = await _subscribe_all(gateway, _connection_token(status_api, "u2"), channels[:1])
    assert "subscribe" in theirs_reply, theirs_reply


async def test_a_gateway_with_the_wrong_secret_fails_closed(
    status_api: StatusApiProcess, tmp_path: Path
) -> None:
    gw = _gateway(status_api, tmp_path / "gw", "not-the-secret-0123456789abcdefghij")
    try:
        task = _create_task(status_api, "u1")
        (reply,) = await _subscribe_all(gw, _connection_token(status_api, "u1"), [f"task_detail:t1/{task}"])
        error = reply.get("error", {})
        assert error.get("code") == 100 and error.get("temporary") is True, reply
        assert "Traceback" not in gw.log_text()
        assert SECRET not in gw.log_text() and "not-the-secret" not in gw.log_text()
    finally:
        gw.terminate()
