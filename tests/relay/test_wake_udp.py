"""The wake-up without Redis (docs/relay.md "Wake-up without Redis"): the Status API sends one
datagram per commit burst to one relay at a time (``status_api.wake.UdpWakeSender``), a relay's
``wake_udp_listen`` socket wakes it (``relay.wake_udp``).

The sender tests use real UDP sockets on loopback and nothing else; the process test runs a real
Status API, relay and gateway with a relay poll interval no test outlives (``NEVER``), so only the
hint can publish in time.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.config import ConfigError, build_config
from relay.wake_udp import UdpWakeListener
from status_api.config import ConfigError as StatusConfigError
from status_api.config import build_config as status_config
from status_api.wake import UdpWakeSender
from tests.relay.harness import RelayProcess, Subscriber, wait_until
from tests.relay.test_crash_points import process_config
from tests.status_api.harness import COORDINATOR, DEFAULT_STEPS, TEST_CONFIG
from tests.support import GatewayProcess, StatusApiProcess, free_port, merge

NEVER = 3600.0
WITHIN = 15.0


async def _listener(counts: dict[str, int], name: str) -> UdpWakeListener:
    def woke() -> None:
        counts[name] = counts.get(name, 0) + 1

    listener = UdpWakeListener("127.0.0.1:0", woke)
    await listener.start()
    return listener


def _dead_port() -> int:
    """A UDP port nothing listens on (bound, then closed): a datagram to it draws ICMP unreachable."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _tick() -> None:
    await asyncio.sleep(0)  # the sender's call_soon runs after this tick


async def test_a_hint_wakes_one_relay_round_robin_and_a_refusing_relay_is_skipped() -> None:
    counts: dict[str, int] = {}
    a, b = await _listener(counts, "a"), await _listener(counts, "b")
    dead = _dead_port()
    targets = [f"127.0.0.1:{a.port}", f"127.0.0.1:{dead}", f"127.0.0.1:{b.port}"]
    sender = UdpWakeSender(targets, clock=lambda: 0.0)  # a refusal is remembered for the whole test
    try:
        for _ in range(5):
            sender.notify(2)  # five commits in one tick: one datagram
        await _tick()
        await wait_until(lambda: counts.get("a") == 1, within=WITHIN, what="first hint at relay a")
        assert sender.sent == 1 and counts == {"a": 1}
        # The next one goes to the dead relay (lost, as any datagram may be: the poll covers it);
        # its ICMP refusal then makes the sender skip it for the following hints.
        sender.notify(1)
        await _tick()
        await wait_until(lambda: sender.sent == 2, within=WITHIN, what="the datagram to the dead relay")
        for i in range(6):
            sender.notify(1)
            await _tick()
            total = 1 + i + 1
            await wait_until(
                lambda total=total: sum(counts.values()) == total,  # type: ignore[misc]
                within=WITHIN,
                what=f"hint {total} delivered",
            )
        assert counts["a"] >= 2 and counts["b"] >= 2, counts  # one relay per hint, both in turn
        assert sum(counts.values()) == 7
    finally:
        a.close()
        b.close()
        await sender.aclose()


def test_wake_addresses_are_validated() -> None:
    base = {"database_url": "sqlite+aiosqlite:///x.db", "gateway_api_url": "http://g:8000/api"}
    assert build_config({**base, "wake_udp_listen": "0.0.0.0:7911"}).wake_udp_listen == "0.0.0.0:7911"
    for bad in ("7911", "host:", "host:99999", ":7911"):
        with pytest.raises(ConfigError, match="wake_udp_listen"):
            build_config({**base, "wake_udp_listen": bad})
    with pytest.raises(StatusConfigError, match=r"wake\.udp_targets\[1\]"):
        status_config(merge(TEST_CONFIG, {"wake": {"udp_targets": ["relay1:7911", "relay2"]}}))


@pytest.mark.mysql
async def test_a_status_api_commit_wakes_a_relay_process_over_udp(
    engine: AsyncEngine, gateway: GatewayProcess, relay_db_url: str, tmp_path: Path
) -> None:
    port = free_port()
    api = StatusApiProcess(
        merge(
            TEST_CONFIG,
            {"database": {"url": relay_db_url}, "wake": {"udp_targets": [f"127.0.0.1:{port}"]}},
        ),
        tmp_path / "api",
    ).start()
    relay = RelayProcess(
        process_config(
            relay_db_url,
            gateway,
            wake_udp_listen=f"127.0.0.1:{port}",
            poll_interval_seconds=NEVER,
            metrics_port=free_port(),
        ),
        tmp_path,
    ).start()
    try:
        await wait_until(lambda: "wake-up hints on udp" in relay.log_text(), within=60, what="relay bound")
        assert "uvloop loop" in relay.log_text()  # `relay run` runs on uvloop by default
        async with (
            Subscriber(gateway, ["task_user:t1/u1"]) as sub,
            httpx.AsyncClient(base_url=api.url) as http,
        ):
            body = {
                "tenantId": "t1",
                "ownerId": "u1",
                "product": "DOCUMENT",
                "taskType": "DOCUMENT_PROCESS",
                "title": "wake",
                "statusDefinitionVersion": 1,
                "operationDefinitionVersion": 1,
                "steps": DEFAULT_STEPS,
            }
            r = await http.post(
                "/internal/v1/tasks", json=body, headers={"Authorization": f"Bearer {COORDINATOR}"}
            )
            assert r.status_code == 201, r.text
            task_id = r.json()["taskId"]
            await wait_until(
                lambda: any(t == task_id for _, t, _, _ in sub.received),
                within=WITHIN,
                what="task at the client",
            )
    finally:
        relay.terminate()
        api.terminate()
    assert "Traceback" not in api.log_text() + relay.log_text()
