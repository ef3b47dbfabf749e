"""gateway/log_limit.py: one line per key per interval, and the next says how many were held."""

from __future__ import annotations

import logging

import pytest

from gateway.log_limit import LogLimiter


def test_one_line_per_key_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = LogLimiter(logging.getLogger("test.log_limit"), interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.log_limit"):
        assert limiter.log(logging.WARNING, "a", "bad %s", 1)
        assert not any(limiter.log(logging.WARNING, "a", "bad %s", 2) for _ in range(99))
        assert limiter.log(logging.WARNING, "b", "other")  # keys are independent
        now[0] = 10.0
        assert limiter.log(logging.WARNING, "a", "bad %s", 3)
    assert [r.getMessage() for r in caplog.records] == [
        "bad 1",
        "other",
        "bad 3 (99 more like this in the last 10 s)",
    ]
    assert all(r.exc_info is None for r in caplog.records)
