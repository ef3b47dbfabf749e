"""The official centrifuge-js SDK (Node, tests/conformance/js/proxy_cookie.mjs) through the
connect, subscribe, publish and RPC proxies with a cookie and no token, over HTTP and gRPC; and
(stream_proxy.mjs) through a subscribe stream proxy, over JSON and Protobuf."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from typing import Any

import pytest

from tests.conformance.conftest import JS_DIR
from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.gateway.proxy.test_stream_proxy import stream_config
from tests.support.waiting import scaled, wait_until

pytestmark = pytest.mark.node


async def _run(script: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    node = shutil.which("node")
    assert node is not None and (JS_DIR / "node_modules" / "centrifuge").is_dir()
    # Not subprocess.run: the backend answering the gateway runs on this event loop.
    proc = await asyncio.create_subprocess_exec(
        node,
        script,
        json.dumps(payload),
        cwd=JS_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(scaled(40)):
        out, err = await proc.communicate()
    events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and events[-1]["event"] == "done", (out.decode(), err.decode())
    return events


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_js_sdk_through_proxies(protocol: str, served: Served, start_gateway: GatewayStarter) -> None:
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k)))
    channel = f"px:{uuid.uuid4().hex[:8]}"
    events = await _run(
        "proxy_cookie.mjs", {"url": gw.ws_url, "cookie": "session=jsuser", "channel": channel}
    )
    by = {e["event"]: e for e in events}
    assert by["connect_data"]["data"] == {"welcome": "jsuser"}
    assert by["subscribe_data"]["data"] == {"subscribed": channel}
    assert by["publication"]["data"] == {"modified": True, "original": {"text": "from js"}}
    assert by["rpc"]["data"] == {"method": "echo", "echo": {"js": True}}
    assert served.backend.of("connect")[0].headers["cookie"] == "session=jsuser"


@pytest.mark.parametrize("protocol", ["json", "protobuf"])
@pytest.mark.parametrize("bidi", [False, True], ids=["unidirectional", "bidirectional"])
async def test_js_sdk_stream_subscription(
    protocol: str, bidi: bool, served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(stream_config(served, bidirectional=bidi))
    channel = f"st:{uuid.uuid4().hex[:8]}"
    payload = {
        "url": gw.ws_url,
        "cookie": "session=sam",
        "channel": channel,
        "bidi": bidi,
        "protocol": protocol,
    }
    script = asyncio.create_task(_run("stream_proxy.mjs", payload))
    await wait_until(lambda: served.backend.stream_requests or script.done(), what="stream opened")
    served.backend.feed(channel).put_nowait(b'{"n":1}')
    events = await script
    by = {e["event"]: e for e in events}
    assert by["subscribe_data"]["data"] == {"stream": channel}
    pubs = [e["data"] for e in events if e["event"] == "publication"]
    assert pubs[0] == {"n": 1}
    assert all(e["tags"] == {"via": "stream"} for e in events if e["event"] == "publication")
    if bidi:
        assert pubs[1] == {"echo": {"from": "js"}}
        assert served.backend.stream_published == [(channel, {"from": "js"})]
    assert served.backend.stream_requests[0][1]["protocol"] == protocol
    await wait_until(lambda: served.backend.streams_closed, what="stream cancelled")


@pytest.mark.parametrize(
    ("protocol", "wire", "transport"),
    [("http", "json", "websocket"), ("grpc", "protobuf", "websocket"), ("http", "json", "sse")],
    ids=["http-json", "grpc-protobuf", "http-json-sse"],
)
async def test_js_sdk_headers_emulation_reaches_the_proxies(
    protocol: str, wire: str, transport: str, served: Served, start_gateway: GatewayStarter
) -> None:
    """centrifuge-js's ``headers`` (and ``setHeaders``) arrive at the connect, subscribe and RPC
    proxies as request headers for the names in ``emulated_headers``, over WebSocket and over
    the SSE emulation (the connect travels in the SSE request, the rest as /emulation POSTs);
    a name only in ``http_headers`` is not forwarded from the emulated map."""
    config = proxy_config(lambda k: served.endpoint(protocol, k), emulated_headers=["Cookie", "X-Tenant"])
    config["sse"] = {"enabled": True}
    gw = start_gateway(config)
    channel = f"px:{uuid.uuid4().hex[:8]}"
    headers = {"Cookie": "session=emu", "X-Tenant": "t9", "X-Not-Listed": "no"}
    payload: dict[str, object] = {"url": gw.ws_url, "protocol": wire, "channel": channel, "headers": headers}
    if transport == "sse":
        payload["url"] = [{"transport": "sse", "endpoint": f"{gw.url}/connection/sse"}]
        payload["emulationEndpoint"] = f"{gw.url}/emulation"
    events = await _run("emulated_headers.mjs", {**payload, "cookie2": "session=emu2"})
    by = {e["event"]: e for e in reversed(events)}  # the first of each
    assert [e["data"] for e in events if e["event"] == "connect_data"] == [
        {"welcome": "emu"},
        {"welcome": "emu2"},
    ]
    assert by["subscribe_data"]["data"] == {"subscribed": channel}
    assert by["rpc"]["data"] == {"method": "echo", "echo": {"js": True}}
    backend = served.backend
    for call in (backend.of("connect")[0], backend.of("subscribe")[0], backend.of("rpc")[0]):
        assert call.headers["cookie"] == "session=emu" and call.headers["x-tenant"] == "t9", call
        assert "x-not-listed" not in call.headers
    assert [c.headers["cookie"] for c in backend.of("connect")] == ["session=emu", "session=emu2"]
