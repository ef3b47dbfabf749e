"""Clients that drop their socket in the middle of a connect, against a gateway process on the
Redis engine: the connect's server-side subscriptions are being positioned (a history read on
Redis) when the transport goes. Nothing of theirs may stay registered: before the fix a closed
connection stayed among a channel's subscribers whenever redis-py swallowed the connect's
cancellation (Python 3.11's ``asyncio.wait_for``), and from then on every publication on that
channel failed on the node, for every subscriber, until restart.

After rounds of aborted connects the server API lists no channel, and a client connecting now
receives what is published.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
import websockets

from tests.faults.pipeline.conftest import SECRET, api
from tests.helpers.redis_engine import unique_prefix
from tests.support import GatewayProcess, mint_token, scaled, wait_until

pytestmark = pytest.mark.redis

CHANNELS = ["task_user:t1/ab1", "task_user:t1/ab2", "task_user:t1/ab3"]
ROUNDS = 8
CLIENTS = 20


async def _abort_during_connect(gw: GatewayProcess, token: str, delay: float) -> None:
    try:
        async with websockets.connect(gw.ws_url, open_timeout=scaled(30)) as ws:
            await ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
            await asyncio.sleep(delay)
            ws.transport.abort()  # no close handshake: the connection is lost mid-command
    except (OSError, websockets.exceptions.WebSocketException):
        pass


async def test_connects_aborted_mid_subscription_leave_nothing_registered(
    gateways: Callable[..., GatewayProcess], redis_url: str
) -> None:
    engine: dict[str, Any] = {"type": "redis", "redis": {"address": redis_url, "prefix": unique_prefix()}}
    gw = gateways(**engine)
    token = mint_token(SECRET, "aborter", exp_in=600, channels=CHANNELS)
    rng = random.Random(31)
    for _ in range(ROUNDS):
        await asyncio.gather(*(_abort_during_connect(gw, token, rng.random() * 0.01) for _ in range(CLIENTS)))

    async def released() -> bool:
        reply = await api(gw, "channels", {})
        return reply["result"]["channels"] == {}

    # the releases run in the background: wait (bounded) until the node let go of them all
    await wait_until(released, 20, "every aborted connection released")

    async with websockets.connect(gw.ws_url, open_timeout=scaled(30)) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
        async with asyncio.timeout(scaled(10)):
            assert "connect" in json.loads(str(await ws.recv()).split("\n")[0])
        for channel in CHANNELS:
            reply = await api(gw, "publish", {"channel": channel, "data": {"on": channel}})
            assert "result" in reply, reply
        seen: set[str] = set()
        async with asyncio.timeout(scaled(10)):
            while seen != set(CHANNELS):
                for line in str(await ws.recv()).split("\n"):
                    push = json.loads(line).get("push", {}) if line.strip() else {}
                    if "pub" in push:
                        seen.add(push["channel"])
    assert "Traceback" not in gw.log_text()
