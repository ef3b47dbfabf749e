"""Issue 28, defect 2 and risk 8, against real gateway processes: a value that cannot reach a
reply is refused where it enters, with Centrifugo's code, and nothing is left counted.

- Connection and subscription tokens whose ``exp`` is in milliseconds, 2^40, 2^63 or 1e20: the
  JSON and the Protobuf client both get the invalid-token answer at once (3500 / error 103),
  where they used to get no reply while the node counted them as connected.
- Proxy results (HTTP and gRPC) with ``expire_at`` 2^40, an error code 2^40, a disconnect code 0
  or 99,999: an unreadable answer, error 100; a 1 KB disconnect reason is cut to fit the close
  frame (123 bytes), so the client still gets the backend's code.
- The server API: a disconnect code outside 3000–4999 and an ``expire_at`` 2^40 are 107; a
  1 KB reason reaches the client cut to fit.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.framing import delimited, split_frame
from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.gateway.proxy.test_proxy_failures import COOKIE, INTERNAL, _ask, _outcome
from tests.support.procs import GatewayProcess
from tests.support.waiting import scaled, wait_until

SECRET = "hostile-values-secret-of-at-least-32-bytes"
KILOBYTE_REASON = "é" * 512  # 1,024 bytes of UTF-8: a naive cut at 123 bytes splits a character


def _exps() -> list[Any]:
    now = int(time.time())
    return [now * 1000, 2**40, 2**63, 1e20]


def _token(**claims: Any) -> str:
    return jwt.encode({"sub": "u1", **claims}, SECRET, algorithm="HS256")


def _num_clients(gw: GatewayProcess) -> int:
    with urllib.request.urlopen(f"{gw.url}/metrics", timeout=scaled(30)) as response:
        text = response.read().decode()
    match = re.search(r"^centrifugo_node_num_clients (\S+)$", text, re.M)
    assert match, "no num_clients gauge"
    return int(float(match.group(1)))


@pytest.fixture
def token_gw(tmp_path: Path) -> Any:
    config = {
        "prometheus": {"enabled": True},
        "client": {"token": {"hmac_secret_key": SECRET}},
        "channel": {"without_namespace": {"allow_subscribe_for_client": True}},
    }
    gw = GatewayProcess(config, tmp_path / "gw").start()
    yield gw
    gw.terminate()


async def _json_connect(gw: GatewayProcess, token: str) -> dict[str, Any] | tuple[int, str]:
    async with websockets.connect(gw.ws_url, open_timeout=scaled(30)) as ws:
        return await _ask(ws, {"id": 1, "connect": {"token": token}})


async def _protobuf_connect(gw: GatewayProcess, token: str) -> pb.Reply | tuple[int, str]:
    async with websockets.connect(
        gw.ws_url,
        subprotocols=["centrifuge-protobuf"],  # type: ignore[list-item]
        open_timeout=scaled(30),
    ) as ws:
        await ws.send(delimited(pb.Command(id=1, connect=pb.ConnectRequest(token=token))))
        try:
            async with asyncio.timeout(scaled(15)):
                while True:
                    frame = await ws.recv()
                    assert isinstance(frame, bytes)
                    for body in split_frame(frame):
                        reply = pb.Reply()
                        reply.ParseFromString(body)
                        if reply.id == 1:
                            return reply
        except ConnectionClosed as exc:
            assert exc.rcvd is not None
            return exc.rcvd.code, exc.rcvd.reason


async def test_out_of_range_token_expiry_is_an_invalid_token_on_both_codecs(token_gw: GatewayProcess) -> None:
    for exp in _exps():
        token = _token(exp=exp)
        assert await _json_connect(token_gw, token) == (3500, "invalid token"), exp
        assert await _protobuf_connect(token_gw, token) == (3500, "invalid token"), exp
        explicit = _token(expire_at=exp)  # the explicit connection expiry claim, same bound
        assert await _json_connect(token_gw, explicit) == (3500, "invalid token"), exp
    await wait_until(lambda: _num_clients(token_gw) == 0, within=10, what="no half-connection")
    # a far but real expiry ("never" as 9999999999) still connects, with a ttl that fits uint32
    reply = await _protobuf_connect(token_gw, _token(exp=9_999_999_999))
    assert isinstance(reply, pb.Reply) and reply.connect.expires and reply.connect.ttl > 0
    assert "Traceback" not in token_gw.log_text()


async def test_out_of_range_subscription_token_expiry_is_permission_denied(token_gw: GatewayProcess) -> None:
    async with websockets.connect(token_gw.ws_url, open_timeout=scaled(30)) as ws:
        first = await _ask(ws, {"id": 1, "connect": {"token": _token()}})
        assert isinstance(first, dict) and "connect" in first, first
        for n, exp in enumerate(_exps(), start=2):
            sub_token = _token(channel="room", exp=exp)
            reply = await _ask(ws, {"id": n, "subscribe": {"channel": "room", "token": sub_token}})
            assert isinstance(reply, dict) and reply.get("error", {}).get("code") == 103, (exp, reply)
    assert "Traceback" not in token_gw.log_text()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_out_of_range_proxy_values_are_unreadable_answers(
    protocol: str, served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k)))
    backend = served.backend
    hostile: list[tuple[str, dict[str, Any]]] = [
        ("connect", {"result": {"user": "alice", "expire_at": 2**40}}),
        ("subscribe", {"result": {"expire_at": 2**40}}),
        ("connect", {"disconnect": {"code": 0, "reason": "zero"}}),
        ("connect", {"disconnect": {"code": 99_999, "reason": "too big"}}),
        ("subscribe", {"disconnect": {"code": 1000, "reason": "protocol range"}}),
    ]
    if protocol == "http":  # proxy.proto's uint32 cannot carry these over gRPC
        hostile += [
            ("connect", {"error": {"code": 2**40, "message": "huge"}}),
            ("rpc", {"error": {"code": 2**64, "message": "huger"}}),
        ]
    for kind, answer in hostile:
        backend.mode[kind], backend.raw[kind] = "raw", answer
        assert await _outcome(gw, kind) == INTERNAL, (kind, answer)
        backend.mode[kind] = "ok"
    # A long reason is cut to fit the close frame: the client still gets the backend's code.
    backend.mode["connect"], backend.raw["connect"] = (
        "raw",
        {"disconnect": {"code": 4501, "reason": KILOBYTE_REASON}},
    )
    code, reason = await _outcome(gw, "connect")  # type: ignore[misc]
    assert code == 4501 and len(reason.encode()) <= 123 and reason and set(reason) == {"é"}
    await wait_until(lambda: _num_clients(gw) == 0, within=10, what="no half-connection")
    assert "Traceback" not in gw.log_text()


async def test_server_api_refuses_values_no_reply_can_carry(token_gw: GatewayProcess) -> None:
    headers = {"X-API-Key": token_gw.api_key}
    async with (
        httpx.AsyncClient(base_url=token_gw.api_url, headers=headers, timeout=scaled(30)) as api,
        websockets.connect(token_gw.ws_url, open_timeout=scaled(30)) as ws,
    ):
        first = await _ask(ws, {"id": 1, "connect": {"token": _token()}})
        assert isinstance(first, dict) and "connect" in first, first
        for body in (
            {"user": "u1", "disconnect": {"code": 99_999, "reason": "x"}},
            {"user": "u1", "disconnect": {"code": 1000, "reason": "x"}},
        ):
            answer = (await api.post("/disconnect", json=body)).json()
            assert answer["error"]["code"] == 107, (body, answer)
        for method, body in (
            ("subscribe", {"user": "u1", "channel": "room", "expire_at": 2**40}),
            ("refresh", {"user": "u1", "expire_at": 2**40}),
        ):
            answer = (await api.post(f"/{method}", json=body)).json()
            assert answer["error"]["code"] == 107, (method, answer)
        # still connected, then a 1 KB reason arrives cut to fit
        ok = (
            await api.post(
                "/disconnect", json={"user": "u1", "disconnect": {"code": 4000, "reason": KILOBYTE_REASON}}
            )
        ).json()
        assert "error" not in ok, ok
        try:
            async with asyncio.timeout(scaled(15)):
                while True:
                    json.loads(await ws.recv())
        except ConnectionClosed as exc:
            assert exc.rcvd is not None, "no close frame"
            assert exc.rcvd.code == 4000 and set(exc.rcvd.reason) == {"é"}
            assert len(exc.rcvd.reason.encode()) <= 123


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_an_out_of_range_refresh_result_is_retried_not_a_disconnect(
    protocol: str, served: Served, start_gateway: GatewayStarter
) -> None:
    """A server-side refresh whose result cannot be read is a failing backend (retry in 60 s),
    as a failed call is: the connection stays (it used to be closed with 3004)."""
    backend = served.backend
    backend.connect_ttl = 1  # expires almost at once: the server asks the refresh proxy
    backend.mode["refresh"], backend.raw["refresh"] = "raw", {"result": {"expire_at": 2**40}}
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k), refresh=True))
    async with websockets.connect(gw.ws_url, additional_headers=COOKIE, open_timeout=scaled(30)) as ws:
        first = await _ask(ws, {"id": 1, "connect": {}})
        assert isinstance(first, dict) and "connect" in first, first
        await wait_until(lambda: backend.of("refresh"), 30, "the refresh proxy asked")
        reply = await _ask(ws, {"id": 2, "rpc": {"method": "m", "data": {}}})
        assert isinstance(reply, dict) and "rpc" in reply, reply  # still connected
    assert "Traceback" not in gw.log_text()
