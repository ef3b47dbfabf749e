"""Listeners Centrifugo configs use (issue 19): ``http_server.tls`` (the official SDKs connect over
wss:// to a certificate from a throwaway CA), ``http_server.internal_port`` (server API, metrics
and health on a second listener only) and ``uni_websocket``. Real gateway processes; before the
issue these options were warned about and ignored (uni_websocket answered 404)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from centrifuge import Client, PublicationContext, SubscriptionEventHandler
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conformance.conftest import JS_DIR, node_bin  # noqa: F401  # the node_bin fixture
from tests.support import GatewayProcess, free_port, mint_token, scaled
from tests.support.certs import TestCA

SECRET = "listener-secret-0123456789abcdefghijkl"
CONFIG: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}},
    "channel": {"without_namespace": {"allow_subscribe_for_client": True}},
}


@pytest.fixture
def ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestCA]:
    """A CA whose certificates this process trusts (urllib's readiness poll, httpx)."""
    authority = TestCA(tmp_path / "ca")
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.cert))
    yield authority


def _tls_gateway(ca: TestCA, tmp_path: Path, **extra: Any) -> GatewayProcess:
    leaf = ca.server("gateway")
    tls = {"enabled": True, "cert_pem": str(leaf.cert), "key_pem": leaf.key.read_text(), **extra}
    return GatewayProcess({**CONFIG, "http_server": {"tls": tls}}, tmp_path / "gw").start()


class _Received(SubscriptionEventHandler):
    def __init__(self) -> None:
        self.publications: asyncio.Queue[Any] = asyncio.Queue()

    async def on_publication(self, ctx: PublicationContext) -> None:
        await self.publications.put(ctx.pub.data)


async def test_centrifuge_python_over_wss_with_a_private_ca(ca: TestCA, tmp_path: Path) -> None:
    gw = _tls_gateway(ca, tmp_path)
    try:
        assert gw.ws_url.startswith("wss://")
        context = ssl.create_default_context(cafile=str(ca.cert))
        client = Client(gw.ws_url, token=mint_token(SECRET, "42"), ssl_context=context)
        received = _Received()
        sub = client.new_subscription("secure", events=received)
        await client.connect()
        await sub.subscribe()
        await asyncio.wait_for(client.ready(), scaled(10))
        await asyncio.wait_for(sub.ready(), scaled(10))
        async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:  # trusts SSL_CERT_FILE
            reply = await http.post(f"{gw.api_url}/publish", json={"channel": "secure", "data": {"n": 1}})
            assert reply.json() == {"result": {}}
        assert await asyncio.wait_for(received.publications.get(), scaled(10)) == {"n": 1}
        await client.disconnect()
    finally:
        gw.terminate()


@pytest.mark.node
def test_centrifuge_js_over_wss_with_a_private_ca(ca: TestCA, tmp_path: Path, node_bin: str) -> None:  # noqa: F811
    gw = _tls_gateway(ca, tmp_path)
    try:
        script = "\n".join(
            [
                "import { Centrifuge } from 'centrifuge'; import WebSocket from 'ws';",
                "const a = JSON.parse(process.argv[1]);",
                "const c = new Centrifuge(a.url, { token: a.token, websocket: WebSocket });",
                "c.on('connected', (ctx) => {",
                "  console.log(JSON.stringify({ event: 'connected', transport: ctx.transport }));",
                "  c.disconnect(); process.exit(0);",
                "});",
                "c.on('error', (e) => console.log(JSON.stringify({ event: 'error', e: String(e.error) })));",
                "setTimeout(() => process.exit(1), 15000);",
                "c.connect();",
            ]
        )
        payload = json.dumps({"url": gw.ws_url, "token": mint_token(SECRET, "42")})
        env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(ca.cert)}
        proc = subprocess.run(
            [node_bin, "--input-type=module", "-e", script, payload],
            cwd=JS_DIR, env=env, capture_output=True, text=True, timeout=scaled(30), check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert '"event":"connected","transport":"websocket"' in proc.stdout
    finally:
        gw.terminate()


def test_tls_listener_without_a_certificate_refuses_to_start(tmp_path: Path) -> None:
    config = {"http_server": {"address": "127.0.0.1", "port": free_port(), "tls": {"enabled": True}}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    proc = subprocess.run(
        [*_taskcast(), "gateway", "--config", str(path)],
        capture_output=True, text=True, timeout=scaled(30), check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "http_server.tls.cert_pem: must be set when http_server.tls.enabled is true" in proc.stderr


def test_tls_listener_requires_a_client_certificate_with_client_ca_pem(ca: TestCA, tmp_path: Path) -> None:
    client = ca.client("caller")
    leaf = ca.server("mtls")
    tls = {"enabled": True, "cert_pem": str(leaf.cert), "key_pem": str(leaf.key), "client_ca_pem": ca.pem}
    port = free_port()
    config = {**CONFIG, "http_server": {"address": "127.0.0.1", "port": port, "tls": tls}}
    path = tmp_path / "mtls.json"
    path.write_text(json.dumps(config))
    proc = subprocess.Popen(
        [*_taskcast(), "gateway", "--config", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    mutual = ssl.create_default_context(cafile=str(ca.cert))
    mutual.load_cert_chain(str(client.cert), str(client.key))
    url = f"https://127.0.0.1:{port}/"
    try:
        with httpx.Client(verify=mutual) as with_cert:
            _wait_for(lambda: _status(with_cert, url) == 200)
        with httpx.Client(verify=ssl.create_default_context(cafile=str(ca.cert))) as without:
            assert _status(without, url) is None  # refused without a client certificate
    finally:
        proc.terminate()
        proc.wait(timeout=scaled(30))


async def test_internal_port_serves_api_metrics_and_health_only(tmp_path: Path) -> None:
    internal = free_port()
    config = {
        **CONFIG,
        "http_server": {"internal_port": str(internal)},
        "prometheus": {"enabled": True},
    }
    gw = GatewayProcess(config, tmp_path / "gw").start()  # ready = /health 200 on the internal port
    try:
        public = f"http://127.0.0.1:{gw.port}"
        async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
            assert (await http.post(f"{public}/api/info", json={})).status_code == 404
            assert (await http.get(f"{public}/metrics")).status_code == 404
            assert (await http.get(f"{public}/health")).status_code == 404
            assert "result" in (await http.post(f"{gw.api_url}/info", json={})).json()
            assert (await http.get(f"{gw.internal_url}/metrics")).status_code == 200
            assert (await http.get(f"{gw.internal_url}/connection/sse")).status_code == 404
        async with connect(gw.ws_url) as ws:  # clients stay on the public listener
            await ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "42")}}))
            assert "connect" in json.loads(await asyncio.wait_for(ws.recv(), scaled(10)))
    finally:
        gw.terminate()


@pytest.mark.parametrize("join", [False, True])
async def test_uni_websocket_connect_then_pushes(tmp_path: Path, join: bool) -> None:
    config = {**CONFIG, "uni_websocket": {"enabled": True, "join_push_messages": join}}
    gw = GatewayProcess(config, tmp_path / "gw").start()
    url = f"ws://127.0.0.1:{gw.port}/connection/uni_websocket"
    token = mint_token(SECRET, "42", channels=["feed"])
    try:
        async with connect(url) as ws:
            await ws.send(json.dumps({"token": token, "name": "uni-test"}))
            frames = [
                json.loads(line) for line in (await asyncio.wait_for(ws.recv(), scaled(10))).split("\n")
            ]
            pushes = frames
            while not any("pub" in p for p in pushes):
                if not any("connect" in p for p in pushes):
                    raise AssertionError(f"no connect push first: {pushes}")
                async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
                    await http.post(f"{gw.api_url}/publish", json={"channel": "feed", "data": {"x": 1}})
                text = await asyncio.wait_for(ws.recv(), scaled(10))
                pushes = [json.loads(line) for line in text.split("\n")]
            assert "connect" in frames[0] and frames[0]["connect"]["client"]
            assert {"channel": "feed", "pub": pushes[-1]["pub"]} == pushes[-1]
            assert pushes[-1]["pub"]["data"] == {"x": 1}
            await ws.send("ignored after the connect request")
    finally:
        gw.terminate()


async def test_uni_websocket_bad_connect_request_closes_3501_and_bad_token_3500(tmp_path: Path) -> None:
    """A disconnect push, then a close frame with the same code (Centrifugo v6.5.1's order)."""
    gw = GatewayProcess({**CONFIG, "uni_websocket": {"enabled": True}}, tmp_path / "gw").start()
    url = f"ws://127.0.0.1:{gw.port}/connection/uni_websocket"
    try:
        for message, code in (("[1, 2]", 3501), (json.dumps({"token": "not-a-jwt"}), 3500)):
            async with connect(url) as ws:
                await ws.send(message)
                push = json.loads(await asyncio.wait_for(ws.recv(), scaled(10)))
                assert push["disconnect"]["code"] == code and push["disconnect"]["reason"]
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), scaled(10))
                assert closed.value.rcvd is not None and closed.value.rcvd.code == code
    finally:
        gw.terminate()


async def test_uni_websocket_cf_connect_url_parameter(tmp_path: Path) -> None:
    """The ConnectRequest in ``cf_connect`` (v6.3): connected without sending a message; a
    parameter that is not a JSON object is refused with 400 before the upgrade."""
    gw = GatewayProcess({**CONFIG, "uni_websocket": {"enabled": True}}, tmp_path / "gw").start()
    url = f"ws://127.0.0.1:{gw.port}/connection/uni_websocket"
    token = mint_token(SECRET, "42")
    try:
        query = urllib.parse.urlencode({"cf_connect": json.dumps({"token": token})})
        async with connect(f"{url}?{query}") as ws:
            push = json.loads(await asyncio.wait_for(ws.recv(), scaled(10)))
            assert push["connect"]["client"]
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"{url}?cf_connect=%5B1%5D"):
                pass
        assert refused.value.response.status_code == 400
    finally:
        gw.terminate()


async def test_uni_websocket_disable_disconnect_push_and_closing_handshake(tmp_path: Path) -> None:
    """``disable_disconnect_push``: only the close frame; with ``disable_closing_handshake`` too,
    the TCP connection ends without a close frame (Centrifugo before v6.5.1)."""
    for options, push, frame in (
        ({"disable_disconnect_push": True}, False, True),
        ({"disable_closing_handshake": True}, True, False),
    ):
        config = {**CONFIG, "uni_websocket": {"enabled": True, **options}}
        gw = GatewayProcess(config, tmp_path / f"gw-{len(options)}-{push}").start()
        try:
            async with connect(f"ws://127.0.0.1:{gw.port}/connection/uni_websocket") as ws:
                await ws.send("[1, 2]")
                if push:
                    assert (
                        json.loads(await asyncio.wait_for(ws.recv(), scaled(10)))["disconnect"]["code"]
                        == 3501
                    )
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), scaled(10))
                if frame:
                    assert closed.value.rcvd is not None and closed.value.rcvd.code == 3501
                else:
                    assert closed.value.rcvd is None
        finally:
            gw.terminate()


def _taskcast() -> list[str]:
    import sys

    return [sys.executable, "-m", "taskcast"]


def _status(http: httpx.Client, url: str) -> int | None:
    try:
        return http.get(url, timeout=scaled(2)).status_code
    except (httpx.HTTPError, ssl.SSLError, OSError):
        return None


def _wait_for(cond: Any) -> None:
    from tests.support import wait_until_blocking

    wait_until_blocking(cond, 20, "gateway answering over TLS")
