"""The server-side progress window (seed §3.5 "throttled, overwritable", §9.1): on SQLite and
MariaDB, through the HTTP API and the relay's own claim (``relay.claim.OutboxLeases``), with the
hand-driven clock. Invariants: at most one progress per task per window becomes due, the last
one always (due at the window's end); other versions are never held back and replace a held-back
progress of their channels; relays claim a row only once it is due and learn when the next one
is; ``progress.min_interval_ms: 0`` keeps every progress due at its commit; a task type's
``progressMinIntervalMs`` overrides the server's window.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases
from status_api.config import ConfigError
from status_api.domain.progress_window import progress_due
from tests.status_api.harness import (
    ADMIN,
    TEST_CONFIG,
    FakeClock,
    Harness,
    Task,
    auth,
    build,
    load_config_dict,
)

ROOT = Path(__file__).resolve().parents[2]
STEP = "01_prepare"


@pytest.fixture
def window_ms() -> int:
    """The Status API's ``progress.min_interval_ms`` (a test parametrizes it to change it)."""
    return 1000


@pytest.fixture
async def windowed(engine: AsyncEngine, clock: FakeClock, window_ms: int) -> AsyncIterator[Harness]:
    h = Harness(build(engine, clock, {"progress": {"min_interval_ms": window_ms}}), clock)
    await h.service.load_registry_files()
    yield h
    await h.http.aclose()
    await h.check_outbox_messages()


def _leases(h: Harness) -> OutboxLeases:
    return OutboxLeases(h.comp.engine, "r-window", lease_seconds=30, now=h.clock)


async def _progress(h: Harness, t: Task, current: int) -> int:
    r = await h.report(t, STEP, "STEP_PROGRESS", "PREPARING", progress={"current": current, "total": 100})
    assert r["accepted"] is True, r
    return int(r["taskVersion"])


async def _rows_of(h: Harness, task_id: str) -> dict[int, list[dict[str, Any]]]:
    """The publications of each version (``row_id``: its one outbox row)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for r in await h.outbox_publications(task_id):
        out.setdefault(r["aggregate_version"], []).append(r)
    return out


async def _claimed_versions(leases: OutboxLeases, task_id: str) -> list[int]:
    rows = await leases.claim(100)
    return sorted({r.aggregate_version for r in rows if r.aggregate_id == task_id})


async def _started(h: Harness, leases: OutboxLeases) -> Task:
    """A task whose step runs, with everything so far claimed (nothing of it left due)."""
    t = await h.create_task()
    await h.report(t, STEP, "STEP_STARTED", "PREPARING")
    assert await _claimed_versions(leases, t.id) == [1, 2]
    return t


async def test_a_burst_in_one_window_leaves_one_progress_the_last_due_at_the_window_end(
    windowed: Harness,
) -> None:
    """A progress after a quiet window is due at once (the leading edge); ten more within the
    window leave only the last, due when the window closes; a relay claims it only then."""
    h, leases = windowed, _leases(windowed)
    t = await _started(h, leases)
    first = await _progress(h, t, 1)
    opened = h.clock()
    assert await _claimed_versions(leases, t.id) == [first]
    last = 0
    for i in range(2, 12):
        h.clock.advance(0.05)
        last = await _progress(h, t, i)
    rows = await _rows_of(h, t.id)
    assert sorted(rows) == [1, 2, first, last]  # the nine in between are replaced
    assert len(rows[last]) == 2  # the user channel and the detail channel
    assert len({r["row_id"] for r in rows[last]}) == 1  # ... in one row
    due = opened + timedelta(seconds=1)
    assert {r["available_at"] for r in rows[last]} == {due}
    assert all(r["created_at"] < due for r in rows[last])  # committed inside the window

    assert await _claimed_versions(leases, t.id) == []  # not due yet: no relay takes it
    assert leases.next_due == due  # ... but it knows when
    h.clock.advance((due - h.clock()).total_seconds())
    assert await _claimed_versions(leases, t.id) == [last]
    assert leases.next_due is None


async def test_the_window_restarts_from_the_last_due_progress(windowed: Harness) -> None:
    """One progress per window, however they are spread: a progress right after a window's last
    one waits for the next window; one after a quiet window is due at once."""
    h, leases = windowed, _leases(windowed)
    t = await _started(h, leases)
    start = h.clock()
    first = await _progress(h, t, 1)  # due at once
    assert await _claimed_versions(leases, t.id) == [first]
    h.clock.advance(0.5)
    second = await _progress(h, t, 2)  # due at start + 1 s
    h.clock.advance(0.6)  # start + 1.1: the second was due at start + 1
    assert await _claimed_versions(leases, t.id) == [second]
    third = await _progress(h, t, 3)
    rows = await _rows_of(h, t.id)
    assert {r["available_at"] for r in rows[second]} == {start + timedelta(seconds=1)}
    assert {r["available_at"] for r in rows[third]} == {start + timedelta(seconds=2)}
    h.clock.advance(5)
    fourth = await _progress(h, t, 4)  # a quiet window: due at once
    assert {r["available_at"] for r in (await _rows_of(h, t.id))[fourth]} == {h.clock()}


async def test_a_state_change_is_not_held_back_and_replaces_a_held_back_progress(windowed: Harness) -> None:
    """A STEP_COMPLETED right after a held-back progress is due at once; the progress rows are
    deleted with the commit, so no relay can publish them after the newer state; nothing else
    waits."""
    h, leases = windowed, _leases(windowed)
    t = await _started(h, leases)
    first = await _progress(h, t, 1)
    assert await _claimed_versions(leases, t.id) == [first]
    h.clock.advance(0.1)
    held = await _progress(h, t, 2)
    h.clock.advance(0.1)
    done = await h.report(t, STEP, "STEP_COMPLETED", "PREPARED", durationMs=5)
    state = int(done["taskVersion"])
    rows = await _rows_of(h, t.id)
    assert held not in rows
    assert {r["available_at"] for r in rows[state]} == {h.clock()}
    assert await _claimed_versions(leases, t.id) == [state]
    assert leases.next_due is None
    h.clock.advance(5)
    assert await _claimed_versions(leases, t.id) == []


@pytest.mark.parametrize("window_ms", [0])
async def test_window_zero_keeps_every_progress_due_at_its_commit(windowed: Harness) -> None:
    h, leases = windowed, _leases(windowed)
    t = await _started(h, leases)
    claimed = []
    for i in range(1, 5):
        h.clock.advance(0.01)
        v = await _progress(h, t, i)
        rows = (await _rows_of(h, t.id))[v]
        assert {r["available_at"] for r in rows} == {r["created_at"] for r in rows} == {h.clock()}
        claimed += await _claimed_versions(leases, t.id)
        assert leases.next_due is None
    assert len(claimed) == 4  # every progress published


@pytest.mark.parametrize("window_ms", [0])
async def test_a_task_types_window_overrides_the_servers(windowed: Harness) -> None:
    """``progressMinIntervalMs`` of an operation definition version (here 10 minutes) applies to
    the tasks bound to it; the server's window (here 0) to the others. Out of range: 422. The held
    rows show in ``/metrics`` (``outbox_held_rows``, read at scrape time on the real clock: the
    10-minute window keeps them held however slow this test runs)."""
    h, leases = windowed, _leases(windowed)
    ops = json.loads((ROOT / "schema" / "registry" / "operation-definitions.json").read_text())[0]
    v2 = {**ops, "definitionVersion": 2, "progressMinIntervalMs": 600000}
    r = await h.http.post("/admin/v1/registry/operation-definitions", json=v2, headers=auth(ADMIN))
    assert r.status_code == 201, r.text
    bad = {**ops, "definitionVersion": 3, "progressMinIntervalMs": 600001}
    r = await h.http.post("/admin/v1/registry/operation-definitions", json=bad, headers=auth(ADMIN))
    assert r.status_code == 422, r.text

    typed = await h.create_task(operationDefinitionVersion=2)
    plain = await h.create_task()
    for t in (typed, plain):
        await h.report(t, STEP, "STEP_STARTED", "PREPARING")
    await leases.claim(100)
    start = h.clock()
    for i in (1, 2):
        await _progress(h, plain, i)
        last_typed = await _progress(h, typed, i)
        h.clock.advance(0.1)
    typed_rows = (await _rows_of(h, typed.id))[last_typed]
    assert {r["available_at"] for r in typed_rows} == {start + timedelta(minutes=10)}
    plain_rows = await _rows_of(h, plain.id)
    assert sorted(plain_rows) == [1, 2, 4]  # v3 coalesced into v4 (no relay ran), due at its commit
    assert {r["available_at"] for r in plain_rows[4]} == {r["created_at"] for r in plain_rows[4]}
    claimed = {(r.aggregate_id, r.aggregate_version) for r in await leases.claim(100)}
    assert claimed == {(plain.id, 4)}
    assert leases.next_due == start + timedelta(minutes=10)
    metrics = (await h.http.get("/metrics")).text
    assert "taskcast_status_api_outbox_held_rows 1.0" in metrics.splitlines()  # the held version: one row


@pytest.mark.parametrize(
    ("previous", "now", "window", "due"),
    [
        (None, 10.0, 1.0, 10.0),  # the first progress: at once
        (8.0, 10.0, 1.0, 10.0),  # a quiet window: at once
        (9.5, 10.0, 1.0, 10.5),  # the previous was due 0.5 s ago: the window's end
        (10.4, 10.0, 1.0, 10.4),  # the previous still waits: its due time
        (30.0, 10.0, 1.0, 11.0),  # never more than one window away
        (9.5, 10.0, 0.0, 10.0),  # no window
    ],
)
def test_progress_due(previous: float | None, now: float, window: float, due: float) -> None:
    base = datetime(2026, 1, 1)

    def at(s: float) -> datetime:
        return base + timedelta(seconds=s)

    prev = None if previous is None else at(previous)
    assert progress_due(prev, at(now), timedelta(seconds=window)) == at(due)


@pytest.mark.parametrize("value", [-1, 600001, "soon"])
def test_the_window_option_is_checked(value: object) -> None:
    raw = {k: dict(v) for k, v in TEST_CONFIG.items()}
    raw["progress"] = {"min_interval_ms": value}
    with pytest.raises(ConfigError, match=r"progress\.min_interval_ms"):
        load_config_dict(raw)
