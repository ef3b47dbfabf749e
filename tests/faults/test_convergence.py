"""Unit tests of the convergence checker: each invariant catches its violation and accepts the
legitimate look-alike (a flagged gap, a gate-dropped duplicate, a re-read snapshot)."""

from __future__ import annotations

import pytest

from tests.helpers.convergence import Checker, ClientLog, Outbox, Streams, Truth, task_version_of

CH = "task_user:t1/u1"


def pub(offset: int, task: str, version: int) -> dict[str, object]:
    return {"offset": offset, "data": {"taskId": task, "version": version}}


def subscribed(log: ClientLog, epoch: str = "e1", offset: int = 0, **kw: object) -> None:
    log.subscribed(CH, epoch=epoch, offset=offset, **kw)  # type: ignore[arg-type]


def test_task_version_of_reads_summary_detail_and_raw_json() -> None:
    assert task_version_of({"kind": "task.summary", "task": {"id": "a", "version": 3}}) == ("a", 3)
    assert task_version_of({"taskId": "b", "version": 2}) == ("b", 2)
    assert task_version_of(b'{"taskId": "c", "version": 1}') == ("c", 1)
    assert task_version_of("not json") is None
    assert task_version_of([1, 2]) is None


def test_contiguous_offsets_converge_cleanly() -> None:
    log = ClientLog("c")
    subscribed(log)
    for n in range(1, 4):
        assert log.publication(CH, pub(n, "a", n))
    checker = Checker(truth=Truth(final={"a": 3}, versions={"a": [1, 2, 3]}))
    assert checker.check_client(log, {(CH, "a"): 3}) == []


def test_unflagged_gap_is_a_silent_gap() -> None:
    log = ClientLog("c")
    subscribed(log)
    log.publication(CH, pub(1, "a", 1))
    log.publication(CH, pub(3, "a", 3))
    assert any("silent gap" in v for v in Checker().check_client(log))


def test_gap_after_recovered_false_is_flagged_and_snapshot_heals() -> None:
    log = ClientLog("c")
    subscribed(log)
    log.publication(CH, pub(1, "a", 1))
    subscribed(log, epoch="e2", offset=5, was_recovering=True, recovered=False)
    assert CH in log.flagged and log.unrecovered == 1
    log.publication(CH, pub(7, "a", 4))  # flagged: the client knows it must re-read
    log.snapshot(CH, {"a": 4, "b": 2})
    assert CH not in log.flagged
    log.publication(CH, pub(8, "a", 5))
    assert Checker().check_client(log, {(CH, "a"): 5, (CH, "b"): 2}) == []


def test_new_epoch_without_recovery_flags_the_channel() -> None:
    log = ClientLog("c")
    subscribed(log, offset=3)
    subscribed(log, epoch="e2", offset=0)
    log.publication(CH, pub(2, "a", 1))
    assert log.violations == []


def test_recovered_true_replays_contiguously_from_the_reply_offset() -> None:
    log = ClientLog("c")
    subscribed(log, offset=2)
    subscribed(
        log, offset=2, was_recovering=True, recovered=True, publications=[pub(3, "a", 3), pub(4, "a", 4)]
    )
    assert log.violations == [] and log.recovered == 1 and log.position[CH] == ("e1", 4)
    bad = ClientLog("bad")
    subscribed(bad, offset=2)
    subscribed(bad, offset=2, was_recovering=True, recovered=True, publications=[pub(4, "a", 3)])
    assert any("silent gap" in v for v in bad.violations)
    across = ClientLog("x")
    subscribed(across, offset=2)
    subscribed(across, epoch="e9", offset=0, was_recovering=True, recovered=True)
    assert any("across epochs" in v for v in across.violations)


def test_same_offset_twice_is_a_double_delivery_but_same_version_twice_is_gated() -> None:
    log = ClientLog("c")
    subscribed(log)
    log.publication(CH, pub(1, "a", 1))
    log.publication(CH, pub(1, "a", 1))
    assert any("delivered twice" in v for v in log.violations)
    relay_dup = ClientLog("d")
    subscribed(relay_dup)
    assert relay_dup.publication(CH, pub(1, "a", 1))
    assert not relay_dup.publication(CH, pub(2, "a", 1))  # a relay retry that slipped through
    assert relay_dup.duplicates == 1
    assert Checker().check_client(relay_dup, {(CH, "a"): 1}) == []


def test_old_version_after_newer_is_dropped_not_applied() -> None:
    log = ClientLog("c")
    subscribed(log)
    log.publication(CH, pub(1, "a", 2))
    assert not log.publication(CH, pub(2, "a", 1))
    assert log.applied == [(CH, "a", 2)]


def test_incomplete_client_and_invented_version_are_reported() -> None:
    log = ClientLog("c")
    subscribed(log)
    log.publication(CH, pub(1, "a", 1))
    log.publication(CH, pub(2, "a", 9))
    checker = Checker(truth=Truth(final={"a": 3, "b": 1}, versions={"a": [1, 2, 3]}))
    problems = checker.check_client(log, {(CH, "a"): 3, (CH, "b"): 1})
    assert any("never committed" in p for p in problems)
    assert any(f"{CH}/b at vNone" in p for p in problems)
    log.stayed = False
    assert not any("database says" in p for p in checker.check_client(log, {(CH, "b"): 1}))


def test_database_versions_must_be_one_to_n() -> None:
    assert Checker(truth=Truth(final={"a": 3}, versions={"a": [1, 2, 3]})).check_truth() == []
    problems = Checker(truth=Truth(final={"a": 4}, versions={"a": [1, 3, 4]})).check_truth()
    assert problems and "not 1..N" in problems[0]


def test_outbox_rows_must_all_be_published_and_expected_takes_the_newest() -> None:
    box = Outbox({(CH, "a", 1): "PUBLISHED", (CH, "a", 2): "PENDING", ("other", "b", 1): "PUBLISHED"})
    assert box.expected([CH]) == {(CH, "a"): 2}
    problems = Checker(outbox=box).check_outbox()
    assert problems == [f"outbox: {(CH, 'a', 2)} is PENDING, not PUBLISHED"]


def test_streams_must_be_contiguous_unique_and_under_their_meta() -> None:
    good = Streams(entries={CH: [(4, "a", 1), (5, "a", 2)]}, meta={CH: ("e", 5)})
    assert Checker(streams=good).check_streams() == []
    dup = Streams(entries={CH: [(1, "a", 1), (2, "a", 1)]}, meta={CH: ("e", 2)})
    assert "idempotency" in Checker(streams=dup).check_streams()[0]
    hole = Streams(entries={CH: [(1, "a", 1), (3, "a", 2)]}, meta={CH: ("e", 1)})
    problems = Checker(streams=hole).check_streams()
    assert any("not contiguous" in p for p in problems) and any("behind" in p for p in problems)


async def test_wait_converged_returns_the_healing_time_or_fails_with_what_is_missing() -> None:
    log = ClientLog("c")
    subscribed(log)
    log.publication(CH, pub(1, "a", 1))
    assert await Checker().wait_converged([log], {(CH, "a"): 1}, within=1) < 1
    with pytest.raises(AssertionError, match="not converged"):
        await Checker().wait_converged([log], {(CH, "a"): 2}, within=0.1)
    with pytest.raises(AssertionError, match="convergence violated"):
        Checker().assert_ok([log], {(CH, "a"): 2})
