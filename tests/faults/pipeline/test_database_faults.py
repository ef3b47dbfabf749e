"""MariaDB faults under the Status API (issue 10, reliability-notes matrix #7), injected with the
fault proxy between the Status API and a real MariaDB:

* the database is killed (every connection reset, new ones refused): event ingestion answers
  **503 with an error code** within a bound — never a 500, never a hang — readiness turns false,
  and once the database is back the same retry succeeds with the next version;
* the database hangs (blackholed): the answer is still a bounded 503;
* the database is slow (latency on every packet): requests succeed, versions stay 1..N.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from status_api.storage.database import CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS, create_engine
from tests.helpers.convergence import Checker, Outbox, Truth
from tests.helpers.faultproxy import FaultProxy
from tests.status_api.harness import FakeClock, Harness, Task, build
from tests.support import scaled, wait_until

pytestmark = pytest.mark.mysql

# A hung server costs the statement's read timeout plus the ROLLBACK's (also unanswered).
ANSWER_BOUND_SECONDS = 2 * READ_TIMEOUT_SECONDS + CONNECT_TIMEOUT_SECONDS + 2


@pytest.fixture
async def proxied(relay_db_url: str) -> AsyncIterator[tuple[Harness, FaultProxy]]:
    url = sa.make_url(relay_db_url)
    async with FaultProxy(url.host or "127.0.0.1", int(url.port or 3306)) as proxy:
        engine = create_engine(
            url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), pool_size=4
        )
        clock = FakeClock()
        h = Harness(build(engine, clock), clock)
        await h.service.load_registry_files()
        try:
            yield h, proxy
        finally:
            await h.http.aclose()
            proxy.pass_through()
            await engine.dispose()


async def _report(
    h: Harness, task: Task, step: str, event: str, business: str | None
) -> tuple[int, Any, float]:
    body = h.step_event(task, step, event, business)
    started = time.monotonic()
    r = await h.http.post(
        "/internal/v1/task-events",
        json=body,
        headers={"Authorization": f"Bearer {task.steps[step].token}", "Idempotency-Key": body["eventId"]},
    )
    return r.status_code, r.json() if r.content else None, time.monotonic() - started


async def _until_ok(h: Harness, task: Task, within: float) -> float:
    """Retry one event as a worker would (same eventId) until 200; returns the healing time."""
    body = h.step_event(
        task, "01_prepare", "STEP_PROGRESS", "PREPARING", progress={"current": 5, "total": 10}
    )
    headers = {
        "Authorization": f"Bearer {task.steps['01_prepare'].token}",
        "Idempotency-Key": body["eventId"],
    }

    async def accepted() -> bool:
        r = await h.http.post("/internal/v1/task-events", json=body, headers=headers)
        assert r.status_code in (200, 503), r.text
        return r.status_code == 200

    started = time.monotonic()
    await wait_until(accepted, within, "the Status API to heal")
    return time.monotonic() - started


@pytest.mark.parametrize("fault", ["killed", "hung"])
async def test_database_outage_answers_503_with_a_code_then_heals(
    proxied: tuple[Harness, FaultProxy], fault: str
) -> None:
    h, proxy = proxied
    task = await h.create_task()
    status, _, _ = await _report(h, task, "01_prepare", "STEP_STARTED", "PREPARING")
    assert status == 200
    if fault == "killed":
        proxy.reset()
    else:
        proxy.blackhole()
    # Killed: pooled connections die one by one, each answer a coded 503. Hung: one bounded wait.
    for _ in range(3 if fault == "killed" else 1):
        status, body, took = await _report(h, task, "01_prepare", "STEP_PROGRESS", "PREPARING")
        assert status == 503, body
        assert body["error"]["code"] and body["error"]["retryable"] is True, body
        assert took < scaled(ANSWER_BOUND_SECONDS)
    if fault == "killed":  # (hung: readiness would cost another read timeout to say the same)
        assert (await h.http.get("/readyz")).status_code == 503
    proxy.pass_through()
    healed = await _until_ok(h, task, within=20)
    assert (await h.http.get("/readyz")).status_code == 200
    truth = await Truth.load(h.service.engine, [task.id])
    Checker(truth=truth).assert_ok([])
    assert truth.final[task.id] == 3  # created, started, one progress: nothing lost, nothing doubled
    print(f"healed {healed:.2f}s after the database came back")


async def test_slow_database_still_answers_and_versions_stay_one_to_n(
    proxied: tuple[Harness, FaultProxy],
) -> None:
    h, proxy = proxied
    task = await h.create_task()
    proxy.latency(0.05)  # every packet, both ways
    for n in range(5):
        status, body, _ = await _report(h, task, "01_prepare", "STEP_PROGRESS", "PREPARING")
        assert status == 200, body
        assert int(body["taskVersion"]) == n + 2
    proxy.pass_through()
    truth = await Truth.load(h.service.engine, [task.id])
    checker = Checker(truth=truth, outbox=await Outbox.load(h.service.engine, [task.id]))
    assert checker.check_truth() == []
    assert truth.final[task.id] == 6
