"""The admin web UI's endpoints on a real gateway process (gateway/admin/): login with the
password, the admin token on every admin API call, wrong passwords (401, then 429 per address,
never logged), the server API's methods and ``connections`` through the admin API, the internal
listener, and ``admin.insecure``."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from gateway.admin.auth import LOGIN_FAILURES_ALLOWED
from tests.helpers.redis_engine import unique_prefix
from tests.support import GatewayProcess, free_port, mint_token
from tests.support.waiting import scaled, wait_until_blocking

PASSWORD = "correct horse battery staple"
SECRET = "admin-secret-long-enough-for-hs256-and-then-some-more-bytes-0123456789"
TOKEN_KEY = "client-token-secret-long-enough-for-hs256-0123456789"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "admin": {"enabled": True, "password": PASSWORD, "secret": SECRET},
        "http_server": {"internal_port": str(free_port())},
        "client": {"token": {"hmac_secret_key": TOKEN_KEY}},
        "channel": {
            "without_namespace": {
                "presence": True,
                "history_size": 10,
                "history_ttl": "300s",
                "allow_subscribe_for_client": True,
            }
        },
    }
    gw = GatewayProcess(config, tmp_path_factory.mktemp("admin")).start()
    try:
        yield gw
    finally:
        gw.terminate()


def request(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        url, data=body, headers=headers or {}, method="POST" if body is not None else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=scaled(10)) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def login(gw: GatewayProcess, password: str) -> tuple[int, dict[str, Any]]:
    body = urllib.parse.urlencode({"password": password}).encode()
    status, _, raw = request(
        f"{gw.internal_url}/admin/auth", body, {"content-type": "application/x-www-form-urlencoded"}
    )
    return status, json.loads(raw) if raw else {}


def admin_api(
    gw: GatewayProcess, token: str, method: str, params: dict[str, Any] | None = None
) -> tuple[int, Any]:
    body = json.dumps({"method": method, "params": params or {}}).encode()
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"token {token}"
    status, _, raw = request(f"{gw.internal_url}/admin/api", body, headers)
    return status, json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def token(gateway: GatewayProcess) -> str:
    status, body = login(gateway, PASSWORD)
    assert status == 200, body
    return str(body["token"])


def test_the_page_and_its_files_are_served_on_the_internal_listener_only(gateway: GatewayProcess) -> None:
    status, headers, page = request(gateway.internal_url + "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'src="/admin/static/admin.js"' in page and b"{{BASE}}" not in page
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    for name in ("admin.js", "admin.css"):
        assert request(f"{gateway.internal_url}/admin/static/{name}")[0] == 200
    assert request(f"{gateway.internal_url}/admin/static/../auth.py")[0] == 404
    for path in ("/", "/admin/init", "/admin/static/admin.js"):
        assert request(gateway.url + path)[0] == 404, path
    assert login(gateway, "x")[0] != 404 and request(gateway.url + "/admin/auth", b"password=x")[0] == 404


def test_init_says_whether_the_token_is_valid(gateway: GatewayProcess, token: str) -> None:
    _, _, raw = request(gateway.internal_url + "/admin/init")
    assert json.loads(raw) == {"insecure": False, "authenticated": False, "edition": "taskcast"}
    _, _, raw = request(gateway.internal_url + "/admin/init", headers={"authorization": f"token {token}"})
    assert json.loads(raw)["authenticated"] is True


def test_the_admin_api_needs_the_token(gateway: GatewayProcess, token: str) -> None:
    assert admin_api(gateway, "", "info") == (401, None)
    assert admin_api(gateway, token + "x", "info") == (401, None)
    status, body = admin_api(gateway, token, "info")
    assert status == 200 and len(body["result"]["nodes"]) == 1
    assert body["result"]["nodes"][0]["num_clients"] >= 0


def test_the_server_api_methods_and_connections_run_through_the_admin_api(
    gateway: GatewayProcess, token: str
) -> None:
    with connect(gateway.ws_url) as ws:
        ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(TOKEN_KEY, "alice")}}))
        client = json.loads(ws.recv(timeout=scaled(10)))["connect"]["client"]
        ws.send(json.dumps({"id": 2, "subscribe": {"channel": "room"}}))
        reply = json.loads(ws.recv(timeout=scaled(10)))
        assert reply["id"] == 2 and "error" not in reply, reply
        status, body = admin_api(gateway, token, "publish", {"channel": "room", "data": {"text": "hi"}})
        assert status == 200 and body["result"]["offset"] == 1
        assert json.loads(ws.recv(timeout=scaled(10)))["push"]["pub"]["data"] == {"text": "hi"}
        assert admin_api(gateway, token, "channels", {"pattern": "ro*"})[1] == {
            "result": {"channels": {"room": {"num_clients": 1}}}
        }
        presence = admin_api(gateway, token, "presence", {"channel": "room"})[1]["result"]["presence"]
        assert [p["user"] for p in presence.values()] == ["alice"]
        history = admin_api(gateway, token, "history", {"channel": "room", "limit": 10})[1]["result"]
        assert [p["data"] for p in history["publications"]] == [{"text": "hi"}]
        found = admin_api(gateway, token, "connections", {"user": "alice"})[1]["result"]["connections"]
        assert list(found) == [client] and found[client]["channels"] == ["room"]
        assert admin_api(gateway, token, "connections", {"user": "nobody"})[1] == {
            "result": {"connections": {}}
        }
        assert admin_api(gateway, token, "connections", {})[1]["error"]["code"] == 107
        assert admin_api(gateway, token, "no_such_method")[1]["error"]["code"] == 104
        assert admin_api(gateway, token, "disconnect", {"user": "alice", "client": client})[0] == 200
        wait_until_blocking(
            lambda: (
                not admin_api(gateway, token, "connections", {"user": "alice"})[1]["result"]["connections"]
            ),
            30,
            "alice's connection gone",
        )
    log = gateway.log_text()
    assert "admin api publish channel='room'" in log and "admin api disconnect user='alice'" in log


def test_wrong_passwords_are_refused_then_rate_limited_and_never_logged(tmp_path: Path) -> None:
    config = {"admin": {"enabled": True, "password": PASSWORD, "secret": SECRET}}
    gw = GatewayProcess(config, tmp_path).start()
    try:
        for i in range(LOGIN_FAILURES_ALLOWED):
            assert login(gw, f"guess-{i}") == (401, {"error": "wrong password"})
        status, headers, _ = request(
            gw.url + "/admin/auth",
            b"password=" + PASSWORD.encode(),
            {"content-type": "application/x-www-form-urlencoded"},
        )
        assert status == 429 and int(headers["retry-after"]) >= 1  # even the right one, until the window ends
        log = gw.log_text()
        assert log.count("admin login refused: wrong password from 127.0.0.1") == LOGIN_FAILURES_ALLOWED
        assert "guess-" not in log and PASSWORD not in log and SECRET not in log
    finally:
        gw.terminate()


def test_insecure_serves_without_login_and_warns_at_start(tmp_path: Path) -> None:
    gw = GatewayProcess(
        {"admin": {"enabled": True, "insecure": True, "handler_prefix": "/ops"}}, tmp_path
    ).start()
    try:
        status, _, page = request(gw.url + "/ops/")
        assert status == 200 and b'src="/ops/admin/static/admin.js"' in page
        assert json.loads(request(gw.url + "/ops/admin/init")[2])["authenticated"] is True
        assert admin_api_at(gw.url + "/ops/admin/api", "info")[0] == 200
        assert "admin.insecure is true" in gw.log_text()
        assert json.loads(request(gw.url + "/")[2])["links"]["admin"] == "/ops"
    finally:
        gw.terminate()


def admin_api_at(url: str, method: str) -> tuple[int, Any]:
    status, _, raw = request(
        url, json.dumps({"method": method}).encode(), {"content-type": "application/json"}
    )
    return status, json.loads(raw) if raw else None


@pytest.mark.redis
def test_connections_of_a_user_come_from_every_node(tmp_path: Path, redis_url: str) -> None:
    prefix = unique_prefix()
    config = {
        "admin": {"enabled": True, "password": PASSWORD, "secret": SECRET},
        "client": {"token": {"hmac_secret_key": TOKEN_KEY}},
        "engine": {"type": "redis", "redis": {"address": redis_url, "prefix": prefix, "io_timeout": "1s"}},
        "channel": {"without_namespace": {"allow_subscribe_for_client": True}},
    }
    a = GatewayProcess(config, tmp_path / "a").start()
    b = GatewayProcess(config, tmp_path / "b").start()
    try:
        wait_until_blocking(lambda: len(a.nodes()) == 2, 30, "both nodes in info")
        token = login(a, PASSWORD)[1]["token"]
        with connect(b.ws_url) as ws:
            ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(TOKEN_KEY, "bob")}}))
            client = json.loads(ws.recv(timeout=scaled(10)))["connect"]["client"]
            ws.send(json.dumps({"id": 2, "subscribe": {"channel": "lobby"}}))
            assert json.loads(ws.recv(timeout=scaled(10)))["id"] == 2
            found = admin_api(a, token, "connections", {"user": "bob"})[1]["result"]["connections"]
            b_node = next(n for n in b.nodes() if n["num_clients"] == 1)
            assert found == {
                client: {
                    "user": "bob",
                    "session": "",
                    "channels": ["lobby"],
                    "node": b_node["uid"],
                    "node_name": b_node["name"],
                }
            }
            # The disconnect from node A's admin API reaches the connection on node B.
            assert admin_api(a, token, "disconnect", {"user": "bob"})[0] == 200
            with pytest.raises(ConnectionClosed):
                while True:
                    ws.recv(timeout=scaled(10))
    finally:
        a.terminate()
        b.terminate()
