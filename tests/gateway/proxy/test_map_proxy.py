"""Client map writes through the map publish / remove proxies (Centrifugo v6.8's
``map.publish_proxy_enabled`` / ``map.remove_proxy_enabled``, ``channel.proxy.map_publish`` /
``map_remove``), against a real HTTP and gRPC backend: the official centrifuge-js writes and
removes with the backend replacing key, data and tags, and a refusal (the backend's error) writes
nothing; every failure mode of the backend gives Centrifugo's code on the wire (a raw WebSocket
speaking the JSON protocol) and leaves the map untouched.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.gateway.proxy.test_proxy_failures import CUSTOM, INTERNAL, _ask, _ws
from tests.gateway.proxy.test_proxy_js import _run
from tests.support.procs import GatewayProcess
from tests.support.waiting import scaled

API_KEY = "map-proxy-key"


def map_proxy_config(endpoint: Callable[[str], str], *, timeout: str = "") -> dict[str, Any]:
    """``proxy_config`` plus the map namespace ``pm`` whose client writes and removals go to
    the default map publish / remove proxies."""
    config = proxy_config(endpoint, timeout=timeout)
    common = {"timeout": timeout or f"{scaled(30):g}s", "http_headers": ["Cookie"]}
    config["channel"]["proxy"]["map_publish"] = {"endpoint": endpoint("map_publish"), **common}
    config["channel"]["proxy"]["map_remove"] = {"endpoint": endpoint("map_remove"), **common}
    config["channel"]["namespaces"].append(
        {
            "name": "pm",
            "subscription_type": "map",
            "allow_subscribe_for_client": True,
            "map": {"mode": "persistent", "publish_proxy_enabled": True, "remove_proxy_enabled": True},
        }
    )
    config["http_api"] = {"key": API_KEY}
    return config


def _state(gw: GatewayProcess, channel: str) -> list[tuple[str, Any]]:
    """(key, data) of every entry of the map, through the server API."""
    request = urllib.request.Request(
        f"{gw.url}/api/map_read_state",
        data=json.dumps({"channel": channel, "limit": 100}).encode(),
        headers={"X-API-Key": API_KEY, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=scaled(30)) as response:
        result = json.loads(response.read())["result"]
    return [(e["key"], e.get("data")) for e in result.get("entries", [])]


FAILURES: dict[str, Any] = {
    "error": CUSTOM,
    "disconnect": (4501, "backend says no"),
    "status": INTERNAL,
    "garbage": INTERNAL,
    "hang": INTERNAL,
    "huge": INTERNAL,
}


async def _js_writes(gw: GatewayProcess, served: Served, wire: str) -> None:
    """centrifuge-js writes, removes and is refused (tests/conformance/js/map_proxy.mjs)."""
    channel = f"pm:{uuid.uuid4().hex[:8]}"
    events = await _run(
        "map_proxy.mjs", {"url": gw.ws_url, "cookie": "session=mapper", "channel": channel, "protocol": wire}
    )
    updates = [(e["key"], e["removed"], e["data"]) for e in events if e["event"] == "map_update"]
    assert updates == [
        ("b:a", False, {"modified": True, "original": {"x": 1}}),
        ("b:a", True, None),
        ("b:z", False, {"modified": True, "original": {"x": 3}}),
    ]
    first = next(e for e in events if e["event"] == "map_update")
    assert first["tags"] == {"via": "proxy"} and first["user"] == "mapper"
    assert [e["code"] for e in events if e["event"] == "refused"] == [1000]
    backend = served.backend
    publishes = backend.of("map_publish")
    assert [c.body["key"] for c in publishes] == ["a", "refuse", "z"]
    assert publishes[0].body["user"] == "mapper" and publishes[0].body["channel"] == channel
    assert publishes[0].body["data"] == {"x": 1}
    assert publishes[0].headers["cookie"] == "session=mapper"
    assert [c.body["key"] for c in backend.of("map_remove")] == ["a"]
    assert _state(gw, channel) == [("b:z", {"modified": True, "original": {"x": 3}})]


async def _write(gw: GatewayProcess, channel: str, *, removed: bool) -> Any:
    ws = await _ws(gw)
    try:
        first = await _ask(ws, {"id": 1, "connect": {}})
        assert isinstance(first, dict) and "connect" in first, first
        write: dict[str, Any] = {"channel": channel, "type": 1, "key": "k"}
        write.update({"removed": True} if removed else {"data": {"v": 1}})
        reply = await _ask(ws, {"id": 2, "publish": write})
        return reply if isinstance(reply, tuple) else reply.get("error", reply)
    finally:
        await ws.close()


@pytest.mark.node
@pytest.mark.parametrize(("protocol", "wire"), [("http", "json"), ("grpc", "protobuf")])
async def test_map_writes_through_the_proxies(
    protocol: str, wire: str, served: Served, start_gateway: GatewayStarter
) -> None:
    """One gateway per backend protocol (startup dominates): centrifuge-js first, then the
    failure modes on a raw JSON WebSocket."""
    gw = start_gateway(map_proxy_config(lambda k: served.endpoint(protocol, k), timeout="1s"))
    await _js_writes(gw, served, wire)
    backend = served.backend
    backend.calls.clear()
    backend.huge_size = 5 * 1024 * 1024  # past the default 4 MiB max_response_size
    channel = f"pm:{uuid.uuid4().hex[:8]}"
    # Removals share the call and the outcome handling: their own answers, a bounded subset.
    cases = [("map_publish", mode) for mode in FAILURES]
    cases += [("map_remove", mode) for mode in ("error", "disconnect", "garbage", "huge")]
    got: dict[tuple[str, str], Any] = {}
    for kind, mode in cases:
        backend.mode[kind] = mode
        got[(kind, mode)] = await _write(gw, channel, removed=kind == "map_remove")
        backend.mode[kind] = "ok"
    assert got == {(kind, mode): FAILURES[mode] for kind, mode in cases}
    assert _state(gw, channel) == []
    assert await _write(gw, channel, removed=False) == {"id": 2, "publish": {}}  # allowed: written
    assert _state(gw, channel) == [("b:k", {"modified": True, "original": {"v": 1}})]
    backend.mode["map_remove"] = "error"
    assert await _write(gw, channel, removed=True) == CUSTOM  # refused: the key stays
    assert _state(gw, channel) == [("b:k", {"modified": True, "original": {"v": 1}})]
    assert "Traceback" not in gw.log_text()
