"""Far offsets and limits from clients on the Redis engine (issue 13, defect 5), end to end.

Recovery or history from an offset >= 10^14 (or a limit of 2^63 or more) answered error 100 with
a traceback per command, so any authenticated client could flood the log. Now the Redis engine
answers as the memory engine and Centrifugo do: ``recovered: false`` for a position past the top,
an empty history after it; values outside the protocol's types are refused as bad input. A real
gateway process on a real Redis, driven by a protocol-level client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.helpers.raw_client import Raw
from tests.helpers.redis_engine import unique_prefix
from tests.support import GatewayProcess, mint_token, scaled

pytestmark = pytest.mark.redis

SECRET = "far-offsets-secret-of-at-least-32-bytes"
FAR = [10**14, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1]


@pytest.fixture
def gateway(tmp_path: Path, redis_url: str) -> Iterator[GatewayProcess]:
    config: dict[str, Any] = {
        "client": {"token": {"hmac_secret_key": SECRET}},
        "engine": {"type": "redis", "redis": {"address": [redis_url], "prefix": unique_prefix()}},
        "channel": {
            "without_namespace": {
                "history_size": 10,
                "history_ttl": "300s",
                "force_recovery": True,
                "allow_subscribe_for_client": True,
                "allow_history_for_subscriber": True,
            }
        },
    }
    gw = GatewayProcess(config, tmp_path).start()
    try:
        yield gw
    finally:
        gw.terminate()


@pytest.fixture
async def raw(gateway: GatewayProcess) -> AsyncIterator[Raw]:
    async with connect(gateway.ws_url) as ws:
        client = Raw(ws)
        pump = asyncio.create_task(client.pump())
        reply = await client.call("connect", {"token": mint_token(SECRET, "u1")})
        assert "connect" in reply, reply
        try:
            yield client
        finally:
            pump.cancel()


async def api(gw: GatewayProcess, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}, timeout=scaled(30)) as http:
        reply: dict[str, Any] = (await http.post(f"{gw.api_url}/{method}", json=body)).json()
        return reply


async def test_far_offsets_recover_false_and_read_empty_history_without_tracebacks(
    gateway: GatewayProcess, raw: Raw
) -> None:
    published = await api(gateway, "publish", {"channel": "news", "data": {"n": 1}})
    epoch = published["result"]["epoch"]

    for n, offset in enumerate(FAR):
        channel = f"news{n}" if n else "news"
        if n:
            await api(gateway, "publish", {"channel": channel, "data": {"n": 1}})
            epoch = (await api(gateway, "history", {"channel": channel}))["result"]["epoch"]
        recover = {"recover": True, "offset": offset, "epoch": epoch}
        sub = await raw.call("subscribe", {"channel": channel, **recover})
        assert "error" not in sub, (offset, sub)
        assert sub["subscribe"].get("recovered", False) is False, (offset, sub)
        assert sub["subscribe"]["offset"] == 1 and sub["subscribe"]["epoch"] == epoch

        history = await raw.call(
            "history", {"channel": channel, "since": {"offset": offset, "epoch": epoch}, "limit": 2**31 - 1}
        )
        assert "error" not in history, (offset, history)
        assert history["history"].get("publications", []) == []
        assert history["history"]["offset"] == 1

        backwards = await api(
            gateway,
            "history",
            {"channel": channel, "since": {"offset": offset, "epoch": epoch}, "limit": 10, "reverse": True},
        )
        assert [p["data"] for p in backwards["result"]["publications"]] == [{"n": 1}], (offset, backwards)

    assert "Traceback" not in gateway.log_text()
