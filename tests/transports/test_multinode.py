"""Two gateway processes on the Redis engine behind no sticky sessions: an ``/emulation`` POST
that lands on the node NOT holding the session is routed to the owning node through the
engine's control channel (PROTOCOL.md §4.4), so its reply still arrives on the open stream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support import GatewayProcess, mint_token, scaled, wait_until, wait_until_blocking
from tests.transports.conftest import SECRET, of, open_stream, run_js, stream_config, uid

pytestmark = pytest.mark.redis

NodePair = tuple[GatewayProcess, GatewayProcess]


@pytest.fixture(scope="module")
def nodes(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodePair]:
    """Nodes A and B sharing one Redis prefix (unique per module run)."""
    engine = {"type": "redis", "redis": {"address": redis_url, "prefix": f"tc-mn-{uid()}"}}
    workdir = tmp_path_factory.mktemp("multinode")
    started: list[GatewayProcess] = []
    try:
        for name in ("a", "b"):
            config = stream_config(engine=engine, node={"name": f"node-{name}"})
            started.append(GatewayProcess(config, workdir / name).start())
        a, b = started
        wait_for_cluster(a, b)
        yield a, b
    finally:
        for gw in started:
            gw.terminate()


def wait_for_cluster(a: GatewayProcess, b: GatewayProcess) -> None:
    """Both nodes have seen each other's heartbeat (sent every 3 s)."""
    with httpx.Client(timeout=scaled(30)) as http:

        def both_see_two() -> bool:
            counts = [
                len(
                    http.post(f"{gw.api_url}/info", json={}, headers={"X-API-Key": gw.api_key}).json()[
                        "result"
                    ]["nodes"]
                )
                for gw in (a, b)
            ]
            return counts == [2, 2]

        wait_until_blocking(both_see_two, within=10.0, what="the two nodes seeing each other")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as client:
        yield client


async def api(http: httpx.AsyncClient, gw: GatewayProcess, method: str, params: dict[str, Any]) -> Any:
    resp = await http.post(f"{gw.api_url}/{method}", json=params, headers={"X-API-Key": gw.api_key})
    body = resp.json()
    assert "error" not in body, body
    return body.get("result")


@pytest.mark.parametrize("transport", ["sse", "http_stream"])
async def test_emulation_post_to_the_other_node_is_routed_to_the_session(http, nodes, transport):
    a, b = nodes
    channel = f"mn-{uid()}"
    command = {"id": 1, "connect": {"token": mint_token(SECRET, "42")}}
    if transport == "sse":
        query = httpx.QueryParams({"cf_connect": orjson.dumps(command).decode()})
        opened = open_stream(http, "GET", f"{a.url}/connection/sse?{query}", sse=True)
    else:
        opened = open_stream(
            http, "POST", f"{a.url}/connection/http_stream", sse=False, content=orjson.dumps(command)
        )
    async with opened as stream:
        connect = (await stream.next())["connect"]
        info = (await api(http, a, "info", {}))["nodes"]
        node_a = next(n["uid"] for n in info if n["name"] == "node-a")
        assert connect["node"] == node_a

        def body(*commands: dict[str, Any]) -> dict[str, str]:
            data = "\n".join(orjson.dumps(c).decode() for c in commands)
            return {"session": connect["session"], "node": connect["node"], "data": data}

        resp = await http.post(f"{b.url}/emulation", json=body({"id": 2, "subscribe": {"channel": channel}}))
        assert resp.status_code == 204
        reply = await stream.next()
        assert reply["id"] == 2 and reply["subscribe"]["recoverable"] is True

        # A publication through node B's API reaches the subscriber on node A (Redis PUB/SUB),
        # and a publish command POSTed to node B is answered on node A's stream.
        await api(http, b, "publish", {"channel": channel, "data": {"n": 1}})
        assert (await stream.next())["push"]["pub"] == {"data": {"n": 1}, "offset": 1}
        publish = {"id": 3, "publish": {"channel": channel, "data": {"n": 2}}}
        assert (await http.post(f"{b.url}/emulation", json=body(publish))).status_code == 204
        messages = [await stream.next() for _ in range(2)]
        assert {"id": 3, "publish": {}} in messages
        assert any(m.get("push", {}).get("pub", {}).get("offset") == 2 for m in messages)

        # A node id nobody announced: 404 (the SDK then reconnects).
        resp = await http.post(f"{b.url}/emulation", json={**body({}), "node": "no-such-node"})
        assert resp.status_code == 404


async def test_emulation_post_for_a_gone_session_is_dropped(http, nodes):
    a, b = nodes
    info = (await api(http, a, "info", {}))["nodes"]
    node_a = next(n["uid"] for n in info if n["name"] == "node-a")
    resp = await http.post(f"{b.url}/emulation", json={"session": "gone", "node": node_a, "data": "{}"})
    assert resp.status_code == 204

    async def a_still_healthy() -> bool:
        return (await http.get(f"{a.url}/health")).status_code == 200

    await wait_until(a_still_healthy, within=5.0, what="a_still_healthy")


@pytest.mark.node
@pytest.mark.parametrize("transport", ["sse", "http_stream"])
def test_js_over_emulation_with_posts_to_the_other_node(node_bin, nodes, transport):
    a, b = nodes
    channel, feed = f"js-{uid()}", f"feed:{uid()}"
    events = run_js(
        node_bin,
        "emulation_basic.mjs",
        a,
        transport=transport,
        emulation_gw=b,
        token=mint_token(SECRET, "42", channels=[feed]),
        channel=channel,
        feed=feed,
    )
    assert [e["transport"] for e in of(events, "connected")] == [transport]
    assert len(of(events, "connecting")) == 1
    assert [p["data"]["n"] for p in of(events, "publication")] == [1, 2, 3]
    assert of(events, "history")[0]["publications"] == [1, 2]


@pytest.mark.node
@pytest.mark.parametrize("transport", ["sse", "http_stream"])
def test_js_recovery_with_posts_to_the_other_node(node_bin, nodes, transport):
    a, b = nodes
    user, channel = f"u-{uid()}", f"rec-{uid()}"
    events = run_js(
        node_bin,
        "recovery.mjs",
        a,
        transport=transport,
        emulation_gw=b,
        token=mint_token(SECRET, user),
        user=user,
        channel=channel,
        before=2,
        away=3,
        serverSide=False,
    )
    first, second = of(events, "subscribed")
    assert first["wasRecovering"] is False
    assert second["wasRecovering"] is True and second["recovered"] is True
    assert [p["offset"] for p in of(events, "publication")] == [1, 2, 3, 4, 5]
