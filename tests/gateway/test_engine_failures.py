"""``FailureRun`` (gateway/engine/failures.py), in process with a fake clock: one log line per
state change, a reminder at most every ``remind_every_seconds``, the count on recovery."""

from __future__ import annotations

import logging

import pytest

from gateway.engine.failures import FailureRun


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def run(clock: Clock) -> FailureRun:
    return FailureRun("redis r1", logging.getLogger("tests.failures"), now=clock, remind_every_seconds=60)


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records]


def test_a_run_of_failures_logs_its_start_and_its_end_with_the_count(
    run: FailureRun, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tests.failures"):
        for n in range(1000):
            run.failed(f"ConnectionError: refused #{n}")
            clock.now += 0.01
        assert run.failing and run.failures == 1000
        run.succeeded()
        run.succeeded()

    assert messages(caplog) == [
        (
            logging.ERROR,
            "redis r1: failing: ConnectionError: refused #0 "
            "(further failures are counted, not logged, until it recovers)",
        ),
        (logging.INFO, "redis r1: recovered after 1000 failures in 10.0 s"),
    ]
    assert not run.failing and run.failures == 0


def test_a_long_run_is_reminded_at_most_once_per_interval(
    run: FailureRun, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tests.failures"):
        for _ in range(150):  # one failure a second for 150 s
            run.failed("timeout")
            clock.now += 1.0

    reminders = [m for _, m in messages(caplog) if "still failing" in m]
    assert reminders == [
        "redis r1: still failing: 61 failures in 60 s (60 since the last report), last: timeout",
        "redis r1: still failing: 121 failures in 120 s (60 since the last report), last: timeout",
    ]


def test_success_without_failures_logs_nothing_and_a_new_run_logs_again(
    run: FailureRun, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tests.failures"):
        run.succeeded()
        run.failed("a")
        run.succeeded()
        run.failed("b")

    assert [level for level, _ in messages(caplog)] == [logging.ERROR, logging.INFO, logging.ERROR]


def test_only_the_first_failure_of_a_run_carries_a_traceback(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    run = FailureRun("decoding", logging.getLogger("tests.failures"), level=logging.WARNING, now=clock)
    with caplog.at_level(logging.INFO, logger="tests.failures"):
        for n in range(3):
            try:
                raise ValueError(f"bad {n}")
            except ValueError as exc:
                run.failed(str(exc), exc)

    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is not None
