"""kill -9 of a relay process at each crash point during a run of thousands of rows (seed §5.2,
reliability-notes §2.5 scenario 1), and the process-level SIGTERM contract.

The crash is injected deterministically by a test-only entry point (``tests/relay/crashing_relay.py``:
the real relay with a hook that SIGKILLs the process the n-th time it reaches the point; production
code reads no test switch). A second, ordinary relay process then drains the rest.
Pass criteria: every row PUBLISHED and delivered at least once; the version-de-duplicating client
applies every (channel, task, version) exactly once; its per-channel version gate ends at the newest
version of every task.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.tables import task_outbox
from tests.relay.harness import RelayProcess, Subscriber, insert, plan, statuses, wait_until
from tests.support import GatewayProcess, ServiceProcess

pytestmark = pytest.mark.mysql

ROWS_TASKS, ROWS_VERSIONS = 30, 50  # 3,000 rows on 35 channels
CRASH_AT_BATCH = 8  # of 50 rows: the crash happens with ~350 rows already handled


def crashing_relay(cfg: dict[str, Any], workdir: Path, spec: str) -> ServiceProcess:
    """The relay process with crash point ``spec`` (``POINT:N``) armed."""
    path = workdir / f"{cfg['relay_id']}.json"
    path.write_text(json.dumps(cfg))
    launcher = [sys.executable, "-m", "tests.relay.crashing_relay"]
    args = ["--crash-at", spec, "--config", str(path)]
    return ServiceProcess(str(cfg["relay_id"]), args, workdir, launcher=launcher)


def process_config(db_url: str, gateway: GatewayProcess, **extra: Any) -> dict[str, Any]:
    return {
        "database_url": db_url,
        "gateway_api_url": gateway.api_url,
        "gateway_api_key": gateway.api_key,
        "relay_id": f"proc-{uuid.uuid4().hex[:6]}",
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


@pytest.mark.parametrize(
    ("point", "mark_defer_ms"),
    [("before_publish", 500), ("after_publish", 500), ("after_mark", 0), ("after_mark", 500)],
    ids=["before_publish", "after_publish", "after_mark", "after_deferred_mark"],
)
async def test_kill_9_at_crash_point_loses_nothing_and_client_applies_each_version_once(
    engine: AsyncEngine, gateway: GatewayProcess, tmp_path: Path, point: str, mark_defer_ms: int
) -> None:
    """``after_deferred_mark``: the batch was published and its mark deferred to the next claim
    (``mark_defer_ms``) when the process died: exactly the crash between publish and mark, so the
    batch is republished by the survivor (same idempotency keys), never lost. Every batch before
    it was marked by the claim that followed it."""
    specs = plan(tasks=ROWS_TASKS, versions=ROWS_VERSIONS)
    await insert(engine, specs)
    url = engine.url.render_as_string(False)
    channels = sorted({s.channel for s in specs})
    marked_at_once = point == "after_mark" and not mark_defer_ms
    async with Subscriber(gateway, channels) as sub:
        cfg = process_config(url, gateway, mark_defer_ms=mark_defer_ms)
        doomed = crashing_relay(cfg, tmp_path, f"{point}:{CRASH_AT_BATCH}").start()
        assert await doomed.wait_exit(60) == -signal.SIGKILL, doomed.log_text()
        state = await statuses(engine)
        handled = CRASH_AT_BATCH * 50 if marked_at_once else (CRASH_AT_BATCH - 1) * 50
        assert state["PUBLISHED"] == handled, state
        in_doubt = 0 if marked_at_once else 50
        assert state.get("PROCESSING", 0) == in_doubt, state
        async with engine.connect() as conn:
            holder = await conn.scalar(  # relays holding leases (a PUBLISHED row keeps its publisher)
                sa.select(sa.func.count(sa.distinct(task_outbox.c.locked_by))).where(
                    task_outbox.c.status == "PROCESSING"
                )
            )
        assert holder == (1 if in_doubt else 0)

        survivor = RelayProcess(process_config(url, gateway), tmp_path).start()
        try:
            await wait_until(lambda: sub.has_all(specs), within=60, what="every row at the client")
            await wait_until(lambda: _all_published(engine, len(specs)), within=30, what="all rows marked")
            survivor.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            assert await survivor.wait_exit(10) == 0, survivor.log_text()
        finally:
            survivor.kill()
        sub.assert_exactly_once(specs)
        sub.assert_gate_monotonic(specs)
        # The re-publish after the crash reused each row's idempotency key: the gateway answered
        # with the first result and delivered nothing twice (the client would have dropped it).
        assert sub.duplicates == 0
    if in_doubt:
        assert "took over 50 rows with expired leases" in survivor.log_text()
    async with engine.connect() as conn:
        attempts = dict(
            (int(a), int(n))
            for a, n in await conn.execute(
                sa.select(task_outbox.c.attempts, sa.func.count()).group_by(task_outbox.c.attempts)
            )
        )
    assert attempts == ({1: len(specs) - 50, 2: 50} if in_doubt else {1: len(specs)})


async def _all_published(engine: AsyncEngine, n: int) -> bool:
    return (await statuses(engine)).get("PUBLISHED", 0) == n


async def test_sigterm_exits_zero_within_the_shutdown_bound(
    engine: AsyncEngine, gateway: GatewayProcess, tmp_path: Path
) -> None:
    specs = plan(tasks=2, versions=2)
    await insert(engine, specs)
    proc = RelayProcess(process_config(engine.url.render_as_string(False), gateway), tmp_path).start()
    try:
        await wait_until(lambda: _all_published(engine, len(specs)), within=30, what="rows published")
        proc.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert await proc.wait_exit(8) == 0
    finally:
        proc.kill()
    log = proc.log_text()
    assert "stopped" in log
    assert gateway.api_key not in log
