"""When the idle loops claim (relay/wakeups.py, docs/relay.md "Claim coverage", "Claim spacing"):
pure scheduling, no database; the clock is injected, no test waits on time.

Invariants: a wake-up resolves one idle loop, which then covers every later wake-up until its
claim (absorbed, counted), except a ``backlog`` one; the pending flag covers the same way; a woken
claim starts at least ``claim_spacing_ms`` after the previous one, never after a full claim, and
at once when the previous woken claim is older than the spacing.
"""

from __future__ import annotations

import asyncio

import pytest

from relay.config import build_config
from relay.metrics import RelayMetrics
from relay.wakeups import Wakeups


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _wakeups(clock: Clock, **overrides: object) -> Wakeups:
    cfg = build_config(
        {"database_url": "sqlite+aiosqlite:///unused.db", "gateway_api_url": "http://x/api", **overrides}
    )
    return Wakeups(cfg, RelayMetrics(), clock)


def _absorbed(w: Wakeups) -> float:
    return float(w.metrics.wakeups_absorbed._value.get())


async def test_a_woken_loop_covers_the_wake_ups_until_its_claim_but_not_a_backlog_one() -> None:
    w = _wakeups(Clock())
    loop = asyncio.get_running_loop()
    first: asyncio.Future[bool] = loop.create_future()
    second: asyncio.Future[bool] = loop.create_future()
    w.sleepers.extend([first, second])
    w.wake("redis")
    assert first.result() is True and w.covering == 1
    w.wake("redis")
    w.wake("due")
    assert not second.done() and _absorbed(w) == 2  # the first loop's claim comes after them
    w.wake("backlog")
    assert second.result() is True and w.covering == 2  # a backlog adds a loop
    stop = asyncio.Event()
    await w.before_claim(stop, True, backlog=True)
    await w.before_claim(stop, True, backlog=True)
    assert w.covering == 0
    w.wake("redis")  # no loop covers any more: nobody idle, so the pending flag
    assert w.pending and _absorbed(w) == 2
    w.wake("redis")  # the flag covers too
    assert _absorbed(w) == 3
    assert await w.idle(stop) is True  # the next loop to go idle takes the flag
    assert w.covering == 1 and not w.pending


async def test_woken_claims_are_spaced_but_never_after_a_full_claim() -> None:
    clock = Clock(100.0)
    w = _wakeups(clock, claim_spacing_ms=10)
    stop = asyncio.Event()
    stop.set()  # the waits return at once; the slots they would wait for are what is checked
    for _ in range(40):  # hints every millisecond: the average gap falls below the spacing
        clock.now += 0.001
        w.wake("redis")
    assert w.hint_gap < 0.010
    clock.now = 100.0
    for _ in range(4):
        w.covering += 1
    await w.before_claim(stop, True, backlog=False)
    assert w._slot_at == pytest.approx(100.010)  # the first claim starts at once
    clock.now = 100.002
    await w.before_claim(stop, True, backlog=False)
    assert w._slot_at == pytest.approx(100.020)  # the second waits for 100.010
    await w.before_claim(stop, True, backlog=True)
    assert w._slot_at == pytest.approx(100.020)  # a claim after a full one is not spaced
    clock.now = 101.0
    await w.before_claim(stop, True, backlog=False)
    assert w._slot_at == pytest.approx(101.010)  # the previous slot is long past: at once
    assert w.covering == 0
    await w.before_claim(stop, False, backlog=False)  # a poll: not woken, not spaced
    assert w._slot_at == pytest.approx(101.010) and w.covering == 0


async def test_claim_spacing_zero_never_waits() -> None:
    w = _wakeups(Clock(), claim_spacing_ms=0)
    w.covering = 2
    stop = asyncio.Event()
    await w.before_claim(stop, True, backlog=False)
    await w.before_claim(stop, True, backlog=False)
    assert w._slot_at == 0.0 and w.covering == 0


async def test_a_relay_with_rare_hints_never_waits_even_for_a_burst() -> None:
    """Spacing applies only while the hints' average gap is below it: hints 100 ms apart with a
    burst of three in a millisecond (two commits and a due time) never make a claim wait."""
    clock = Clock(100.0)
    w = _wakeups(clock, claim_spacing_ms=20)
    for _ in range(20):
        clock.now += 0.1
        w.wake("redis")
    for _ in range(3):
        clock.now += 0.0005
        w.wake("redis")
    assert w.hint_gap > 0.020
    w.covering = 2
    stop = asyncio.Event()
    await w.before_claim(stop, True, backlog=False)
    await w.before_claim(stop, True, backlog=False)  # 0 s after the previous one: still no wait
    assert w._slot_at == pytest.approx(clock.now + 0.020)


def _polls(w: Wakeups) -> float:
    return float(w.metrics.polls._value.get())


async def test_the_poll_claims_only_when_no_claim_of_the_relay_started_for_the_bound() -> None:
    """The safety-net poll is relay-wide: with 4 loops and a 2 s interval the relay claims when no
    claim started for 0.5 s, so a lost hint waits at most 0.5 s (as 4 staggered loops), but a
    relay that claims for hints never polls on top of them. The timer is always armed for the
    bound after the latest claim's start."""
    clock = Clock(100.0)
    w = _wakeups(clock, concurrency=4, poll_interval_seconds=2.0)
    assert w.poll_bound_seconds == 0.5
    loop = asyncio.get_running_loop()
    sleeper: asyncio.Future[bool] = loop.create_future()
    w.sleepers.append(sleeper)
    w.start_polls(0.0)
    try:
        for _ in range(10):  # hint claims every 0.3 s: never a poll
            clock.now += 0.3
            w.claim_starts()
            w._poll()
            assert not sleeper.done() and _polls(w) == 0
            assert w._poll_timer is not None
            assert w._poll_timer.when() - loop.time() <= 0.5 + 1e-3  # claimed_at + bound
        clock.now += 0.5  # no claim for the bound: one idle loop claims, not lingering
        w._poll()
        assert sleeper.result() is True and w.covering == 1 and _polls(w) == 1
        w._poll()  # the same instant again: that loop's claim is coming, no second poll
        assert _polls(w) == 1
        w.covering = 0
        clock.now += 0.5  # every loop busy: the next one to go idle claims at once
        w._poll()
        assert w.pending and _polls(w) == 2
    finally:
        w.close()
    assert w._poll_timer is None


async def test_a_claim_scans_for_expired_leases_once_per_poll_bound() -> None:
    """Hint claims scan too, at most once per bound: expired leases are found within the bound
    whether the relay claims for hints or polls (a poll always scans)."""
    clock = Clock(100.0)
    w = _wakeups(clock, concurrency=2, poll_interval_seconds=1.0)
    w.start_polls(0.5)
    try:
        scans = []
        for _ in range(16):  # a claim every 0.125 s for 2 s
            clock.now += 0.125
            scans.append(w.claim_starts().scan)
        assert [i for i, scan in enumerate(scans) if scan] == [3, 7, 11, 15]  # 100.5, 101, 101.5, 102
        clock.now += 0.5
        w.wake("redis")  # a wake-up since the last claim: a scanning claim, but no look first
        assert w.claim_starts() == (True, False)
        clock.now += 0.5
        w._poll()  # no claim for the bound: the poll, which scans
        assert w.pending and w.claim_starts() == (True, True)  # scans, and may look first
    finally:
        w.close()


async def test_a_claim_woken_only_by_due_times_may_look_first() -> None:
    """A held-back row's due time is often already served (the claim of its commit's hint, or
    another relay that saw the same time, took the row): a claim woken by due times alone may
    look before it claims; one with any other wake-up since the previous claim may not."""
    clock = Clock(100.0)
    w = _wakeups(clock, concurrency=2, poll_interval_seconds=1.0)
    w.start_polls(0.5)
    try:
        assert w.claim_starts() == (False, False)
        w.wake("due")
        assert w.claim_starts() == (False, True)  # due only: look first, no scan
        w.wake("due")
        w.wake("redis")
        assert w.claim_starts() == (False, False)  # a hint came too: claim
        clock.now += 0.5
        w.wake("due")
        assert w.claim_starts() == (True, True)  # a scanning claim, due only: look first
        w.wake("backlog")
        assert w.claim_starts() == (False, False)
    finally:
        w.close()


async def test_the_poll_bound_follows_the_hint_listener() -> None:
    """Subscribed: ``wake_poll_interval_seconds / concurrency``; the moment it is lost the poll is
    re-armed at the fast bound after the latest claim (and the relay claims once at once)."""
    clock = Clock(100.0)
    w = _wakeups(clock, concurrency=4, poll_interval_seconds=0.2, wake_poll_interval_seconds=2.0)
    loop = asyncio.get_running_loop()
    w.start_polls(0.0)
    try:
        w.hints_up(True)
        assert w.poll_bound_seconds == 0.5
        w.claim_starts()
        assert w._poll_timer is not None and w._poll_timer.when() - loop.time() > 0.4
        w.hints_up(False)
        assert w.poll_bound_seconds == 0.05 and w.pending
        assert w._poll_timer is not None and w._poll_timer.when() - loop.time() <= 0.05 + 1e-3
    finally:
        w.close()
