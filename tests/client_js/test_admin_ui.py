"""The admin web UIs in headless Debian chromium (tests/client_js/admin_ui.mjs, playwright-core as
the board's browser tests use it) against real processes: a gateway with ``admin`` on its
internal listener and one connected client, and a Status API on SQLite with a task and a DEAD
outbox row. The script logs in (after a refused login on each), renders every page from their
data and takes its actions; this test checks the effects from outside: the publication reached
the client, the client was unsubscribed then disconnected, the DEAD row is PENDING again and
audited.

``TASKCAST_ADMIN_SCREENSHOTS=<dir>`` keeps the pages' screenshots (docs/img/ is made so).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support import GatewayProcess, StatusApiProcess, free_port, mint_token, scaled

pytestmark = pytest.mark.node

ROOT = Path(__file__).resolve().parents[2]
CLIENT_JS = ROOT / "client-js"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
PASSWORD = "admin-ui-password"
SECRET = "admin-ui-secret-long-enough-for-hs256-0123456789abcdefghijklmnop"
TOKEN_KEY = "admin-ui-client-token-secret-0123456789abcdef"
SERVICE_SECRET = "admin-ui-service-secret-0123456789abcdefgh"
CHANNEL, USER = "room", "alice"
FIRST = {"text": "hello"}
PUBLISH = {"from": "admin-ui", "n": 2}


def _service_token(sub: str, roles: list[str]) -> str:
    claims = {"sub": sub, "roles": roles, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, SERVICE_SECRET, algorithm="HS256")


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    config = {
        "admin": {"enabled": True, "password": PASSWORD, "secret": SECRET},
        "http_server": {"internal_port": str(free_port())},
        "client": {"token": {"hmac_secret_key": TOKEN_KEY}, "ping_interval": "300s", "pong_timeout": "100s"},
        "channel": {
            "without_namespace": {
                "presence": True,
                "history_size": 10,
                "history_ttl": "300s",
                "allow_subscribe_for_client": True,
            }
        },
    }
    gw = GatewayProcess(config, tmp_path / "gateway").start()
    try:
        yield gw
    finally:
        gw.terminate()


@pytest.fixture
def status_api(tmp_path: Path) -> Iterator[tuple[StatusApiProcess, Path]]:
    db = tmp_path / "status.db"
    config: dict[str, Any] = {
        "database": {"url": f"sqlite+aiosqlite:///{db}"},
        "internal_auth": {"mode": "jwt", "jwt_secret": SERVICE_SECRET, "rate_per_second": 0},
        "execution_token": {"secret": "admin-ui-exec-secret-0123456789abcdefgh"},
        "user_auth": {"mode": "dev"},
        "realtime": {"secret": "admin-ui-realtime-secret-0123456789abcdef"},
        "reconciler": {"enabled": False},
    }
    api = StatusApiProcess(config, tmp_path / "status").start()
    try:
        yield api, db
    finally:
        api.terminate()


def _client(gw: GatewayProcess, ws: ClientConnection) -> str:
    """Connect ``ws`` as USER, subscribe to CHANNEL, publish one message to it; the client id."""
    ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(TOKEN_KEY, USER)}}))
    client = json.loads(ws.recv(timeout=scaled(10)))["connect"]["client"]
    ws.send(json.dumps({"id": 2, "subscribe": {"channel": CHANNEL}}))
    reply = json.loads(ws.recv(timeout=scaled(10)))
    assert reply["id"] == 2 and "error" not in reply, reply
    publish = httpx.post(
        f"{gw.api_url}/publish",
        json={"channel": CHANNEL, "data": FIRST},
        headers={"X-API-Key": gw.api_key},
        timeout=scaled(10),
    )
    assert publish.json()["result"]["offset"] == 1
    assert json.loads(ws.recv(timeout=scaled(10)))["push"]["pub"]["data"] == FIRST
    return str(client)


def _task_with_a_dead_row(api: StatusApiProcess, db: Path) -> tuple[str, int]:
    coordinator = _service_token("task-coordinator", ["coordinator"])
    body = {
        "tenantId": "t1",
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "Contract parsing",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
    }
    headers = {"authorization": f"Bearer {coordinator}"}
    created = httpx.post(f"{api.url}/internal/v1/tasks", json=body, headers=headers, timeout=scaled(10))
    assert created.status_code == 201, created.text
    task = created.json()
    step = task["steps"][0]
    event = {
        "eventId": f"evt-{uuid.uuid4().hex}",
        "taskId": task["taskId"],
        "taskType": "DOCUMENT_PROCESS",
        "taskAttempt": step["taskAttempt"],
        "stepId": "01_prepare",
        "operationCode": step["operationCode"],
        "stepAttempt": step["stepAttempt"],
        "producerId": step["producerId"],
        "sourceSeq": 1,
        "eventType": "STEP_STARTED",
        "businessStatus": "PREPARING",
        "occurredAt": "2026-09-21T07:10:18.120Z",
    }
    reported = httpx.post(
        f"{api.url}/internal/v1/task-events",
        json=event,
        headers={"authorization": f"Bearer {step['executionToken']}", "Idempotency-Key": event["eventId"]},
        timeout=scaled(10),
    )
    assert reported.status_code == 200, reported.text
    # No relay runs here: one row is dead-lettered as a relay does on a permanent refusal.
    with sqlite3.connect(db) as conn:
        row_id = conn.execute(
            "SELECT min(id) FROM task_outbox WHERE aggregate_id = ? AND aggregate_version = 2",
            (task["taskId"],),
        ).fetchone()[0]
        conn.execute(
            "UPDATE task_outbox SET status = 'DEAD', attempts = 5, last_error = 'gateway refused: 400' "
            "WHERE id = ?",
            (row_id,),
        )
    return str(task["taskId"]), int(row_id)


@pytest.mark.timeout(300)
def test_admin_web_uis_in_headless_chromium(
    gateway: GatewayProcess, status_api: tuple[StatusApiProcess, Path]
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: run `bash scripts/bootstrap.sh` (installs Debian chromium)")
    if shutil.which("node") is None or not (CLIENT_JS / "node_modules" / "playwright-core").is_dir():
        pytest.fail("node or client-js/node_modules missing: run `bash scripts/bootstrap.sh`")
    api, db = status_api
    with connect(gateway.ws_url) as ws:
        client = _client(gateway, ws)
        _run_browser(gateway, api, db, ws, client)
    log = gateway.log_text()
    assert "admin login refused" in log and PASSWORD not in log and "not the password" not in log


def _run_browser(
    gateway: GatewayProcess, api: StatusApiProcess, db: Path, ws: ClientConnection, client: str
) -> None:
    task_id, dead_row = _task_with_a_dead_row(api, db)
    cfg = {
        "clientJs": str(CLIENT_JS),
        "screenshots": os.environ.get("TASKCAST_ADMIN_SCREENSHOTS", ""),
        "gateway": {
            "url": gateway.internal_url,
            "password": PASSWORD,
            "channel": CHANNEL,
            "user": USER,
            "client": client,
            "firstPublication": FIRST,
            "publish": PUBLISH,
        },
        "status": {
            "url": api.url,
            "admin": _service_token("ops-alice", ["admin"]),
            "coordinator": _service_token("task-coordinator", ["coordinator"]),
            "operator": "ops-alice",
            "taskId": task_id,
            "deadRow": dead_row,
        },
    }
    run = subprocess.run(
        ["node", str(Path(__file__).with_name("admin_ui.mjs"))],
        env={**os.environ, "ADMIN_UI": json.dumps(cfg)},
        capture_output=True,
        text=True,
        timeout=scaled(240),
        check=False,
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout[-6000:]}\nstderr:\n{run.stderr[-6000:]}"
    # The publish from the page reached the subscriber, the page's unsubscribe removed its
    # subscription, then the page's disconnect closed it.
    pushes: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            pushes.append(json.loads(ws.recv(timeout=scaled(10))))
    assert [p["push"]["pub"]["data"] for p in pushes if "pub" in p.get("push", {})] == [PUBLISH]
    assert [p["push"]["channel"] for p in pushes if "unsubscribe" in p.get("push", {})] == [CHANNEL]
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 3503  # Centrifugo's "force reconnect" of a server API disconnect
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM task_outbox WHERE id = ?", (dead_row,)).fetchone() == (
            "PENDING",
        )
        audit = conn.execute("SELECT operator_id, action, target, affected FROM operator_action").fetchall()
    assert audit == [("ops-alice", "dead.requeue", str(dead_row), 1)]
