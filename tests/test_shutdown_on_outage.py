"""SIGTERM stops a service whose dependencies are gone, within its shutdown timeout (never a
SIGKILL): a gateway whose Redis was killed or is stalled (SIGSTOP: connections open, nothing
answers), a relay whose database hangs and whose gateway is unreachable, a Status API whose
database and wake-up Redis hang. Their background loops and requests are inside failing calls
when the signal arrives (docs/architecture.md, Background loops)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from websockets.asyncio.client import connect

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.mysql_db import schema_database
from tests.helpers.raw_client import Raw
from tests.helpers.redis_engine import RedisServer, unique_prefix
from tests.status_api.harness import TEST_CONFIG
from tests.support import (
    GatewayProcess,
    RelayProcess,
    StatusApiProcess,
    free_port,
    merge,
    mint_token,
    scaled,
    wait_until,
)

SECRET = "shutdown-secret-0123456789abcdefghijklmn"
SHUTDOWN_SECONDS = 1.0
MARGIN_SECONDS = 5.0  # process exit and interpreter teardown after the timeout


@pytest.mark.redis
async def test_a_gateway_whose_redis_is_gone_exits_on_sigterm(tmp_path: Path) -> None:
    server = await RedisServer().start()
    config = {
        "client": {"token": {"hmac_secret_key": SECRET}},
        "engine": {
            "type": "redis",
            "redis": {"address": server.url, "prefix": unique_prefix(), "io_timeout": "1s"},
        },
        "channel": {
            "without_namespace": {
                "history_size": 10,
                "history_ttl": "60s",
                "presence": True,
                "allow_subscribe_for_client": True,
            }
        },
        "shutdown": {"timeout": f"{SHUTDOWN_SECONDS:g}s"},
    }
    gateway = GatewayProcess(config, tmp_path).start()
    try:
        async with connect(gateway.ws_url) as ws:
            raw = Raw(ws)
            pump = asyncio.create_task(raw.pump())
            assert "connect" in await raw.call("connect", {"token": mint_token(SECRET)})
            assert "subscribe" in await raw.call("subscribe", {"channel": "room"})
            server.kill()
            await wait_until(lambda: not gateway.health_ok(), within=10.0, what="health down")
            gateway.send_sigterm()
            code = await gateway.wait_exit(SHUTDOWN_SECONDS + MARGIN_SECONDS)
            # uvicorn re-raises the signal once its graceful shutdown is complete
            assert code in (0, -signal.SIGTERM), gateway.log_text()
            assert "Application shutdown complete" in gateway.log_text()
            pump.cancel()
    finally:
        gateway.kill()
        server.stop()


@pytest.mark.mysql
async def test_a_relay_whose_database_hangs_exits_on_sigterm(tmp_path: Path, mysql_url: str) -> None:
    url = sa.make_url(mysql_url)
    proxy = await FaultProxy(url.host or "127.0.0.1", url.port or 3306).start()
    proxy.blackhole()
    relay = RelayProcess(
        {
            "database_url": url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False),
            "gateway_api_url": f"http://127.0.0.1:{free_port()}/api",
            "gateway_api_key": "k",
            "relay_id": f"outage-{uuid.uuid4().hex[:6]}",
            "poll_interval_seconds": 0.05,
            "stats_interval_seconds": 0.05,
            "shutdown_timeout_seconds": SHUTDOWN_SECONDS,
            "metrics_port": free_port(),
        },
        tmp_path,
    ).start()
    try:
        await wait_until(lambda: proxy.accepted >= 2, what="the relay's loops waiting on the database")
        relay.send_sigterm()
        assert await relay.wait_exit(SHUTDOWN_SECONDS + MARGIN_SECONDS) == 0, relay.log_text()
        assert "stopped" in relay.log_text()
    finally:
        relay.kill()
        await proxy.close()


@pytest.mark.redis
async def test_a_gateway_whose_redis_is_stalled_exits_within_its_shutdown_timeout(tmp_path: Path) -> None:
    """Every Redis command of the shutdown (presence removals, leave messages, unsubscribes of a
    client's channels, closing the connections) waits its full ``io_timeout`` on a stalled
    Redis, here longer than the test's whole bound. The gateway abandons what is left when
    ``shutdown.timeout`` is up, says so in one line, and exits."""
    server = await RedisServer().start()
    channels = [f"room{n}" for n in range(4)]
    io_timeout = 2 * scaled(SHUTDOWN_SECONDS + MARGIN_SECONDS)
    redis = {"address": server.url, "prefix": unique_prefix(), "io_timeout": f"{io_timeout:g}s"}
    config = {
        "client": {"token": {"hmac_secret_key": SECRET}},
        "engine": {"type": "redis", "redis": redis},
        "channel": {
            "without_namespace": {
                "history_size": 10,
                "history_ttl": "60s",
                "presence": True,
                "join_leave": True,
                "force_push_join_leave": True,
                "allow_subscribe_for_client": True,
            }
        },
        "shutdown": {"timeout": f"{SHUTDOWN_SECONDS:g}s"},
    }
    gateway = GatewayProcess(config, tmp_path).start()
    assert server.proc is not None
    try:
        async with connect(gateway.ws_url) as ws:
            raw = Raw(ws)
            pump = asyncio.create_task(raw.pump())
            assert "connect" in await raw.call("connect", {"token": mint_token(SECRET)})
            for channel in channels:
                assert "subscribe" in await raw.call("subscribe", {"channel": channel})
            os.kill(server.proc.pid, signal.SIGSTOP)
            gateway.send_sigterm()
            started = asyncio.get_running_loop().time()
            code = await gateway.wait_exit(SHUTDOWN_SECONDS + MARGIN_SECONDS)
            took = asyncio.get_running_loop().time() - started
            log = gateway.log_text()
            assert code in (0, -signal.SIGTERM), log
            assert took < scaled(SHUTDOWN_SECONDS + MARGIN_SECONDS), log
            assert "Traceback" not in log, log
            assert "Application shutdown complete" in log, log
            assert "abandoned: background cleanup" in log, log
            pump.cancel()
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        gateway.kill()
        server.stop()


@pytest.fixture(scope="module")
def status_db_url(mysql_url: str) -> Iterator[str]:
    """One database with the Status API schema for the module's Status API and relay."""
    with schema_database(mysql_url, "shutdown") as url:
        yield url


@pytest.mark.mysql
@pytest.mark.redis
async def test_a_status_api_whose_database_and_redis_hang_exits_within_its_shutdown_timeout(
    tmp_path: Path, status_db_url: str
) -> None:
    """A readiness check waits on the blackholed database (a request in flight at SIGTERM), the
    reconciler's pass too, and the wake-up sender's Redis is stalled. The Status API gives the
    request ``http.shutdown_timeout_seconds``, abandons what is still waiting, says so in one
    line and exits."""
    server = await RedisServer().start()
    assert server.proc is not None
    if True:
        url = sa.make_url(status_db_url)
        proxy = await FaultProxy(url.host or "127.0.0.1", url.port or 3306).start()
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        config = merge(
            TEST_CONFIG,
            {
                "database": {"url": proxied},
                "http": {"shutdown_timeout_seconds": SHUTDOWN_SECONDS},
                "reconciler": {"enabled": True, "interval_seconds": 0.05},
                "wake": {"redis_url": server.url, "channel": f"wake-{uuid.uuid4().hex[:6]}"},
            },
        )
        api = StatusApiProcess(config, tmp_path)
        await asyncio.to_thread(api.start)  # the proxy runs on this event loop
        try:
            proxy.blackhole()
            os.kill(server.proc.pid, signal.SIGSTOP)
            ready = asyncio.create_task(asyncio.to_thread(api.health_ok))  # waits on the database
            await wait_until(lambda: proxy.accepted >= 1, what="the readiness check on the database")
            api.send_sigterm()
            started = asyncio.get_running_loop().time()
            code = await api.wait_exit(SHUTDOWN_SECONDS + MARGIN_SECONDS)
            took = asyncio.get_running_loop().time() - started
            log = api.log_text()
            assert code in (0, -signal.SIGTERM), log
            assert took < scaled(SHUTDOWN_SECONDS + MARGIN_SECONDS), log
            assert "Traceback" not in log, log
            assert "Application shutdown complete" in log, log
            await ready
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
            api.kill()
            await proxy.close()
            server.stop()


@pytest.mark.mysql
@pytest.mark.redis
async def test_a_relay_whose_wake_up_redis_is_stalled_exits_on_sigterm(
    tmp_path: Path, status_db_url: str
) -> None:
    """The wake-up listener connects to a stalled Redis (the TCP connect succeeds, the handshake
    is never answered) when SIGTERM arrives: the relay cancels it and exits within its shutdown
    timeout, not after the listener's own connect bound (5 s) ran out and was logged."""
    server = await RedisServer().start()
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    relay = RelayProcess(
        {
            "database_url": status_db_url,
            "gateway_api_url": f"http://127.0.0.1:{free_port()}/api",
            "gateway_api_key": "k",
            "relay_id": f"stalled-{uuid.uuid4().hex[:6]}",
            "wake_redis_url": server.url,
            "wake_channel": f"wake-{uuid.uuid4().hex[:6]}",
            "shutdown_timeout_seconds": SHUTDOWN_SECONDS,
            "metrics_port": free_port(),
        },
        tmp_path,
    )
    try:
        await asyncio.to_thread(relay.start)
        relay.send_sigterm()
        code = await relay.wait_exit(SHUTDOWN_SECONDS + MARGIN_SECONDS)
        log = relay.log_text()
        assert code == 0, log
        assert "Traceback" not in log, log
        assert log.rstrip().splitlines()[-1].endswith("stopped"), log
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        relay.kill()
        server.stop()
