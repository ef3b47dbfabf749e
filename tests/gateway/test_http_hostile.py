"""Hostile HTTP input against a real gateway process (httpwire/protocol.py as shipped), each
answered cheaply and before the app: an oversized head -> 431, a body past the listener's bound
-> 413 before it is read (declared) or as soon as it passes the bound (chunked), a slow client ->
408 or closed at ``http_server.request_timeout``, bytes that are not HTTP -> 400. After each, the
node still answers and its log has no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.http.server import MAX_BODY_BYTES
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(90)

KEY = "hostile-http-key"
REQUEST_TIMEOUT = 2.0
SLACK = 2.0
"""Bound on a deadline's close: REQUEST_TIMEOUT + SLACK, scaled (event-loop latency on 2 shared cores)."""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "http_api": {"key": KEY},
        "health": {"enabled": True},
        "http_server": {"request_timeout": f"{REQUEST_TIMEOUT}s"},
    }
    gw = GatewayProcess(config, tmp_path_factory.mktemp("http-hostile")).start()
    yield gw
    gw.terminate()


@pytest.fixture(autouse=True)
def still_healthy(gateway: GatewayProcess) -> Iterator[None]:
    yield
    response = httpx.post(gateway.api_url + "/info", headers={"X-API-Key": KEY}, json={}, timeout=scaled(10))
    assert response.status_code == 200
    assert "Traceback" not in gateway.log_text()


async def _answer(port: int, data: bytes, *, then: bytes = b"", within: float = 10.0) -> tuple[bytes, float]:
    """Send ``data`` (and ``then``, ignoring a reset), then read until the server closes; returns
    (what it sent, seconds from the first byte to the close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    received = bytearray()
    try:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            writer.write(data)
            await writer.drain()
            if then:
                writer.write(then)
                await writer.drain()
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(scaled(within)):
                while chunk := await reader.read(65536):
                    received += chunk
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return bytes(received), time.monotonic() - started


def _publish_head(extra: bytes) -> bytes:
    return (
        b"POST /api/publish HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + KEY.encode() + b"\r\n"
        b"Content-Type: application/json\r\n" + extra + b"\r\n"
    )  # fmt: skip


async def test_an_oversized_head_is_431(gateway: GatewayProcess):
    answer, _ = await _answer(
        gateway.port, b"GET /health HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"a" * (2 << 20) + b"\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]


async def test_a_declared_body_over_the_bound_is_413_before_a_byte_of_it_is_read(gateway: GatewayProcess):
    head = _publish_head(b"Content-Length: %d\r\n" % (MAX_BODY_BYTES + 1))
    answer, _ = await _answer(gateway.port, head)  # and not one body byte
    # Answered, not closed by the deadline (which answers nothing once a head is complete).
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
    assert answer.endswith(b"request entity too large")


async def test_a_chunked_body_is_413_as_soon_as_it_passes_the_bound(gateway: GatewayProcess):
    """The body never ends: only the listener's count can answer before the deadline (the API
    endpoint would wait for the end of the body)."""
    chunk = b"x" * 65536
    body = b"%x\r\n%s\r\n" % (len(chunk), chunk) * (MAX_BODY_BYTES // len(chunk) + 2)
    answer, _ = await _answer(gateway.port, _publish_head(b"Transfer-Encoding: chunked\r\n") + body)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]


@pytest.mark.parametrize(
    ("sent", "answer"),
    [
        (b"", b"HTTP/1.1 408 "),  # a connection that never sends a byte
        (b"GET /health HTTP/1.1\r\nHost: gw\r\n", b"HTTP/1.1 408 "),  # a head that never ends
        (_publish_head(b"Content-Length: 100\r\n") + b'{"channel":', b""),  # a body that never ends
    ],
    ids=["silent", "head", "body"],
)
async def test_a_slow_client_is_closed_at_the_request_deadline(
    gateway: GatewayProcess, sent: bytes, answer: bytes
):
    received, elapsed = await _answer(gateway.port, sent, within=REQUEST_TIMEOUT + SLACK + 5)
    assert received.startswith(answer) and (answer or received == b""), received[:80]
    assert REQUEST_TIMEOUT - 0.5 <= elapsed <= REQUEST_TIMEOUT + scaled(SLACK), elapsed


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64) + b"\r\n\r\n",  # a TLS hello
        b"HELLO\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /health HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET http://[bad HTTP/1.1\r\nHost: gw\r\n\r\n",
    ],
    ids=["tls", "word", "version", "two-lengths", "header", "url"],
)
async def test_garbage_is_400(gateway: GatewayProcess, garbage: bytes):
    answer, _ = await _answer(gateway.port, garbage)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:80]
