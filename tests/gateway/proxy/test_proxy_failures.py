"""Each proxy failure mode gives the code Centrifugo gives, per command, over HTTP and gRPC, on
the wire (a raw WebSocket speaking the JSON protocol): the backend's ``error`` is the client's
error, its ``disconnect`` closes the connection with that code, and a proxy that times out, is
refused, answers 5xx / a gRPC error or garbage gives error 100 (temporary: the SDKs retry). No
case hangs, none crashes the connection or logs a traceback, and failures are counted in
``centrifugo_proxy_errors``."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from typing import Any

import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.support.procs import GatewayProcess, free_port
from tests.support.waiting import scaled

COOKIE = {"Cookie": "session=alice"}
INTERNAL = {"code": 100, "message": "internal server error", "temporary": True}
CUSTOM = {"code": 1000, "message": "custom error"}

COMMANDS: dict[str, dict[str, Any]] = {
    "subscribe": {"subscribe": {"channel": "px:room"}},
    "publish": {"publish": {"channel": "px:room", "data": {"a": 1}}},
    "rpc": {"rpc": {"method": "m", "data": {"b": 2}}},
}


async def _ws(gw: GatewayProcess) -> websockets.ClientConnection:
    return await websockets.connect(gw.ws_url, additional_headers=COOKIE, open_timeout=scaled(30))


async def _ask(ws: websockets.ClientConnection, command: dict[str, Any]) -> dict[str, Any] | tuple[int, str]:
    """The reply to ``command``, or the (code, reason) the server closed with."""
    await ws.send(json.dumps(command))
    try:
        async with asyncio.timeout(scaled(15)):
            while True:
                reply = json.loads(await ws.recv())
                if reply.get("id") == command["id"]:
                    return reply  # type: ignore[no-any-return]
    except ConnectionClosed as exc:
        assert exc.rcvd is not None
        return exc.rcvd.code, exc.rcvd.reason


async def _outcome(gw: GatewayProcess, kind: str) -> dict[str, Any] | tuple[int, str]:
    ws = await _ws(gw)
    try:
        first = await _ask(ws, {"id": 1, "connect": {}})
        if kind == "connect":
            return first if isinstance(first, tuple) else first.get("error", first)
        assert isinstance(first, dict) and "connect" in first, first
        reply = await _ask(ws, {"id": 2, **COMMANDS[kind]})
        return reply if isinstance(reply, tuple) else reply.get("error", reply)
    finally:
        await ws.close()


EXPECTED: dict[str, Any] = {
    "error": CUSTOM,
    "disconnect": (4501, "backend says no"),
    "status": INTERNAL,
    "garbage": INTERNAL,
    "hang": INTERNAL,
}


def _metrics(gw: GatewayProcess) -> str:
    with urllib.request.urlopen(f"{gw.url}/metrics", timeout=scaled(30)) as response:
        return response.read().decode()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_failure_modes_give_centrifugo_codes(
    protocol: str, served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k), timeout="1s"))
    got: dict[tuple[str, str], Any] = {}
    for kind in ("connect", *COMMANDS):
        for mode in EXPECTED:
            served.backend.mode[kind] = mode
            got[(kind, mode)] = await _outcome(gw, kind)
            served.backend.mode[kind] = "ok"
    assert got == {(kind, mode): EXPECTED[mode] for kind in ("connect", *COMMANDS) for mode in EXPECTED}
    text = _metrics(gw)
    # status, hang and (HTTP) a non-JSON body are failed calls; gRPC "garbage" is a well-formed
    # message with an unreadable b64 field: a failed result, not a failed call (as Centrifugo).
    failed_calls = 3.0 if protocol == "http" else 2.0
    for kind in ("connect", *COMMANDS):
        labels = f'name="default",protocol="{protocol}",type="{kind}"'
        assert f"centrifugo_proxy_errors{{{labels}}} {failed_calls}" in text
    assert "Traceback" not in gw.log_text()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_refused_proxy_gives_100(protocol: str, start_gateway: GatewayStarter) -> None:
    port = free_port()  # nothing listens there

    def nowhere(kind: str) -> str:
        return f"http://127.0.0.1:{port}/{kind}" if protocol == "http" else f"grpc://127.0.0.1:{port}"

    gw = start_gateway(proxy_config(nowhere, timeout="5s"))
    assert await _outcome(gw, "connect") == INTERNAL
    assert "Traceback" not in gw.log_text()


async def test_connect_result_subs_and_data(served: Served, start_gateway: GatewayStarter) -> None:
    """Server-side ``subs`` and ``data`` of the connect result are in the connect reply."""
    config = proxy_config(lambda k: served.endpoint("http", k))
    gw = start_gateway(config)
    ws = await websockets.connect(
        gw.ws_url, additional_headers={"Cookie": "session=subsalice"}, open_timeout=scaled(30)
    )
    try:
        reply = await _ask(ws, {"id": 1, "connect": {}})
        assert isinstance(reply, dict)
        assert reply["connect"]["subs"] == {"feed:subsalice": {"data": {"server_side": True}}}
        assert reply["connect"]["data"] == {"welcome": "subsalice"}
    finally:
        await ws.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_binary_encoding_static_headers_and_credentials(
    protocol: str, served: Served, start_gateway: GatewayStarter
) -> None:
    """``binary_encoding`` sends ``b64data``; static headers (HTTP) and the per-RPC credentials
    pair (gRPC) reach the backend; headers not in ``http_headers`` do not."""
    extra = {
        "binary_encoding": True,
        "http": {"static_headers": {"X-Static": "s1"}},
        "grpc": {"credentials_key": "authorization", "credentials_value": "Bearer k"},
    }
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k), **extra))
    ws = await websockets.connect(
        gw.ws_url, additional_headers={**COOKIE, "X-Private": "p"}, open_timeout=scaled(30)
    )
    try:
        reply = await _ask(ws, {"id": 1, "connect": {"data": {"hello": 1}}})
        assert isinstance(reply, dict) and "connect" in reply, reply
    finally:
        await ws.close()
    call = served.backend.of("connect")[0]
    assert call.body["encoding"] == "binary"
    assert base64.b64decode(call.body["b64data"]) == b'{"hello":1}' and "data" not in call.body
    assert "x-private" not in call.headers
    if protocol == "http":
        assert call.headers["x-static"] == "s1"
    else:
        assert call.headers["authorization"] == "Bearer k"
    assert "Bearer k" not in gw.log_text() and "session=alice" not in gw.log_text()
