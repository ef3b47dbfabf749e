"""Server HTTP API in-process (httpx ASGITransport over the real app and memory engine)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import Runtime, create_app
from gateway.config import load_settings

KEY = "test-key"
CONFIG_ENV = {
    "TASKCAST_HTTP_API_KEY": KEY,
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_SIZE": "3",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_TTL": "300s",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_PRESENCE": "true",
    "TASKCAST_CHANNEL_NAMESPACES": '[{"name": "plain"}]',
}


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    settings, _ = load_settings(None, CONFIG_ENV)
    app = create_app(settings, Runtime(settings))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://gw", headers={"X-API-Key": KEY}
    ) as client:
        yield client


async def test_missing_or_wrong_key_is_401_with_empty_body(api):
    for headers in ({"X-API-Key": ""}, {"X-API-Key": "nope"}):
        r = await api.post("/api/info", json={}, headers=headers)
        assert r.status_code == 401 and r.content == b""


async def test_authorization_apikey_scheme(api):
    r = await api.post("/api/info", json={}, headers={"X-API-Key": "", "Authorization": f"ApiKey {KEY}"})
    assert r.status_code == 200


async def test_publish_assigns_offsets_and_idempotency_consumes_none(api):
    first = (
        await api.post("/api/publish", json={"channel": "c", "data": {"n": 1}, "idempotency_key": "k"})
    ).json()
    again = (
        await api.post("/api/publish", json={"channel": "c", "data": {"n": 1}, "idempotency_key": "k"})
    ).json()
    assert first == again
    assert first["result"]["offset"] == 1 and first["result"]["epoch"]
    nxt = (await api.post("/api/publish", json={"channel": "c", "data": {"n": 2}})).json()
    assert nxt["result"]["offset"] == 2


async def test_publish_without_history_returns_empty_result(api):
    r = (await api.post("/api/publish", json={"channel": "plain:x", "data": 1})).json()
    assert r == {"result": {}}


async def test_unknown_channel_is_102_with_http_200(api):
    r = await api.post("/api/publish", json={"channel": "undefined:channel", "data": {}})
    assert r.status_code == 200
    assert r.json() == {"error": {"code": 102, "message": "unknown channel"}}


async def test_transport_error_mode_maps_codes_to_statuses(api):
    r = await api.post(
        "/api/publish",
        json={"channel": "undefined:c", "data": {}},
        headers={"X-Centrifugo-Error-Mode": "transport"},
    )
    assert r.status_code == 404 and r.json() == {"code": 102, "message": "unknown channel"}


async def test_bad_requests(api):
    assert (await api.post("/api/publish", json={"data": {}})).json()["error"]["code"] == 107
    assert (await api.post("/api/publish", json={"channel": "c"})).json()["error"]["code"] == 107
    r = await api.post("/api/publish", content=b"{not json")
    assert r.status_code == 400
    assert (await api.get("/api/publish")).status_code == 405
    assert (await api.post("/api/nosuchmethod", json={})).json()["error"]["code"] == 104


async def test_broadcast_answers_per_channel(api):
    r = (await api.post("/api/broadcast", json={"channels": ["a", "undefined:b"], "data": {"x": 1}})).json()
    responses = r["result"]["responses"]
    assert responses[0]["result"]["offset"] == 1
    assert responses[1] == {"error": {"code": 102, "message": "unknown channel"}}


async def test_history_trims_to_size_and_since(api):
    for n in range(5):
        await api.post("/api/publish", json={"channel": "h", "data": {"n": n}})
    r = (await api.post("/api/history", json={"channel": "h", "limit": -1})).json()["result"]
    assert [p["offset"] for p in r["publications"]] == [3, 4, 5]
    assert r["offset"] == 5
    r2 = (
        await api.post(
            "/api/history", json={"channel": "h", "limit": 10, "since": {"offset": 4, "epoch": r["epoch"]}}
        )
    ).json()
    assert [p["data"] for p in r2["result"]["publications"]] == [{"n": 4}]
    bad = (
        await api.post(
            "/api/history", json={"channel": "h", "limit": 1, "since": {"offset": 1, "epoch": "x"}}
        )
    ).json()
    assert bad["error"]["code"] == 112
    empty = (await api.post("/api/history", json={"channel": "empty"})).json()["result"]
    assert empty["publications"] == [] and empty["offset"] == 0 and empty["epoch"]
    assert (await api.post("/api/history", json={"channel": "plain:x"})).json()["error"]["code"] == 108


async def test_history_remove_keeps_position(api):
    await api.post("/api/publish", json={"channel": "r", "data": 1})
    assert (await api.post("/api/history_remove", json={"channel": "r"})).json() == {"result": {}}
    r = (await api.post("/api/history", json={"channel": "r", "limit": -1})).json()["result"]
    assert r["publications"] == [] and r["offset"] == 1


async def test_batch_replies_carry_method_keys(api):
    body = {
        "commands": [{"publish": {"channel": "b", "data": 1}}, {"presence": {"channel": "b"}}, {"nope": {}}],
        "parallel": False,
    }
    r = (await api.post("/api/batch", json=body)).json()
    assert r["replies"][0]["publish"]["offset"] == 1
    assert r["replies"][1] == {"presence": {"presence": {}}}
    assert r["replies"][2] == {"error": {"code": 104, "message": "not found"}}


async def test_info_channels_presence_stats(api):
    info = (await api.post("/api/info", json={})).json()["result"]
    node = info["nodes"][0]
    assert {"uid", "name", "version", "num_clients", "num_users", "num_channels", "num_subs"} <= node.keys()
    assert (await api.post("/api/channels", json={})).json() == {"result": {"channels": {}}}
    stats = (await api.post("/api/presence_stats", json={"channel": "c"})).json()
    assert stats == {"result": {"num_clients": 0, "num_users": 0}}
    assert (await api.post("/api/presence", json={"channel": "plain:c"})).json()["error"]["code"] == 108


async def test_legacy_single_endpoint(api):
    body = b'{"method":"publish","params":{"channel":"l","data":1}}\n{"method":"info","params":{}}'
    r = await api.post("/api", content=body)
    lines = r.text.split("\n")
    assert '"offset":1' in lines[0] and '"nodes"' in lines[1]
