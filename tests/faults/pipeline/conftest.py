"""Fixtures of the pipeline fault scenarios: the relay tests' throwaway MariaDB database (reused
from tests/relay/conftest.py), gateway processes whose task namespaces force recovery (so the
convergent client reconnects with positions), and readers of the gateway's history."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.convergence import Streams, task_version_of
from tests.relay.conftest import engine, relay_db_url  # reuse: one schema per session
from tests.support import GatewayProcess, scaled

__all__ = ["engine", "relay_db_url"]

SECRET = "faults-secret-0123456789abcdefghijklmn"
HISTORY: dict[str, Any] = {"history_size": 1000, "history_ttl": "300s", "force_recovery": True}


def gateway_config(**engine: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "client": {"token": {"hmac_secret_key": SECRET}, "channel_limit": 512},
        "channel": {
            "namespaces": [
                {"name": "task_user", **HISTORY},
                {"name": "task_detail", **HISTORY},
                {"name": "task_project", **HISTORY},
            ]
        },
    }
    if engine:
        cfg["engine"] = engine
    return cfg


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A memory-engine gateway of this test's own."""
    gw = GatewayProcess(gateway_config(), tmp_path / "gw").start()
    yield gw
    gw.terminate()


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """Factory of gateway processes (``engine`` options, e.g. Redis); all terminated afterwards."""
    started: list[GatewayProcess] = []

    def start(**engine: Any) -> GatewayProcess:
        gw = GatewayProcess(gateway_config(**engine), tmp_path / f"gw{len(started)}").start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.terminate()


async def api(gw: GatewayProcess, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}, timeout=scaled(30)) as http:
        reply: dict[str, Any] = (await http.post(f"{gw.api_url}/{method}", json=body)).json()
        return reply


async def history(gw: GatewayProcess, channels: list[str]) -> Streams:
    """The gateway's history of each channel through its server API, as ``Streams`` (the same
    record the checker reads from Redis with XRANGE)."""
    out = Streams()
    for channel in channels:
        reply = (await api(gw, "history", {"channel": channel, "limit": -1}))["result"]
        items: list[tuple[int, str | None, int | None]] = []
        for pub in reply.get("publications", []):
            found = task_version_of(pub["data"])
            items.append((int(pub["offset"]), *(found or (None, None))))
        out.entries[channel] = items
        out.meta[channel] = (reply.get("epoch", ""), int(reply.get("offset") or 0))
    return out
