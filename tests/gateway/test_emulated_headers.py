"""The connect command's headers map (headers emulation, gateway/protocol/headers.py): decoded
the same from JSON and Protobuf, names lower-cased; outside the bounds (count, sizes, not an HTTP
token, CR/LF in a value) the frame is a bad request (3501), and a real gateway closes that
connection with 3501 while serving the next one. The forwarding itself is proved with the
official SDK and real HTTP and gRPC backends in tests/gateway/proxy/test_proxy_js.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.protocol import codes
from gateway.protocol.codec import JSON, ProtocolError
from gateway.protocol.headers import MAX_HEADERS, MAX_TOTAL_BYTES, MAX_VALUE_BYTES
from gateway.protocol.messages import ConnectRequest
from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.codec import PROTOBUF
from gateway.protocol.protobuf.framing import delimited
from tests.support import GatewayProcess, scaled


def _json(headers: object) -> bytes:
    return json.dumps({"id": 1, "connect": {"headers": headers}}).encode()


def _protobuf(headers: dict[str, str]) -> bytes:
    cmd = pb.Command(id=1)
    cmd.connect.SetInParent()
    cmd.connect.headers.update(headers)
    return delimited(cmd)


def _decode(wire: str, headers: dict[str, str]) -> ConnectRequest:
    frame = _json(headers) if wire == "json" else _protobuf(headers)
    req = (JSON if wire == "json" else PROTOBUF).decode_frame(frame)[0].request
    assert isinstance(req, ConnectRequest)
    return req


@pytest.mark.parametrize("wire", ["json", "protobuf"])
def test_headers_are_decoded_with_lower_case_names(wire: str) -> None:
    req = _decode(wire, {"Authorization": "Bearer x", "X-Tenant": "t 1\tz"})
    assert req.headers == {"authorization": "Bearer x", "x-tenant": "t 1\tz"}
    assert _decode(wire, {}).headers == {}


TOO_MUCH = {
    "too many": {f"x-h{i}": "v" for i in range(MAX_HEADERS + 1)},
    "value too long": {"x-long": "v" * (MAX_VALUE_BYTES + 1)},
    "too many bytes": {f"x-h{i}": "v" * (MAX_TOTAL_BYTES // 3) for i in range(4)},
    "name too long": {"x" * 257: "v"},
    "name not a token": {"bad name": "v"},
    "CRLF in a value": {"x-inject": "v\r\nX-Admin: 1"},
    "NUL in a value": {"x-nul": "v\x00"},
}


@pytest.mark.parametrize("wire", ["json", "protobuf"])
@pytest.mark.parametrize("case", TOO_MUCH)
def test_headers_outside_the_bounds_are_a_bad_request(wire: str, case: str) -> None:
    with pytest.raises(ProtocolError) as info:
        _decode(wire, TOO_MUCH[case])
    assert info.value.disconnect == codes.DISCONNECT_BAD_REQUEST


@pytest.mark.parametrize("headers", [[], "x", {"x": 1}, {"x": None}])
def test_json_headers_of_the_wrong_type_are_a_bad_request(headers: object) -> None:
    with pytest.raises(ProtocolError):
        JSON.decode_frame(_json(headers))


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"client": {"insecure": True}}
    gw = GatewayProcess(config, Path(tmp_path_factory.mktemp("emulated-headers"))).start()
    try:
        yield gw
    finally:
        gw.terminate()


async def test_a_gateway_closes_an_oversized_headers_map_with_3501_and_keeps_serving(
    gw: GatewayProcess,
) -> None:
    async with connect(gw.ws_url, open_timeout=scaled(10)) as ws:
        await ws.send(_json(TOO_MUCH["too many"]).decode())
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 3501
    async with connect(gw.ws_url, open_timeout=scaled(10)) as ws:
        await ws.send(_json({"X-Ok": "1"}).decode())
        assert "connect" in json.loads(await ws.recv())
