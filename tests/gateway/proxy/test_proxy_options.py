"""Centrifugo v6 proxy options on the wire, against the real HTTP and gRPC backends
(tests/gateway/proxy/backend.py): the allow-listed headers of the connection request forwarded
for every transport (WebSocket, HTTP-streaming, SSE, and the unidirectional ones),
``http.static_headers`` / ``grpc.static_metadata`` under the forwarded headers,
``http.status_to_code_transforms``, and ``http.tls`` (a self-signed HTTPS backend)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
import websockets
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.gateway.proxy.backend import Backend, Served, http_app
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.support.procs import GatewayProcess, free_port, merge
from tests.support.waiting import scaled, wait_until
from tests.transports.conftest import open_stream

TRANSPORTS = {
    "http_stream": {"http_stream": {"enabled": True}},
    "sse": {"sse": {"enabled": True}},
    "uni_http_stream": {"uni_http_stream": {"enabled": True}},
    "uni_sse": {"uni_sse": {"enabled": True}},
    "uni_websocket": {"uni_websocket": {"enabled": True}},
}


async def _connect_over(transport: str, gw: GatewayProcess, headers: dict[str, str]) -> dict[str, Any]:
    """Open a connection over ``transport`` with these request headers; its connect result."""
    command = {"id": 1, "connect": {}}
    if transport == "websocket":
        async with websockets.connect(gw.ws_url, additional_headers=headers) as ws:
            await ws.send(orjson.dumps(command).decode())
            reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), scaled(60)))
            return dict(reply["connect"])
    if transport == "uni_websocket":
        url = gw.ws_url.replace("/connection/websocket", "/connection/uni_websocket")
        async with websockets.connect(url, additional_headers=headers) as ws:
            await ws.send(b"{}".decode())
            message: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), scaled(30)))
            return dict(message["connect"])
    sse = transport.endswith("sse")
    body = orjson.dumps({} if transport.startswith("uni_") else command)
    async with httpx.AsyncClient(timeout=httpx.Timeout(scaled(30), read=None)) as http:
        if sse:
            query = httpx.QueryParams({"cf_connect": body.decode()})
            opened = open_stream(
                http, "GET", f"{gw.url}/connection/{transport}?{query}", sse=True, headers=headers
            )
        else:
            opened = open_stream(
                http, "POST", f"{gw.url}/connection/{transport}", sse=False, content=body, headers=headers
            )
        async with opened as stream:
            message = await stream.next(30)  # scaled by the stream
    return dict(message["connect"])


@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_forwarded_headers_on_every_transport(
    transport: str, served: Served, start_gateway: GatewayStarter
) -> None:
    """The Cookie of the connection request (allow-listed) reaches the connect proxy whatever the
    transport: the uni_websocket transport forwarded nothing before (it had no request headers)."""
    gw = start_gateway(merge(proxy_config(lambda k: served.endpoint("http", k)), TRANSPORTS[transport]))
    connect = await _connect_over(transport, gw, {"Cookie": "session=ulla", "X-Other": "not forwarded"})
    assert connect["data"] == {"welcome": "ulla"}
    call = served.backend.of("connect")[0]
    assert call.headers["cookie"] == "session=ulla" and "x-other" not in call.headers
    assert call.body["transport"] == transport


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_static_headers_and_metadata_under_forwarded_ones(
    protocol: str, served: Served, start_gateway: GatewayStarter
) -> None:
    """Centrifugo: a forwarded header wins over a static one of the same name (the gateway sent
    the static value before). The gRPC calls are gzip-compressed (``grpc.compression``)."""
    statics = {"Cookie": "session=static", "X-Env": "prod"}
    extra = {"http": {"static_headers": statics}, "grpc": {"static_metadata": statics, "compression": True}}
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k), **extra))
    connect = await _connect_over("websocket", gw, {"Cookie": "session=vera"})
    assert connect["data"] == {"welcome": "vera"}
    headers = served.backend.of("connect")[0].headers
    assert headers["cookie"] == "session=vera" and headers["x-env"] == "prod"


async def test_status_to_code_transforms(served: Served, start_gateway: GatewayStarter) -> None:
    """A listed HTTP status becomes that error / disconnect; an unlisted one stays error 100."""
    transforms = [
        {"status_code": 401, "to_disconnect": {"code": 4501, "reason": "unauthorized"}},
        {"status_code": 403, "to_error": {"code": 4403, "message": "forbidden", "temporary": False}},
    ]
    config = proxy_config(
        lambda k: served.endpoint("http", k), http={"status_to_code_transforms": transforms}
    )
    gw = start_gateway(config)
    backend = served.backend
    backend.mode["connect"] = "status"
    got = {}
    for status in (401, 403, 500):
        backend.status_code = status
        got[status] = await _ws_outcome(gw)
    assert got == {
        401: ("disconnect", 4501, "unauthorized"),
        403: ("error", 4403, "forbidden"),
        500: ("error", 100, "internal server error"),
    }
    backend.mode["connect"] = "ok"
    backend.mode["subscribe"] = "status"
    backend.status_code = 403
    assert await _ws_outcome(gw, subscribe=f"px:{uuid.uuid4().hex[:8]}") == ("error", 4403, "forbidden")


async def _ws_outcome(gw: GatewayProcess, subscribe: str = "") -> tuple[str, int, str]:
    """Connect (and subscribe) over a raw WebSocket with a session cookie: the error or
    disconnect the command got."""
    async with websockets.connect(gw.ws_url, additional_headers={"Cookie": "session=wes"}) as ws:
        await ws.send(orjson.dumps({"id": 1, "connect": {}}).decode())
        try:
            reply = orjson.loads(await asyncio.wait_for(ws.recv(), scaled(30)))
            if subscribe and "error" not in reply:
                await ws.send(orjson.dumps({"id": 2, "subscribe": {"channel": subscribe}}).decode())
                reply = orjson.loads(await asyncio.wait_for(ws.recv(), scaled(30)))
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None
            return ("disconnect", closed.rcvd.code, closed.rcvd.reason)
    error = reply.get("error")
    assert error is not None, reply
    return ("error", error["code"], error["message"])


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "proxy-backend")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("proxy-backend")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "backend.pem", tmp / "backend.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@contextlib.asynccontextmanager
async def _https_backend(cert: Path, key: Path) -> AsyncIterator[tuple[Backend, str]]:
    backend = Backend()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            http_app(backend),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started, within=10, what="https backend started")
        yield backend, f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_http_tls_with_v6_option_names(tmp_path: Path, start_gateway: GatewayStarter) -> None:
    """``http.tls.server_ca_pem`` (inline PEM here) verifies a self-signed backend under the name
    ``server_name``; without the CA the same backend is refused (error 100, the SDKs retry)."""
    cert, key = _self_signed(tmp_path)
    async with _https_backend(cert, key) as (backend, url):
        tls = {"enabled": True, "server_ca_pem": cert.read_text(), "server_name": "proxy-backend"}
        gw = start_gateway(proxy_config(lambda k: f"{url}/{k}", http={"tls": tls}))
        connect = await _connect_over("websocket", gw, {"Cookie": "session=tess"})
        assert connect["data"] == {"welcome": "tess"} and backend.of("connect")
        untrusted = start_gateway(proxy_config(lambda k: f"{url}/{k}", http={"tls": {"enabled": True}}))
        assert await _ws_outcome(untrusted) == ("error", 100, "internal server error")
        assert len(backend.of("connect")) == 1
