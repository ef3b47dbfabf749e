"""The bounded stop shared by the gateway, the Status API and the relay (httpwire/shutdown.py): a
loop that swallows its cancellation and a close step that never ends are abandoned when the
budget is up — named in one warning line — instead of holding the process forever; what ends in
time is awaited and nothing is logged."""

from __future__ import annotations

import asyncio
import logging

import pytest

from httpwire.shutdown import Loops, StopBudget
from tests.support import scaled, wait_until

BUDGET_SECONDS = 0.2
BOUND = 10.0  # a stop that is not abandoned hangs: the scaled bound fails the test instead

log = logging.getLogger("tests.shutdown")


async def stubborn(started: asyncio.Event, released: asyncio.Event) -> None:
    """A loop that swallows every cancellation (a client library that turns it into an error and
    a retry loop around it) until ``released``."""
    started.set()
    while not released.is_set():
        try:
            await released.wait()
        except asyncio.CancelledError:
            continue


async def forever() -> None:
    await asyncio.Event().wait()


def budget() -> StopBudget:
    stop = StopBudget(BUDGET_SECONDS, option="shutdown.timeout", logger=log)
    stop.begin()
    return stop


async def test_a_loop_that_swallows_its_cancellation_is_abandoned_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, released = asyncio.Event(), asyncio.Event()
    loops = Loops(log)
    loops.add("obedient", forever())
    loops.add("stubborn", stubborn(started, released))
    await loops.start()
    await started.wait()
    stop = budget()
    try:
        async with asyncio.timeout(scaled(BOUND)):
            await loops.stop(stop)
        stop.report()
        assert stop.abandoned == ["background loops not ending when cancelled: stubborn"]
        lines = [r.getMessage() for r in caplog.records if r.name == log.name]
        assert lines == [
            "shutdown: shutdown.timeout (0.2s) exceeded; abandoned: background loops not ending when "
            "cancelled: stubborn"
        ]
    finally:
        released.set()  # the abandoned loop ends; the test leaves nothing running
        await asyncio.sleep(0)


async def test_a_close_step_that_never_ends_is_abandoned_and_the_next_one_runs() -> None:
    stop = budget()
    closed = asyncio.Event()

    async def close() -> None:
        closed.set()

    async with asyncio.timeout(scaled(BOUND)):
        assert not await stop.step("closing the broker", forever())
        assert await stop.step("closing presence", close())  # past the budget: the floor
    assert closed.is_set()
    assert stop.abandoned == ["closing the broker"]


async def test_a_task_told_to_stop_gets_the_budget_then_is_cancelled() -> None:
    stop = budget()
    task = asyncio.create_task(forever())
    async with asyncio.timeout(scaled(BOUND)):
        assert await stop.wait("the reconciler's pass", task)  # cancelled after the budget: ended
    assert task.cancelled() and stop.abandoned == []


async def test_a_stop_within_the_budget_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    loops = Loops(log)
    loops.add("obedient", forever())
    await loops.start()
    stop = StopBudget(scaled(BOUND), option="shutdown.timeout", logger=log)
    stop.begin_lifespan()
    await loops.stop(stop)
    assert await stop.step("closing", asyncio.sleep(0))
    assert await stop.cancel("a listener", asyncio.create_task(forever()))
    stop.report()
    assert stop.abandoned == [] and not [r for r in caplog.records if r.name == log.name]


async def test_a_failing_loop_stops_the_others_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def failing() -> None:
        raise RuntimeError("a bug")

    loops = Loops(log)
    loops.add("obedient", forever())
    loops.add("failing", failing())
    await loops.start()
    await wait_until(
        lambda: any("a loop failed" in r.getMessage() for r in caplog.records), BOUND, "the failure logged"
    )
    await loops.stop(budget())  # already ended: nothing to wait for
