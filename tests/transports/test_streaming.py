"""Raw HTTP tests of the streaming transports against a real gateway process (PROTOCOL.md §4.2–4.5):
headers and the first flush, the emulation endpoint and its statuses, unidirectional SSE and
HTTP-streaming (pushes without the wrapper, pings, the final disconnect, recovery, connect errors)."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support import GatewayProcess, mint_token, scaled, wait_until
from tests.transports.conftest import (
    ALLOWED_ORIGIN,
    SECRET,
    cf_connect,
    open_stream,
    stream_config,
    uid,
)

NO_CACHE = "private, no-cache, no-store, must-revalidate, max-age=0"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as client:
        yield client


async def api(http: httpx.AsyncClient, gw: GatewayProcess, method: str, params: dict[str, Any]) -> Any:
    resp = await http.post(f"{gw.api_url}/{method}", json=params, headers={"X-API-Key": gw.api_key})
    body = resp.json()
    assert "error" not in body, body
    return body.get("result")


def connect_command(token: str) -> dict[str, Any]:
    return {"id": 1, "connect": {"token": token, "name": "raw"}}


async def emulate(
    http: httpx.AsyncClient, gw: GatewayProcess, connect: dict[str, Any], *commands: dict[str, Any]
) -> httpx.Response:
    data = "\n".join(orjson.dumps(c).decode() for c in commands)
    body = {"session": connect["session"], "node": connect["node"], "data": data}
    return await http.post(f"{gw.url}/emulation", json=body)


def bidi(http: httpx.AsyncClient, gw: GatewayProcess, transport: str, token: str) -> Any:
    command = connect_command(token)
    if transport == "sse":
        return open_stream(http, "GET", f"{gw.url}/connection/sse?cf_connect={cf_connect(command)}", sse=True)
    return open_stream(
        http,
        "POST",
        f"{gw.url}/connection/http_stream",
        sse=False,
        content=orjson.dumps(command),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )


def uni(http: httpx.AsyncClient, gw: GatewayProcess, transport: str, request: dict[str, Any]) -> Any:
    if transport == "uni_sse":
        url = f"{gw.url}/connection/uni_sse?cf_connect={cf_connect(request)}"
        return open_stream(http, "GET", url, sse=True)
    return open_stream(
        http,
        "POST",
        f"{gw.url}/connection/uni_http_stream",
        sse=False,
        content=orjson.dumps(request),
        headers={"Content-Type": "application/json"},
    )


def assert_no_cache(headers: httpx.Headers) -> None:
    assert headers["cache-control"] == NO_CACHE
    assert headers["pragma"] == "no-cache"
    assert headers["x-accel-buffering"] == "no"


# --- bidirectional emulation ---------------------------------------------------------------------


async def test_sse_headers_immediate_flush_and_connect_reply_with_session_and_node(http, gateway):
    async with bidi(http, gateway, "sse", mint_token(SECRET, "42")) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert_no_cache(stream.response.headers)
        reply = await stream.next()
        assert bytes(stream.raw).startswith(b"\r\ndata: {")
        assert reply["id"] == 1
        connect = reply["connect"]
        assert connect["client"] and connect["session"] and connect["node"]
        assert connect["session"] != connect["client"]
        assert connect["ping"] == 25 and connect["pong"] is True


async def test_http_stream_headers_and_connect_reply_line(http, gateway):
    async with bidi(http, gateway, "http_stream", mint_token(SECRET, "42")) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"] == "application/json"
        assert_no_cache(stream.response.headers)
        reply = await stream.next()
        assert bytes(stream.raw).startswith(b'{"id":1,"connect":')
        assert bytes(stream.raw).endswith(b"\n")
        assert reply["connect"]["session"] and reply["connect"]["node"]


async def test_sse_connect_by_post_body(http, gateway):
    command = orjson.dumps(connect_command(mint_token(SECRET, "42")))
    url = f"{gateway.url}/connection/sse"
    async with open_stream(http, "POST", url, sse=True, content=command) as stream:
        assert stream.response.headers["content-type"] == "text/event-stream; charset=utf-8"
        reply = await stream.next()
        assert reply["connect"]["session"]


@pytest.mark.parametrize("transport", ["sse", "http_stream"])
async def test_commands_through_emulation_get_replies_on_the_stream(http, gateway, transport):
    channel = f"emu-{uid()}"
    async with bidi(http, gateway, transport, mint_token(SECRET, "42")) as stream:
        connect = (await stream.next())["connect"]
        resp = await emulate(http, gateway, connect, {"id": 2, "subscribe": {"channel": channel}})
        assert resp.status_code == 204
        reply = await stream.next()
        assert reply["id"] == 2
        assert reply["subscribe"]["recoverable"] is True
        epoch = reply["subscribe"]["epoch"]

        # Two commands in one POST (newline-joined), answered in order; then a pong.
        resp = await emulate(
            http,
            gateway,
            connect,
            {"id": 3, "publish": {"channel": channel, "data": {"n": 1}}},
            {"id": 4, "history": {"channel": channel, "limit": 10}},
        )
        assert resp.status_code == 204
        messages = [await stream.next() for _ in range(3)]
        pub = next(m for m in messages if "push" in m)
        assert pub["push"]["channel"] == channel
        assert pub["push"]["pub"]["data"] == {"n": 1} and pub["push"]["pub"]["offset"] == 1
        assert pub["push"]["pub"]["info"]["user"] == "42"
        replies = [m for m in messages if "id" in m]
        assert [r["id"] for r in replies] == [3, 4]
        assert replies[1]["history"]["epoch"] == epoch
        assert (await emulate(http, gateway, connect, {})).status_code == 204

        await api(http, gateway, "publish", {"channel": channel, "data": {"n": 2}})
        push = await stream.next()
        assert push == {"push": {"channel": channel, "pub": {"data": {"n": 2}, "offset": 2}}}


@pytest.mark.parametrize("transport", ["sse", "http_stream"])
async def test_server_disconnect_writes_disconnect_push_and_ends_the_response(http, gateway, transport):
    user = f"u-{uid()}"
    async with bidi(http, gateway, transport, mint_token(SECRET, user)) as stream:
        await stream.next()
        await api(http, gateway, "disconnect", {"user": user, "disconnect": {"code": 4501, "reason": "bye"}})
        rest = await stream.wait_end()
        assert rest == [{"push": {"disconnect": {"code": 4501, "reason": "bye"}}}]


async def test_client_going_away_releases_the_connection(http, gateway):
    user = f"u-{uid()}"
    async with bidi(http, gateway, "http_stream", mint_token(SECRET, user)) as stream:
        await stream.next()
        info = await api(http, gateway, "info", {})
        assert info["nodes"][0]["num_users"] >= 1
        before = info["nodes"][0]["num_clients"]

    async def released() -> bool:
        return bool((await api(http, gateway, "info", {}))["nodes"][0]["num_clients"] < before)

    await wait_until(released, within=5.0, what="released")


# --- statuses -------------------------------------------------------------------------------------


async def test_emulation_statuses(http, gateway):
    url = f"{gateway.url}/emulation"
    async with bidi(http, gateway, "http_stream", mint_token(SECRET, "42")) as stream:
        connect = (await stream.next())["connect"]
        session, node = connect["session"], connect["node"]
        ok = {"session": session, "node": node, "data": "{}"}
        assert (await http.post(url, json=ok)).status_code == 204
        # An unknown session on this node is dropped silently, as in Centrifugo.
        assert (await http.post(url, json={**ok, "session": "nope"})).status_code == 204
        assert (await http.post(url, json={**ok, "node": "not-a-node"})).status_code == 404
        assert (await http.post(url, content=b"not json")).status_code == 400
        assert (await http.post(url, content=b"[1]")).status_code == 400
        assert (await http.post(url, json={"session": session, "node": node})).status_code == 400
        assert (await http.post(url, json={**ok, "data": {"id": 2}})).status_code == 400
        big = {**ok, "data": "{}" + " " * 70_000}
        assert (await http.post(url, json=big)).status_code == 413
        assert (await http.get(url)).status_code == 405
        assert (await http.put(url, json=ok)).status_code == 405
        # A malformed command inside data disconnects the session (3501), like a bad WS frame.
        assert (await http.post(url, json={**ok, "data": "not json"})).status_code == 204
        rest = await stream.wait_end()
        assert rest == [{"push": {"disconnect": {"code": 3501, "reason": "bad request"}}}]


@pytest.mark.parametrize("path", ["/emulation", "/connection/http_stream", "/connection/sse"])
async def test_cors_preflight(http, gateway, path):
    resp = await http.options(
        gateway.url + path,
        headers={
            "Origin": ALLOWED_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert resp.status_code == 204
    assert resp.headers["access-control-max-age"] == "300"
    assert "POST" in resp.headers["access-control-allow-methods"]
    assert resp.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "content-type" in resp.headers["access-control-allow-headers"].lower()


async def test_stream_endpoint_statuses(http, gateway):
    connect = orjson.dumps(connect_command(mint_token(SECRET, "42")))
    assert (await http.get(f"{gateway.url}/connection/http_stream")).status_code == 405
    assert (await http.put(f"{gateway.url}/connection/sse", content=connect)).status_code == 405
    assert (await http.get(f"{gateway.url}/connection/uni_http_stream")).status_code == 405
    assert (await http.get(f"{gateway.url}/connection/sse")).status_code == 400  # no cf_connect
    assert (await http.get(f"{gateway.url}/connection/uni_sse?cf_connect=%5B")).status_code == 400
    big = b'{"id":1,"connect":{"data":"' + b"x" * 70_000 + b'"}}'
    for path in ("/connection/http_stream", "/connection/sse", "/connection/uni_http_stream"):
        assert (await http.post(gateway.url + path, content=big)).status_code == 413


@pytest.mark.parametrize(
    "path", ["/connection/http_stream", "/connection/uni_http_stream", "/connection/sse", "/emulation"]
)
async def test_origin_check(http, gateway, path):
    body = orjson.dumps(connect_command(mint_token(SECRET, "42")))
    resp = await http.post(gateway.url + path, content=body, headers={"Origin": "http://evil.example"})
    assert resp.status_code == 403


async def test_allowed_origin_gets_cors_headers_on_the_stream(http, gateway):
    body = orjson.dumps(connect_command(mint_token(SECRET, "42")))
    async with open_stream(
        http,
        "POST",
        f"{gateway.url}/connection/http_stream",
        sse=False,
        content=body,
        headers={"Origin": ALLOWED_ORIGIN},
    ) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
        assert stream.response.headers["access-control-allow-credentials"] == "true"
        connect = (await stream.next())["connect"]
        resp = await emulate(http, gateway, connect, {})
        assert resp.status_code == 204


# --- unidirectional -------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["uni_sse", "uni_http_stream"])
async def test_uni_connect_push_server_side_publications_and_final_disconnect(http, gateway, transport):
    user, feed = f"u-{uid()}", f"feed:{uid()}"
    token = mint_token(SECRET, user, channels=[feed])
    async with uni(http, gateway, transport, {"token": token}) as stream:
        assert stream.response.status_code == 200
        assert_no_cache(stream.response.headers)
        if transport == "uni_sse":
            assert stream.response.headers["content-type"] == "text/event-stream; charset=utf-8"
        first = await stream.next()
        assert set(first) == {"connect"}, first  # no id, no push wrapper
        connect = first["connect"]
        assert connect["client"] and connect["session"]
        assert connect["subs"][feed]["recoverable"] is True
        assert "node" not in connect  # only emulation transports need it
        await api(http, gateway, "publish", {"channel": feed, "data": {"n": 1}})
        assert await stream.next() == {"channel": feed, "pub": {"data": {"n": 1}, "offset": 1}}
        await api(http, gateway, "disconnect", {"user": user})
        rest = await stream.wait_end()
        assert rest == [{"disconnect": {"code": 3503, "reason": "force disconnect"}}]


async def test_uni_sse_empty_request_is_anonymous_when_allowed(http, gateway_factory):
    gw = gateway_factory(stream_config(client={"allow_anonymous_connect_without_token": True}))
    async with uni(http, gw, "uni_sse", {}) as stream:
        first = await stream.next()
        assert first["connect"]["client"]


@pytest.mark.parametrize("transport", ["uni_sse", "uni_http_stream"])
async def test_uni_recovers_server_side_subscription_from_positions_in_the_connect_request(
    http, gateway, transport
):
    user, feed = f"u-{uid()}", f"feed:{uid()}"
    token = mint_token(SECRET, user, channels=[feed])
    async with uni(http, gateway, transport, {"token": token}) as stream:
        sub = (await stream.next())["connect"]["subs"][feed]
        epoch = sub["epoch"]
        for n in (1, 2):
            await api(http, gateway, "publish", {"channel": feed, "data": {"n": n}})
        assert [(await stream.next())["pub"]["offset"] for _ in range(2)] == [1, 2]
    for n in (3, 4, 5):  # published while the client is away
        await api(http, gateway, "publish", {"channel": feed, "data": {"n": n}})
    request = {"token": token, "subs": {feed: {"recover": True, "offset": 2, "epoch": epoch}}}
    async with uni(http, gateway, transport, request) as stream:
        sub = (await stream.next())["connect"]["subs"][feed]
        assert sub["recovered"] is True
        assert sub["was_recovering"] is True
        assert [p["data"]["n"] for p in sub["publications"]] == [3, 4, 5]
        assert [p["offset"] for p in sub["publications"]] == [3, 4, 5]
        await api(http, gateway, "publish", {"channel": feed, "data": {"n": 6}})
        assert await stream.next() == {"channel": feed, "pub": {"data": {"n": 6}, "offset": 6}}


@pytest.mark.parametrize("transport", ["uni_sse", "uni_http_stream"])
async def test_uni_connect_error_becomes_a_disconnect(http, gateway, transport):
    token = mint_token(SECRET, "42", exp_in=-10)
    async with uni(http, gateway, transport, {"token": token}) as stream:
        assert stream.response.status_code == 200
        rest = await stream.wait_end()
        assert rest == [{"disconnect": {"code": 3005, "reason": "connection expired"}}]


async def test_uni_unknown_server_side_channel_disconnects(http, gateway):
    token = mint_token(SECRET, "42", channels=[f"nosuchns:{uid()}"])
    async with uni(http, gateway, "uni_http_stream", {"token": token}) as stream:
        rest = await stream.wait_end()
        assert len(rest) == 1 and set(rest[0]) == {"disconnect"}


async def test_uni_pings_are_empty_objects(http, gateway_factory):
    gw = gateway_factory(stream_config(client={"ping_interval": 1.0, "pong_timeout": 0.5}))
    feed = f"feed:{uid()}"
    token = mint_token(SECRET, "42", channels=[feed])
    async with uni(http, gw, "uni_http_stream", {"token": token}) as stream:
        connect = (await stream.next())["connect"]
        assert connect["ping"] == 1
        assert "pong" not in connect or connect["pong"] is False
        # No pong is ever sent (a unidirectional client cannot): pings keep coming.
        assert [await stream.next(wait=3) for _ in range(3)] == [{}, {}, {}]


@pytest.mark.parametrize("transport", ["uni_sse", "http_stream"])
async def test_graceful_shutdown_sends_3001_and_ends_streams_quickly(http, gateway_factory, transport):
    gw = gateway_factory(stream_config(shutdown={"timeout": "10s"}))
    token = mint_token(SECRET, "42", channels=[f"feed:{uid()}"])
    opened = (
        uni(http, gw, transport, {"token": token})
        if transport.startswith("uni")
        else bidi(http, gw, transport, token)
    )
    async with opened as stream:
        await stream.next()
        started = asyncio.get_running_loop().time()
        gw.send_sigterm()
        rest = await stream.wait_end(wait=5)
        assert asyncio.get_running_loop().time() - started < scaled(3)
        disconnect = {"code": 3001, "reason": "shutdown"}
        assert rest == [
            {"disconnect": disconnect}
            if transport.startswith("uni")
            else {"push": {"disconnect": disconnect}}
        ]
    assert await asyncio.to_thread(gw.wait, 5.0) in (0, -signal.SIGTERM)  # uvicorn re-raises it


async def test_stream_that_stops_reading_is_dropped_at_queue_max_size(http, gateway_factory):
    """A reader that stops reading (tiny receive window, never reads) fills the kernel buffers,
    then the gateway's queue; at client.queue_max_size the connection is dropped (3008) and
    released, while the gateway keeps serving others."""
    gw = gateway_factory(stream_config(client={"queue_max_size": 65536}, prometheus={"enabled": True}))
    user, feed = f"slow-{uid()}", f"feed:{uid()}"
    body = orjson.dumps(connect_command(mint_token(SECRET, user, channels=[feed])))
    request = (
        f"POST /connection/http_stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", gw.port))
        await loop.sock_sendall(sock, request)
        head = b""
        async with asyncio.timeout(scaled(30)):
            while b'"connect"' not in head:
                head += await loop.sock_recv(sock, 1024)

        async def slow_client_gone() -> bool:
            return bool((await api(http, gw, "info", {}))["nodes"][0]["num_clients"] == 0)

        assert not await slow_client_gone()
        payload = {"blob": "x" * 32_000}
        for n in range(400):  # up to ~13 MB: more than loopback socket buffers can absorb
            await api(http, gw, "publish", {"channel": feed, "data": {**payload, "n": n}})
            if n % 20 == 19 and await slow_client_gone():
                break
        await wait_until(slow_client_gone, within=5.0, what="slow_client_gone")
        metrics = (await http.get(f"{gw.url}/metrics")).text
        assert re.search(r'client_num_server_disconnects\{code="3008"\} [1-9]', metrics), metrics
    finally:
        sock.close()
    # Others are unaffected: a new stream connects and gets its reply at once.
    async with bidi(http, gw, "http_stream", mint_token(SECRET, "42")) as stream:
        assert "connect" in await stream.next()
