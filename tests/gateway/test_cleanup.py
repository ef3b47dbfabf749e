"""``Cleanup`` (gateway/cleanup.py), in process with a fake clock: every step runs whatever the
others did; an expected failure is one line without a traceback, a bug one line with it, each at
most once per step and interval; a cancellation is never swallowed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.cleanup import Cleanup
from gateway.engine.base import EngineError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _fails(exc: Exception) -> None:
    raise exc


async def test_every_step_runs_and_failures_are_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    cleanup = Cleanup(logging.getLogger("tests.cleanup"), expected=(EngineError,), interval=10.0, clock=clock)
    done: list[int] = []

    async def ok(n: int) -> None:
        done.append(n)

    with caplog.at_level(logging.INFO, logger="tests.cleanup"):
        for n in range(3):
            assert not await cleanup.step("presence removal", _fails(EngineError("redis down")))
            assert await cleanup.step("leave message", ok(n))
        clock.now += 10.0
        assert not await cleanup.step("presence removal", _fails(EngineError("redis down")))
        assert not cleanup.call("hook", lambda: 1 / 0)

    assert done == [0, 1, 2]
    assert cleanup.failures == 5
    lines = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        (logging.WARNING, "cleanup: presence removal failed: EngineError: redis down", False),
        (
            logging.WARNING,
            "cleanup: presence removal failed: EngineError: redis down (2 more like this in the last 10 s)",
            False,
        ),
        (logging.ERROR, "cleanup: hook failed", True),
    ]


async def test_a_cancelled_step_is_not_swallowed() -> None:
    cleanup = Cleanup(logging.getLogger("tests.cleanup"))
    started = asyncio.Event()

    async def hangs() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(cleanup.step("hub removal", hangs()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleanup.failures == 0
