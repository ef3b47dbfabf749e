"""Half-open and silent peers against a real gateway process.

A TCP peer that vanished without FIN looks, from the server, exactly like a socket that stops
reading and writing: these tests keep such sockets open and silent. The server's ping/pong closes
a connected one with 3012 within ``ping_interval + pong_timeout``; an upgraded socket that never
sends ``connect`` is closed with 3502 at ``stale_close_delay``; a bidirectional SSE stream whose
reader stopped (and never pongs through /emulation) is dropped the same way. In each case the
node's counters and the process's open fds return to their baseline.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from tests.faults.security.conftest import (
    ALLOWED_ORIGIN,
    Secrets,
    api,
    metrics,
    proc_stats,
    raw_ws_open,
    read_until_close,
    security_config,
    uid,
    wait_until,
    ws_frame,
)
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(60)

PING_INTERVAL = 1.0
PONG_TIMEOUT = 0.5
STALE = 1.0
SLACK = scaled(1.5)  # the time factor applies to every upper bound
WS_CLOSE_TIMEOUT = 5.0
"""gateway/transports/websocket.py CLOSE_TIMEOUT_SECONDS: wait for the peer's close frame."""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[GatewayProcess]:
    config = security_config(
        client={
            "ping_interval": f"{PING_INTERVAL}s",
            "pong_timeout": f"{PONG_TIMEOUT}s",
            "stale_close_delay": f"{STALE}s",
        }
    )
    gw = GatewayProcess(config, tmp_path_factory.mktemp("half-open-gw")).start()
    yield gw
    gw.terminate()
    secrets.assert_not_in(gw.log_text(), "half-open gateway log")


async def _num_clients(gw: GatewayProcess) -> float:
    return (await metrics(gw))["centrifugo_node_num_clients"]


async def test_silent_connected_client_is_closed_3012_within_ping_interval_plus_pong_timeout(
    gw: GatewayProcess, secrets: Secrets
):
    loop = asyncio.get_running_loop()
    baseline_fds, _ = proc_stats(gw)
    channel = f"ctl:{uid()}"
    reader, writer = await raw_ws_open(gw.port)
    try:
        connect = {"id": 1, "connect": {"token": secrets.token(sub=f"u{uid()}", exp_in=120)}}
        subscribe = {"id": 2, "subscribe": {"channel": channel}}
        writer.write(ws_frame((json.dumps(connect) + "\n" + json.dumps(subscribe)).encode()))
        await wait_until(lambda: _num_clients(gw), 10, "client registered")
        silent_since = loop.time()  # from now on: no read, no write, no FIN
        publisher = asyncio.create_task(_publish_forever(gw, channel))
        try:
            await wait_until(
                lambda: _gone(gw), PING_INTERVAL + PONG_TIMEOUT + SLACK, "half-open client removed"
            )
        finally:
            publisher.cancel()
        assert loop.time() - silent_since <= PING_INTERVAL + PONG_TIMEOUT + SLACK
        # What the server wrote is still in our receive buffer: it ends with close 3012.
        assert await read_until_close(reader) == 3012
        # Without our close reply the server drops the TCP itself after its close timeout.
        async with asyncio.timeout(WS_CLOSE_TIMEOUT + SLACK):
            while await reader.read(65536):
                pass
    finally:
        writer.close()
    await wait_until(lambda: proc_stats(gw)[0] <= baseline_fds, 10, "gateway fds back to baseline")


async def _publish_forever(gw: GatewayProcess, channel: str) -> None:
    n = 0
    while True:
        await api(gw, "publish", {"channel": channel, "data": {"n": n}})
        n += 1
        await asyncio.sleep(0.05)  # a steady trickle of traffic towards the silent peer


async def _gone(gw: GatewayProcess) -> bool:
    m = await metrics(gw)
    return m["centrifugo_node_num_clients"] == 0 and m["centrifugo_node_num_subscriptions"] == 0


async def test_upgraded_socket_that_never_connects_is_closed_3502_at_stale_close_delay(gw: GatewayProcess):
    loop = asyncio.get_running_loop()
    baseline_fds, _ = proc_stats(gw)
    opened = loop.time()
    reader, writer = await raw_ws_open(gw.port)
    try:
        assert await read_until_close(reader, within=STALE + SLACK + 1) == 3502
        assert loop.time() - opened <= STALE + SLACK
        async with asyncio.timeout(WS_CLOSE_TIMEOUT + SLACK):
            while await reader.read(65536):
                pass
    finally:
        writer.close()
    await wait_until(lambda: proc_stats(gw)[0] <= baseline_fds, 10, "gateway fds back to baseline")


async def test_sse_stream_that_stops_reading_and_never_pongs_is_dropped(gw: GatewayProcess, secrets: Secrets):
    loop = asyncio.get_running_loop()
    baseline_fds, _ = proc_stats(gw)
    body = json.dumps({"id": 1, "connect": {"token": secrets.token(sub=f"u{uid()}", exp_in=120)}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(
            b"POST /connection/sse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Origin: {ALLOWED_ORIGIN}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        async with asyncio.timeout(scaled(10)):
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:60]
        await wait_until(lambda: _num_clients(gw), 10, "SSE client registered")
        silent_since = loop.time()  # never read again, never POST a pong
        await wait_until(lambda: _gone(gw), PING_INTERVAL + PONG_TIMEOUT + SLACK, "silent SSE client removed")
        assert loop.time() - silent_since <= PING_INTERVAL + PONG_TIMEOUT + SLACK
        rest = b""
        async with asyncio.timeout(scaled(10)):  # the response ends with the 3012 disconnect push
            while b'"code":3012' not in rest:
                chunk = await reader.read(65536)
                assert chunk, rest[-200:]
                rest += chunk
    finally:
        writer.close()
    await wait_until(lambda: proc_stats(gw)[0] <= baseline_fds, 15, "gateway fds back to baseline")
