"""Relay faults with real processes and a fault proxy on the relay → gateway path (issue 10):

* a relay SIGSTOPped past its lease while its publish is in flight: another relay takes the rows
  over, the stopped relay's late publish is a no-op (idempotency key) and its late mark is refused;
* an indefinite publish result: the gateway processed the publish but the response is lost (reset)
  or arrives after the relay's timeout; the retry with the same idempotency key is a no-op.

Every scenario ends with the convergence checker over the outbox, the gateway's history and a
version-gating client that stayed connected throughout.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.tables import task_outbox
from tests.faults.pipeline.clients import ConvergentClient
from tests.faults.pipeline.conftest import SECRET, history
from tests.helpers.convergence import Checker, Outbox
from tests.helpers.faultproxy import FaultProxy
from tests.relay.harness import drain, insert, make_relay, plan, relay_config, statuses
from tests.support import GatewayProcess, RelayProcess, wait_until

pytestmark = pytest.mark.mysql


def proc_config(db_url: str, api_url: str, api_key: str, **extra: Any) -> dict[str, Any]:
    return {
        "database_url": db_url,
        "gateway_api_url": api_url,
        "gateway_api_key": api_key,
        "relay_id": f"fault-{uuid.uuid4().hex[:6]}",
        "batch_size": 50,
        "concurrency": 1,
        "poll_interval_seconds": 0.1,
        "lease_seconds": 2.0,
        "publish_timeout_seconds": 1.0,
        "backoff_base_seconds": 0.01,
        "backoff_max_seconds": 0.1,
        "shutdown_timeout_seconds": 5.0,
        **extra,
    }


async def _held_by(engine: AsyncEngine, relay_id: str) -> int:
    async with engine.connect() as conn:
        n = await conn.scalar(
            sa.select(sa.func.count()).where(
                task_outbox.c.locked_by == relay_id, task_outbox.c.status == "PROCESSING"
            )
        )
    return int(n or 0)


async def _all_published(engine: AsyncEngine, n: int) -> bool:
    return (await statuses(engine)).get("PUBLISHED", 0) == n


async def test_relay_sigstopped_past_its_lease_is_taken_over_nothing_lost_nothing_applied_twice(
    engine: AsyncEngine, gateway: GatewayProcess, tmp_path: Path
) -> None:
    started = time.monotonic()
    specs = plan(tasks=10, versions=20)  # 400 rows on 15 channels
    await insert(engine, specs)
    url = engine.url.render_as_string(False)
    channels = sorted({s.channel for s in specs})
    async with FaultProxy("127.0.0.1", gateway.port) as proxy:
        proxy.stall()  # A's first publish request is read by the proxy and held there
        cfg_a = proc_config(url, f"http://{proxy.address}/api", gateway.api_key)
        async with ConvergentClient(gateway.ws_url, SECRET, channels, name="stayed") as client:
            a = RelayProcess(cfg_a, tmp_path).start()
            b: RelayProcess | None = None
            try:
                await wait_until(lambda: _held_by(engine, cfg_a["relay_id"]), 20, "relay A holding a batch")
                assert a.proc is not None
                a.proc.send_signal(signal.SIGSTOP)
                b = RelayProcess(proc_config(url, gateway.api_url, gateway.api_key), tmp_path).start()
                await wait_until(lambda: _all_published(engine, len(specs)), 30, "relay B drained everything")
                assert "took over 50 rows with expired leases" in b.log_text()
                # A wakes up holding rows it no longer owns: its stale publish (if its timeout, which
                # kept running while it was stopped, lets it out) is answered from the gateway's
                # idempotency cache, and its mark is refused.
                proxy.pass_through()
                a.proc.send_signal(signal.SIGCONT)
                await wait_until(
                    lambda: "were taken over by another relay before being marked" in a.log_text(),
                    15,
                    "relay A's refused mark",
                )
                expected = (await Outbox.load(engine)).expected(channels)
                healed = await Checker().wait_converged([client.log], expected, within=20)
            finally:
                for r in (a, b):
                    if r is not None and r.proc is not None and r.proc.poll() is None:
                        r.proc.send_signal(signal.SIGCONT)
                        r.proc.send_signal(signal.SIGTERM)
                        await r.wait_exit(10)
            checker = Checker(outbox=await Outbox.load(engine), streams=await history(gateway, channels))
            checker.assert_ok([client.log], expected)
            assert client.log.duplicates == 0, "the late publish was delivered again"
    async with engine.connect() as conn:
        attempts = sorted({int(r[0]) for r in await conn.execute(sa.select(task_outbox.c.attempts))})
    assert attempts == [1, 2]
    print(f"healed in {healed:.2f}s, scenario {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize("fault", ["response_reset", "response_late"])
async def test_indefinite_publish_result_is_retried_and_applied_once(
    engine: AsyncEngine, gateway: GatewayProcess, fault: str
) -> None:
    specs = plan(tasks=3, versions=4, users=2)
    await insert(engine, specs)
    channels = sorted({s.channel for s in specs})
    url = engine.url.render_as_string(False)
    async with (
        FaultProxy("127.0.0.1", gateway.port) as proxy,
        ConvergentClient(gateway.ws_url, SECRET, channels, name="stayed") as client,
    ):
        cfg = relay_config(
            url,
            gateway,
            batch_size=100,
            publish_timeout_seconds=1.0,
            gateway_api_url=f"http://{proxy.address}/api",
        )
        relay = make_relay(engine, cfg)
        if fault == "response_reset":
            proxy.drop_responses(1)
        else:
            proxy.latency(1.5, "down")  # longer than the relay's 1 s publish timeout
        assert await relay.run_once() == len(specs)
        # The gateway did the work: every publication is in history and reached the client...
        await wait_until(lambda: client.log.gate and len(client.log.applied) == len(specs), 10, "delivery")
        # ...but the relay could not know: nothing is PUBLISHED, nothing is DEAD.
        assert await statuses(engine) == {"PENDING": len(specs)}
        proxy.pass_through()
        assert await drain(relay) == len(specs)
        assert await statuses(engine) == {"PUBLISHED": len(specs)}
        await relay.publisher.aclose()
        expected = (await Outbox.load(engine)).expected(channels)
        await Checker().wait_converged([client.log], expected, within=10)
        streams = await history(gateway, channels)
        Checker(outbox=await Outbox.load(engine), streams=streams).assert_ok([client.log], expected)
        assert client.log.duplicates == 0
        assert sum(len(v) for v in streams.entries.values()) == len(specs)  # one entry per row
