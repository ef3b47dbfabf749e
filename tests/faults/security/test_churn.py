"""Connection churn against one gateway process: CYCLES connect / subscribe / disconnect cycles
by WORKERS concurrent raw WebSocket clients (three ways to leave: a clean close handshake, a
bare FIN, a reset), while a control client receives every publication of its channel. Afterwards
the node's counters (clients, subscriptions, channels), the event loop's tasks and the process's
open fds are back at their baseline and RSS grew by less than RSS_GROWTH_KIB.

CYCLES is 20,000 (issue 10); ``TASKCAST_CHURN_CYCLES`` lowers or raises it. On 2 idle cores the
run takes ~25-40 s, on a loaded machine (other suites beside it) ~90 s: CHURN_BUDGET is a hang
guard, generous enough for load, not a speed requirement.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct

import pytest

from tests.faults.security.conftest import (
    Control,
    GatewayFactory,
    Secrets,
    metrics,
    proc_stats,
    raw_ws_open,
    read_ws_frame,
    security_config,
    wait_until,
    ws_frame,
)
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(900)

CYCLES = int(os.environ.get("TASKCAST_CHURN_CYCLES", "20000"))
WORKERS = 50
WARMUP = 500
CHURN_BUDGET = 600.0  # a hang guard: 20,000 cycles took 60 s beside bench-fanout, 268 s at load 16
RSS_GROWTH_KIB = 16 * 1024
COUNTERS = (
    "centrifugo_node_num_clients",
    "centrifugo_node_num_subscriptions",
    "centrifugo_node_num_channels",
)


async def _cycle(gw: GatewayProcess, token: str, channel: str, how: int) -> None:
    reader, writer = await raw_ws_open(gw.port)
    try:
        connect = json.dumps({"id": 1, "connect": {"token": token}})
        subscribe = json.dumps({"id": 2, "subscribe": {"channel": channel}})
        writer.write(ws_frame(f"{connect}\n{subscribe}".encode()))
        seen = ""
        while '"id":2' not in seen:
            opcode, payload = await read_ws_frame(reader)
            assert opcode == 1, (opcode, payload[:80])
            seen += payload.decode()
        assert '"error"' not in seen, seen
        if how == 0:  # clean close handshake
            writer.write(ws_frame(struct.pack("!H", 1000), opcode=8))
            opcode, _ = await read_ws_frame(reader)
            assert opcode == 8
        elif how == 2:  # reset: SO_LINGER 0 turns close() into an RST
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # how == 1: a bare FIN, no close frame
    finally:
        writer.close()


async def _snapshot(gw: GatewayProcess) -> dict[str, float]:
    m = await metrics(gw)
    fds, rss = proc_stats(gw)
    snap = {name: m[name] for name in COUNTERS}
    snap["tasks"] = m["taskcast_gateway_asyncio_tasks"]
    snap["fds"] = fds
    snap["rss_kib"] = rss
    return snap


async def _churn(gw: GatewayProcess, secrets: Secrets, cycles: int) -> None:
    counter = iter(range(cycles))

    async def worker(w: int) -> None:
        token = secrets.token(sub=f"churn-{w}", exp_in=600)
        for n in counter:
            # Alternately a reused channel with history and a fresh one without: the hub entry
            # is made and dropped every cycle either way. (Fresh history channels would keep
            # their engine meta for history_meta_ttl by design, which is not a leak.)
            channel = f"ctl:churn-{w}" if n % 2 else f"churn:{w}-{n}"
            await _cycle(gw, token, channel, n % 3)

    await asyncio.gather(*(worker(w) for w in range(WORKERS)))


async def test_churn_returns_tasks_fds_rss_and_counters_to_baseline(
    gateway_factory: GatewayFactory, secrets: Secrets
):
    config = security_config(client={"user_connection_limit": 0})  # the stale delay is scaled there
    config["channel"]["namespaces"].append({"name": "churn", "allow_subscribe_for_client": True})
    gw = gateway_factory(config)
    await _churn(gw, secrets, WARMUP)  # allocator pools, caches and lazy imports settle first
    await wait_until(lambda: _counters_zero(gw), 15, "counters at zero after warm-up")
    control = Control(gw, secrets)
    await control.start(minimum=200)
    baseline = await _snapshot(gw)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(scaled(CHURN_BUDGET)):
        await _churn(gw, secrets, CYCLES)
    elapsed = loop.time() - started
    await control.finish()  # every publication arrived, in order, during the churn

    async def settled() -> dict[str, float] | None:
        now = await _snapshot(gw)
        back = all(now[name] <= 0 for name in COUNTERS) and now["tasks"] <= baseline["tasks"]
        return now if back and now["fds"] <= baseline["fds"] else None

    after = await wait_until(settled, 15, f"baseline {baseline}")
    growth = after["rss_kib"] - baseline["rss_kib"]
    print(f"churn: {CYCLES} cycles in {elapsed:.1f}s ({CYCLES / elapsed:.0f}/s); {baseline=} {after=}")
    assert growth < RSS_GROWTH_KIB, f"RSS grew {growth} KiB over {CYCLES} cycles"
    assert gw.health_ok()


async def _counters_zero(gw: GatewayProcess) -> bool:
    m = await metrics(gw)
    return all(m[name] == 0 for name in COUNTERS)
