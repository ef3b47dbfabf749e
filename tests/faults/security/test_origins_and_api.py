"""Cross-site origins on every connection endpoint and the server API's key check, over real
sockets of one gateway process (``client.allowed_origins: ["http://board.example"]``).

Earlier proofs: tests/conformance/test_wire.py::test_allowed_origins (WebSocket),
tests/transports/test_streaming.py::test_origin_check (SSE / HTTP-streaming / emulation),
tests/gateway/test_api.py::test_missing_or_wrong_key_is_401_with_empty_body (in-process). This
module puts every endpoint and every trick side by side on the wire (reliability-notes O1–O4, A1).
"""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.faults.security.conftest import ALLOWED_ORIGIN, Secrets, api
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(60)

FOREIGN_ORIGINS = [
    "http://evil.example",
    "null",
    "http://board.example.evil.example",  # suffix trick
    "http://evil-board.example",
    "https://board.example",  # other scheme
    "http://board.example:8080",  # other port
    "http://board.example@evil.example",
]
STREAM_PATHS = ["/connection/sse", "/connection/http_stream", "/connection/uni_sse", "/emulation"]


@pytest.mark.parametrize("origin", FOREIGN_ORIGINS)
async def test_websocket_handshake_from_a_foreign_origin_is_403(
    security_gateway: GatewayProcess, origin: str
):
    with pytest.raises(InvalidStatus) as info:
        async with connect(security_gateway.ws_url, origin=origin, open_timeout=scaled(30)):  # type: ignore[arg-type]
            pass
    assert info.value.response.status_code == 403


@pytest.mark.parametrize("origin", [ALLOWED_ORIGIN, "HTTP://BOARD.EXAMPLE", None])
async def test_websocket_handshake_from_the_board_or_a_non_browser_is_accepted(
    security_gateway: GatewayProcess, secrets: Secrets, origin: str | None
):
    async with connect(security_gateway.ws_url, origin=origin, open_timeout=scaled(30)) as ws:  # type: ignore[arg-type]
        await ws.send(json.dumps({"id": 1, "connect": {"token": secrets.token(sub="o", exp_in=60)}}))
        assert "connect" in json.loads(await ws.recv())


@pytest.mark.parametrize("path", STREAM_PATHS)
async def test_streams_and_emulation_from_a_foreign_origin_are_403(
    security_gateway: GatewayProcess, secrets: Secrets, path: str
):
    token = secrets.token(sub="o", exp_in=60)
    body = (
        {"session": "s", "node": "n", "data": "{}"}
        if path == "/emulation"
        else ({"token": token} if "uni_" in path else {"id": 1, "connect": {"token": token}})
    )
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        for origin in FOREIGN_ORIGINS:
            r = await http.post(security_gateway.url + path, json=body, headers={"Origin": origin})
            assert r.status_code == 403, (path, origin, r.status_code)
            assert "access-control-allow-origin" not in r.headers
        if path == "/connection/sse":  # EventSource uses GET with cf_connect
            r = await http.get(
                security_gateway.url + path,
                params={"cf_connect": json.dumps(body)},
                headers={"Origin": "http://evil.example"},
            )
            assert r.status_code == 403


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({}, ""),  # no key
        ({"X-API-Key": "wrong"}, ""),
        ({"X-API-Key": ""}, ""),
        ({"Authorization": "Bearer {key}"}, ""),  # the key under the wrong scheme
        ({"X-Api-Token": "{key}"}, ""),  # the key in a header the API does not read
        ({"Authorization": "apikey {key}x"}, ""),
        ({"X-API-Key": "{key_prefix}"}, ""),  # a prefix of the key
        ({}, "?apikey={key}"),  # misspelled query parameter
    ],
)
async def test_server_api_without_the_right_key_is_401_with_an_empty_body(
    security_gateway: GatewayProcess, headers: dict[str, str], query: str
):
    key = security_gateway.api_key
    fill = {"key": key, "key_prefix": key[:8]}
    sent = {name: value.format(**fill) for name, value in headers.items()}
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        for method in ("publish", "info", "disconnect"):
            r = await http.post(
                f"{security_gateway.api_url}/{method}{query.format(**fill)}",
                json={"channel": "ctl:x", "data": {}, "user": "u"},
                headers=sent,
            )
            assert (r.status_code, r.content) == (401, b""), (method, r.status_code, r.text)
    assert "result" in await api(security_gateway, "info", {})  # the right key still works
