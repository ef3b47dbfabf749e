"""Group commit of ingested events (service/ingest.py + group_commit + the one writer), on SQLite and MariaDB.

Events submitted in one loop tick land in one batch (the first runner takes the whole queue), so
these tests see real multi-event transactions; each checks that the batch behaves exactly as if
its events had been processed one by one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from status_api.domain.errors import DomainError
from status_api.group_commit import GroupCommit
from status_api.storage import write
from status_api.storage.tables import task_event_dedup, task_event_log, task_outbox
from tests.status_api.harness import Harness, Task
from tests.support import scaled


def _caller(h: Harness, t: Task, step_id: str) -> Any:
    return h.comp.api.service_auth.event_caller(t.steps[step_id].token)


async def _ingest_all(h: Harness, items: list[tuple[dict[str, Any], Any]]) -> list[Any]:
    """Submit every event in the same loop tick; results (or exceptions) in order."""
    group = h.service.ingestor.group
    assert group is not None
    before = len(group.batch_sizes)
    out = await asyncio.gather(
        *(h.service.ingest_event(body, caller, body["eventId"]) for body, caller in items),
        return_exceptions=True,
    )
    assert max(list(group.batch_sizes)[before:]) == len(items), "expected one batch"
    return out


async def _per_version_outbox(h: Harness, task_id: str) -> dict[int, int]:
    """Publications per version; each version is ONE outbox row."""
    versions = [r["aggregate_version"] for r in await h.outbox_rows(task_id)]
    assert len(versions) == len(set(versions)), versions
    counts: dict[int, int] = {}
    for r in await h.outbox_publications(task_id):
        counts[r["aggregate_version"]] = counts.get(r["aggregate_version"], 0) + 1
    return counts


async def test_concurrent_events_of_one_task_apply_in_order_in_one_batch(h: Harness) -> None:
    t = await h.create_task()
    bodies = [h.step_event(t, "02_parse", "STEP_STARTED", "PARSING")]
    bodies += [
        h.step_event(t, "02_parse", "STEP_PROGRESS", "PARSING", progress={"current": i, "total": 9})
        for i in range(1, 6)
    ]
    bodies.append(h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING"))
    results = await _ingest_all(h, [(b, _caller(h, t, b["stepId"])) for b in bodies])
    assert [r["taskVersion"] for r in results] == [str(v) for v in range(2, 9)]
    assert [r["stepVersion"] for r in results[:6]] == [str(v) for v in range(2, 8)]
    assert all(r["accepted"] and not r["stale"] and not r["duplicate"] for r in results)
    snap = await h.user_get(f"/api/tasks/{t.id}")
    assert snap["taskVersion"] == "8"
    parse = next(s for s in snap["steps"] if s["id"] == "02_parse")
    assert parse["version"] == "7" and parse["progress"]["current"] == 5
    # Progress v3..v6 are replaced in the batch by v7, the newest progress (seed §3.5 coalescing);
    # v7, held back by the task's progress window, is replaced by v8 (a newer complete state of
    # its channels); every other version keeps its one row of two publications.
    assert await _per_version_outbox(h, t.id) == {1: 2, 2: 2, 8: 2}
    logged = await h.scalar(sa.select(sa.func.count()).where(task_event_log.c.task_id == t.id))
    assert logged == 8


async def test_events_of_many_tasks_share_one_transaction(h: Harness) -> None:
    tasks = [await h.create_task(owner=f"u{i}") for i in range(6)]
    items = [(h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING"), None) for t in tasks]
    items = [(b, _caller(h, t, "01_prepare")) for (b, _), t in zip(items, tasks, strict=True)]
    results = await _ingest_all(h, items)
    assert [(r["taskId"], r["taskVersion"]) for r in results] == [(t.id, "2") for t in tasks]
    for t in tasks:
        assert await _per_version_outbox(h, t.id) == {1: 2, 2: 2}


async def test_duplicate_event_id_within_one_batch_answers_the_first_result(h: Harness) -> None:
    t = await h.create_task()
    body = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    other = h.step_event(t, "02_parse", "STEP_STARTED", "PARSING")
    clash = {**h.step_event(t, "01_prepare", "STEP_PROGRESS", "PREPARING"), "eventId": body["eventId"]}
    c1, c2 = _caller(h, t, "01_prepare"), _caller(h, t, "02_parse")
    first, again, second, conflict = await _ingest_all(
        h, [(body, c1), (dict(body), c1), (other, c2), (clash, c1)]
    )
    assert (first["taskVersion"], first["duplicate"]) == ("2", False)
    assert again == {**first, "duplicate": True}
    assert second["taskVersion"] == "3"
    assert isinstance(conflict, DomainError) and conflict.code == "EVENT_ID_CONFLICT"
    assert await h.scalar(sa.select(sa.func.count()).select_from(task_event_dedup)) == 2
    # and the stored result is the same one a later retry gets
    later = await h.send(body, t.steps["01_prepare"].token)
    assert later == {**first, "duplicate": True}


async def test_stale_and_rejected_events_in_a_batch_behave_as_one_by_one(h: Harness) -> None:
    t = await h.create_task()
    start = h.step_event(t, "02_parse", "STEP_STARTED", "PARSING")
    same_seq = h.step_event(t, "02_parse", "STEP_PROGRESS", "PARSING", seq=start["sourceSeq"])
    unknown = h.step_event(t, "02_parse", "STEP_PROGRESS", "NO_SUCH_STATUS")
    beat = h.step_event(t, "02_parse", "STEP_HEARTBEAT", None)
    done = h.step_event(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED")
    late = h.step_event(t, "02_parse", "STEP_PROGRESS", "PARSING")
    c = _caller(h, t, "02_parse")
    r = await _ingest_all(h, [(b, c) for b in (start, same_seq, unknown, beat, done, late)])
    assert r[0]["taskVersion"] == "2"
    assert r[1]["stale"] and r[1]["staleReason"] == "STALE_SOURCE_SEQ" and r[1]["taskVersion"] == "2"
    assert isinstance(r[2], DomainError) and r[2].code == "UNKNOWN_BUSINESS_STATUS"
    assert r[3]["accepted"] and r[3]["taskVersion"] == "2"  # heartbeat: no version
    assert r[4]["taskVersion"] == "3" and r[4]["stepLifecycleStatus"] == "SUCCEEDED"
    assert isinstance(r[5], DomainError) and r[5].code == "INVALID_TRANSITION"
    assert await _per_version_outbox(h, t.id) == {1: 2, 2: 2, 3: 2}


async def test_poison_event_falls_back_and_does_not_fail_the_others(h: Harness) -> None:
    """The poison reuses the eventId of another task's TASK_CREATED log row (no dedup row), so the
    batch's event-log INSERT violates the primary key: the batch rolls back, every event is re-run
    in its own transaction, and only the poison fails."""
    victim, t = await h.create_task(), await h.create_task()
    created_id = await h.scalar(
        sa.select(task_event_log.c.event_id).where(task_event_log.c.task_id == victim.id)
    )
    good1 = h.step_event(t, "01_prepare", "STEP_STARTED", "PREPARING")
    poison = {**h.step_event(t, "02_parse", "STEP_STARTED", "PARSING"), "eventId": created_id}
    good2 = h.step_event(t, "03_store", "STEP_STARTED", "PERSISTING")
    items = [(good1, _caller(h, t, "01_prepare")), (poison, _caller(h, t, "02_parse"))]
    items.append((good2, _caller(h, t, "03_store")))
    r1, bad, r2 = await _ingest_all(h, items)
    assert isinstance(bad, Exception) and not isinstance(bad, DomainError)
    assert (r1["taskVersion"], r2["taskVersion"]) == ("2", "3")
    assert await _per_version_outbox(h, t.id) == {1: 2, 2: 2, 3: 2}
    snap = await h.user_get(f"/api/tasks/{t.id}")
    parse = next(s for s in snap["steps"] if s["id"] == "02_parse")
    assert parse["lifecycleStatus"] == "PENDING"


async def test_outbox_failure_in_a_batch_commits_nothing(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    t = await h.create_task()

    async def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("outbox write failed")

    monkeypatch.setattr(write, "append_outbox", failing)
    bodies = [
        h.step_event(t, s, "STEP_STARTED", b)
        for s, b in (("01_prepare", "PREPARING"), ("02_parse", "PARSING"))
    ]
    results = await _ingest_all(h, [(b, _caller(h, t, b["stepId"])) for b in bodies])
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await h.scalar(sa.select(sa.func.count()).select_from(task_outbox)) == 1  # task creation only
    assert await h.scalar(sa.select(sa.func.count()).select_from(task_event_dedup)) == 0


async def test_single_transaction_mode_without_group_commit(h: Harness) -> None:
    h.service.ingestor.group = None
    t = await h.create_task()
    r = await h.report(t, "01_prepare", "STEP_STARTED", "PREPARING")
    assert r["taskVersion"] == "2"
    body = h.step_event(t, "01_prepare", "STEP_PROGRESS", "PREPARING")
    first = await h.send(body, t.steps["01_prepare"].token)
    assert await h.send(body, t.steps["01_prepare"].token) == {**first, "duplicate": True}
    await h.send(h.step_event(t, "01_prepare", "STEP_PROGRESS", "NOPE"), t.steps["01_prepare"].token, 422)


async def test_group_commit_answers_each_caller_and_survives_a_cancelled_one() -> None:
    seen: list[list[int]] = []

    async def run(items: Any) -> list[Any]:
        seen.append(list(items))
        await asyncio.sleep(0)
        return [ValueError(i) if i < 0 else i * 10 for i in items]

    group: GroupCommit[int, int] = GroupCommit(run, max_batch=3, max_runners=1)
    waiting = asyncio.ensure_future(group.submit(99))
    results = await asyncio.gather(*(group.submit(i) for i in (1, -2, 3, 4)), return_exceptions=True)
    assert results[0] == 10 and isinstance(results[1], ValueError) and results[2:] == [30, 40]
    assert await waiting == 990
    assert seen == [[99, 1, -2], [3, 4]]
    cancelled = asyncio.ensure_future(group.submit(5))
    await asyncio.sleep(0)
    cancelled.cancel()
    assert await group.submit(6) == 60
    assert [6] in seen or [5, 6] in seen
    with pytest.raises(ValueError):
        GroupCommit(run, max_batch=0, max_runners=1)


async def test_a_second_runner_starts_only_once_enough_items_wait_for_the_busy_one() -> None:
    """Batches sized by load: while one transaction is in flight, items below ``spawn_queue`` wait
    for it and form its next batch instead of a transaction of their own; a queue at the threshold
    starts the next runner; a lone item never waits."""
    seen: list[list[int]] = []
    release = asyncio.Event()

    async def run(items: Any) -> list[Any]:
        seen.append(list(items))
        if items[0] == 0:
            await release.wait()  # the transaction in flight
        return [i for i in items]

    group: GroupCommit[int, int] = GroupCommit(run, max_batch=64, max_runners=3, spawn_queue=4)
    first = asyncio.ensure_future(group.submit(0))
    for _ in range(3):  # submit, then the runner task, then its run
        await asyncio.sleep(0)
    assert seen == [[0]], "a lone item starts a runner at once"
    few = [asyncio.ensure_future(group.submit(i)) for i in (1, 2, 3)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert seen == [[0]], "3 waiting items < 1 busy runner x 4: no second transaction"
    more = asyncio.ensure_future(group.submit(4))
    for _ in range(3):
        await asyncio.sleep(0)
    assert seen == [[0], [1, 2, 3, 4]], "4 waiting items start the second runner with all of them"
    release.set()
    assert await asyncio.gather(first, *few, more) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        GroupCommit(run, max_batch=1, max_runners=1, spawn_queue=0)


async def test_an_item_queued_right_after_the_last_runner_finished_is_served() -> None:
    """The caller answered by a runner's last batch submits again before that runner's task is
    reaped: the item must start a runner (a count kept until the task ends would strand it)."""

    async def run(items: Any) -> list[Any]:
        return list(items)

    group: GroupCommit[int, int] = GroupCommit(run, max_batch=8, max_runners=2, spawn_queue=8)
    assert await group.submit(1) == 1
    async with asyncio.timeout(scaled(5)):
        assert await group.submit(2) == 2


class _Clock:
    """The arrival clock of a GroupCommit under test: moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _ticks(n: int = 4) -> None:
    for _ in range(n):  # submit, the runner task, its wait or its run
        await asyncio.sleep(0)


async def _concurrent(group: GroupCommit[int, int], items: range) -> list[int]:
    """Submit ``items`` in one loop tick: callers waiting together (one batch, no wait)."""
    return list(await asyncio.gather(*(group.submit(i) for i in items)))


async def test_commit_delay_waits_for_the_items_the_arrival_rate_promises() -> None:
    """Concurrent callers arriving 1 ms apart and a delay that never expires here: a runner about
    to take a batch waits until ``wanted()`` items are queued (capped by spawn_queue), then runs
    them as one batch; no second runner starts for the items it waits for."""
    seen: list[list[int]] = []
    observed: list[int] = []

    async def run(items: Any) -> list[Any]:
        seen.append(list(items))
        return list(items)

    clock = _Clock()
    group: GroupCommit[int, int] = GroupCommit(
        run, max_batch=64, max_runners=3, spawn_queue=4, delay=3600, observe=observed.append, clock=clock
    )
    assert group.wanted() == 1, "no rate measured yet: no wait"
    assert await _concurrent(group, range(8)) == list(range(8)), "8 queued >= 4 wanted: no wait"
    assert seen == [list(range(8))] and group.concurrency == 7
    pending = []
    for i in range(10, 14):
        clock.now += 0.001
        pending.append(asyncio.ensure_future(group.submit(i)))
        await _ticks()
        if i < 13:
            assert seen == [list(range(8))], f"{i - 9} of 4 wanted items queued: the runner waits"
            assert len(group._runners) == 1, "no second runner for the awaited items"
    assert group.wanted() == 4
    assert seen == [list(range(8)), [10, 11, 12, 13]] and observed == [8, 4]
    assert await asyncio.gather(*pending) == [10, 11, 12, 13]


async def test_commit_delay_never_holds_a_sequential_caller() -> None:
    """A caller that sends its next item only after its answer never waits, however high its rate
    (0.1 ms apart here, with a delay that would never expire): no item is ever outstanding when
    the next arrives, so no batch can be promised."""

    async def run(items: Any) -> list[Any]:
        return list(items)

    clock = _Clock()
    group: GroupCommit[int, int] = GroupCommit(run, max_batch=64, max_runners=3, delay=3600, clock=clock)
    async with asyncio.timeout(scaled(5)):
        for i in range(40):
            clock.now += 0.0001
            assert await group.submit(i) == i
    assert group.gap < 0.001 and group.wanted() == 1


async def test_commit_delay_never_holds_a_lone_item_after_an_idle_gap() -> None:
    """Concurrent callers 0.1 ms apart make a runner wait for the next item; after an idle gap
    that lifts the mean gap above the delay, a lone item starts at once."""
    seen: list[list[int]] = []

    async def run(items: Any) -> list[Any]:
        seen.append(list(items))
        return list(items)

    clock = _Clock()
    group: GroupCommit[int, int] = GroupCommit(
        run, max_batch=64, max_runners=3, spawn_queue=2, delay=3600, clock=clock
    )
    await _concurrent(group, range(3))
    clock.now += 0.0001
    first = asyncio.ensure_future(group.submit(4))
    await _ticks()
    assert seen == [[0, 1, 2]] and group.wanted() == 2, "a high rate: the runner waits for one more"
    clock.now += 0.0001
    assert await asyncio.gather(first, group.submit(5)) == [4, 5]
    assert seen == [[0, 1, 2], [4, 5]]
    clock.now += 100_000  # idle: the mean gap (1/8 of this) exceeds the delay
    async with asyncio.timeout(scaled(5)):
        assert await group.submit(9) == 9
    assert group.wanted() == 1 and seen[-1] == [9]


async def test_commit_delay_ends_at_its_bound_when_the_promised_items_do_not_come() -> None:
    """The wait is bounded by ``delay``: a rate that stops leaves the waiting item to run alone."""

    async def run(items: Any) -> list[Any]:
        return list(items)

    clock = _Clock()
    group: GroupCommit[int, int] = GroupCommit(run, max_batch=64, max_runners=1, delay=0.001, clock=clock)
    await _concurrent(group, range(16))
    clock.now += 0.0001
    async with asyncio.timeout(scaled(5)):
        assert await group.submit(99) == 99  # more items wanted; none comes
    assert group.wanted() > 1 and list(group.batch_sizes) == [16, 1]
    with pytest.raises(ValueError):
        GroupCommit(run, max_batch=1, max_runners=1, delay=-1)


async def test_outbox_append_many_writes_exactly_the_rows_of_append(h: Harness) -> None:
    from status_api.storage.outbox import OutboxMessage

    msgs = [
        OutboxMessage("task_user:t1/u1", "USER_SUMMARY", {"v": 1}, 0),
        OutboxMessage("c2", "TASK_DETAIL", {}, 10),
    ]
    now = h.clock()
    keep = [
        "aggregate_type", "aggregate_version", "channel", "projection", "payload", "status", "priority",
        "available_at", "attempts", "created_at",
    ]  # fmt: skip
    async with h.comp.engine.begin() as conn:
        await write.append_outbox_version(conn, "a", 1, msgs, now)
        await write.append_outbox_version(conn, "a", 4, msgs, now)
        await write.append_outbox(conn, [("b", 1, msgs, now), ("b", 4, msgs, now)])
    rows = await h.outbox_rows()
    one = [{k: r[k] for k in keep} for r in rows if r["aggregate_id"] == "a"]
    many = [{k: r[k] for k in keep} for r in rows if r["aggregate_id"] == "b"]
    assert one == many and len(one) == 4
    async with h.comp.engine.begin() as conn:
        await conn.execute(task_outbox.delete())  # the harness validates real projections at teardown
