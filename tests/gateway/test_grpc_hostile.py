"""Issue 28, defect 5 and risk 6, against real gateway processes: what unauthenticated input
can send to the gRPC side logs at most a few lines, never a traceback.

- Malformed gRPC server-API requests (bytes that are not the request message), with and
  without the key: INVALID_ARGUMENT (or UNAUTHENTICATED without the key), one rate-limited
  line for 200 of them. Each used to log a 757-byte ERROR traceback.
- ``grpc_api.enabled`` without ``grpc_api.key`` warns at start, as loudly as the HTTP API's
  insecure mode.
- A forwarded header with non-ASCII bytes towards a gRPC proxy: the connect still reaches the
  backend without that header, one rate-limited line, no traceback on every connect.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import websockets

from tests.gateway.proxy.backend import serve_backend
from tests.gateway.proxy.conftest import proxy_config
from tests.gateway.proxy.test_proxy_failures import _ask
from tests.support import free_port, scaled
from tests.support.procs import GatewayProcess

KEY = "grpc-hostile-key"
METHOD = "/centrifugal.centrifugo.api.CentrifugoApi/Publish"
GARBAGE = b"\xff\xff\xff\xff\x0f" * 8  # not a PublishRequest: an invalid wire type / varint


async def _garbage_calls(port: int, n: int, metadata: tuple[tuple[str, str], ...]) -> set[grpc.StatusCode]:
    codes: set[grpc.StatusCode] = set()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD)  # no serializers: the raw bytes go out as they are
        for _ in range(n):
            try:
                await call(GARBAGE, metadata=metadata, timeout=scaled(30))
            except grpc.aio.AioRpcError as exc:
                codes.add(exc.code())
    return codes


async def test_malformed_grpc_api_requests_log_one_line_no_traceback(tmp_path: Path) -> None:
    port = free_port()
    gw = GatewayProcess({"grpc_api": {"enabled": True, "port": port, "key": KEY}}, tmp_path / "gw").start()
    try:
        authorized = (("authorization", f"apikey {KEY}"),)
        assert await _garbage_calls(port, 100, authorized) == {grpc.StatusCode.INVALID_ARGUMENT}
        assert await _garbage_calls(port, 100, ()) <= {
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.INVALID_ARGUMENT,
        }
        log = gw.log_text()
    finally:
        gw.terminate()
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "malformed" in line.lower() or "deserializ" in line.lower()]
    assert 1 <= len(lines) <= 4, lines
    assert KEY not in log


async def test_grpc_api_without_a_key_warns_at_start(tmp_path: Path) -> None:
    gw = GatewayProcess({"grpc_api": {"enabled": True, "port": free_port()}}, tmp_path / "gw").start()
    try:
        log = gw.log_text()
    finally:
        gw.terminate()
    warnings = [line for line in log.splitlines() if "grpc_api" in line and "key" in line and "WARN" in line]
    assert warnings, log


async def test_non_ascii_forwarded_header_to_a_grpc_proxy(tmp_path: Path) -> None:
    async with serve_backend() as served:
        config = proxy_config(lambda k: served.endpoint("grpc", k), http_headers=["Cookie", "X-Name"])
        gw = GatewayProcess(config, tmp_path / "gw").start()
        try:
            for _ in range(20):
                async with websockets.connect(
                    gw.ws_url,
                    additional_headers={"Cookie": "session=alice", "X-Name": "Zoë"},
                    open_timeout=scaled(30),
                ) as ws:
                    reply = await _ask(ws, {"id": 1, "connect": {}})
                    assert isinstance(reply, dict) and reply["connect"]["client"], reply
            log = gw.log_text()
        finally:
            gw.terminate()
        call = served.backend.of("connect")[-1]
        assert call.headers["cookie"] == "session=alice" and "x-name" not in call.headers
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "x-name" in line.lower()]
    assert 1 <= len(lines) <= 2, lines
