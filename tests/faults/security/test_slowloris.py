"""Slowloris against a real gateway process: sockets that drip an HTTP upgrade request byte by
byte and never finish it, that open and say nothing, and requests whose body never completes (SSE
connect by POST, /emulation, the server API). The gateway must close each of them within
``http_server.request_timeout`` (+ slack) while a control client keeps receiving every
publication and new clients still connect."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.faults.security.conftest import (
    ALLOWED_ORIGIN,
    Control,
    GatewayFactory,
    Secrets,
    api,
    security_config,
    uid,
    ws_session,
)
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(60)

REQUEST_TIMEOUT = 2.0
SLACK = 2.0
"""Bound on the close: request_timeout + SLACK, scaled (event-loop latency on 2 shared cores)."""
DRIP_INTERVAL = 0.05
SLOW_CONNECTIONS = 60

UPGRADE_HEAD = (
    b"GET /connection/websocket HTTP/1.1\r\n"
    b"Host: 127.0.0.1\r\n"
    b"Upgrade: websocket\r\n"
    b"Connection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n"
    b"X-Padding: "
)
"""An upgrade request that never reaches its final empty line."""


def _post_head(path: str, length: int, origin: str = "") -> bytes:
    extra = f"Origin: {origin}\r\n" if origin else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {length}\r\n\r\n"
    ).encode()


async def _slow_peer(port: int, head: bytes, drip: bytes, within: float) -> tuple[float, bytes]:
    """Send ``head`` at once, then ``drip`` one byte per DRIP_INTERVAL (forever, if it runs out the
    peer just stalls); returns (seconds until the server closed the connection, bytes it sent)."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = loop.time()
    received = bytearray()

    async def dripper() -> None:
        writer.write(head)
        for byte in drip:
            await asyncio.sleep(DRIP_INTERVAL)  # the attack's pace, not synchronisation
            writer.write(bytes([byte]))
            await writer.drain()

    drip_task = asyncio.create_task(dripper())
    try:
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                received += chunk
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        pass  # closed by a reset, or never closed: the caller checks the elapsed time
    finally:
        drip_task.cancel()
        await asyncio.gather(drip_task, return_exceptions=True)
        writer.close()
    return loop.time() - started, bytes(received)


@pytest.fixture(scope="module")
def slow_gateway(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets):
    config = security_config(http_server={"request_timeout": f"{REQUEST_TIMEOUT}s"})
    gw = GatewayProcess(config, tmp_path_factory.mktemp("slowloris-gw")).start()
    yield gw
    gw.terminate()
    secrets.assert_not_in(gw.log_text(), "slowloris gateway log")


async def _attack_while_control_receives(
    gw: GatewayProcess, secrets: Secrets, attackers: list[tuple[bytes, bytes]]
) -> list[tuple[float, bytes]]:
    control = Control(gw, secrets)
    await control.start(minimum=100)
    try:
        within = REQUEST_TIMEOUT + scaled(SLACK) + 5.0  # fail the bound below rather than hang
        results = asyncio.gather(*(_slow_peer(gw.port, head, drip, within) for head, drip in attackers))
        # While the attack runs, a new client still connects, subscribes and is answered.
        async with ws_session(gw, secrets.token(sub="newcomer")) as newcomer:
            reply = await newcomer.call("subscribe", {"channel": control.channel})
            assert "subscribe" in reply, reply
        outcomes = await results
    finally:
        await control.finish()
    assert gw.health_ok()
    return outcomes


async def test_websocket_handshake_dripped_byte_by_byte_is_closed_within_the_request_timeout(
    slow_gateway: GatewayProcess, secrets: Secrets
):
    drip = b"a" * 100_000  # the header line never ends
    outcomes = await _attack_while_control_receives(
        slow_gateway, secrets, [(UPGRADE_HEAD, drip)] * SLOW_CONNECTIONS
    )
    for elapsed, answer in outcomes:
        assert REQUEST_TIMEOUT - 0.5 <= elapsed <= REQUEST_TIMEOUT + scaled(SLACK), elapsed
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:80]


async def test_connections_that_never_finish_or_never_start_a_request_are_closed(
    slow_gateway: GatewayProcess, secrets: Secrets
):
    attackers = (
        [
            (b"", b""),  # TCP open, not one byte
            (UPGRADE_HEAD[:40], b""),  # half a request line of headers, then silence
            (UPGRADE_HEAD + b"x\r\n", b""),  # every header but the final empty line
        ]
        * (SLOW_CONNECTIONS // 3)
    )
    outcomes = await _attack_while_control_receives(slow_gateway, secrets, attackers)
    for elapsed, answer in outcomes:
        assert REQUEST_TIMEOUT - 0.5 <= elapsed <= REQUEST_TIMEOUT + scaled(SLACK), elapsed
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:80]


@pytest.mark.parametrize(
    "path", ["/connection/sse", "/connection/http_stream", "/connection/uni_sse", "/emulation", "/api/info"]
)
async def test_request_body_that_never_completes_is_closed_within_the_request_timeout(
    slow_gateway: GatewayProcess, secrets: Secrets, path: str
):
    head = _post_head(path, 10_000, ALLOWED_ORIGIN)
    if path.startswith("/api"):
        head = head.replace(b"\r\n\r\n", f"\r\nX-API-Key: {slow_gateway.api_key}\r\n\r\n".encode())
    attackers = [(head, b'{"id":1,"connect":{"token":"' + b"a" * 9_000)] * (SLOW_CONNECTIONS // 3)
    outcomes = await _attack_while_control_receives(slow_gateway, secrets, attackers)
    for elapsed, answer in outcomes:
        assert REQUEST_TIMEOUT - 0.5 <= elapsed <= REQUEST_TIMEOUT + scaled(SLACK), elapsed
        assert b"200 OK" not in answer, answer[:80]
    assert "Traceback" not in slow_gateway.log_text()  # a body cut short is not an app error


async def test_a_finished_request_and_a_long_lived_stream_are_not_cut_by_the_request_timeout(
    gateway_factory: GatewayFactory, secrets: Secrets
):
    """The deadline covers receiving a request only: an open stream outlives it and delivers."""
    gw = gateway_factory(security_config(http_server={"request_timeout": "1s"}))
    channel = f"ctl:{uid()}"
    body = {"id": 1, "connect": {"token": secrets.token(sub="streamer", channels=[channel])}}
    async with (
        httpx.AsyncClient(timeout=scaled(30)) as http,
        http.stream("POST", gw.url + "/connection/http_stream", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.aiter_lines()
        assert '"connect"' in await anext(lines)
        await asyncio.sleep(3 * 1.0)  # a bounded window: outlive the 1 s request deadline
        await api(gw, "publish", {"channel": channel, "data": {"late": True}})
        async with asyncio.timeout(scaled(10)):
            while '"late"' not in (line := await anext(lines)):
                assert "disconnect" not in line, line
