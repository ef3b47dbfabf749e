"""The suite's per-test time limits (tests/conftest.py): a ``timeout`` marker may raise the ini's
bound but never lower it, and every limit is scaled by ``TASKCAST_TEST_TIME_SCALE``."""

from __future__ import annotations

import pytest

from tests.conftest import HYPOTHESIS_TIMEOUT_SECONDS, timeout_bound
from tests.support import scaled


def _limit(request: pytest.FixtureRequest) -> float:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    return float(marker.args[0])


@pytest.mark.timeout(5)
def test_a_lower_marker_gets_the_ini_bound_scaled(request: pytest.FixtureRequest) -> None:
    base = float(request.config.getini("timeout"))
    assert base > 5
    assert _limit(request) == scaled(base)


@pytest.mark.timeout(7200)
def test_a_higher_marker_is_kept_and_scaled(request: pytest.FixtureRequest) -> None:
    assert _limit(request) == scaled(7200)


def test_an_unmarked_test_gets_the_ini_bound_scaled(request: pytest.FixtureRequest) -> None:
    assert _limit(request) == scaled(float(request.config.getini("timeout")))


def test_bounds() -> None:
    assert timeout_bound(120, 60, False) == scaled(120)
    assert timeout_bound(120, None, True) == scaled(HYPOTHESIS_TIMEOUT_SECONDS)
    assert timeout_bound(0, None, False) == 0


def test_hypothesis_has_no_wall_clock_deadline_or_slowness_check() -> None:
    """Hypothesis's per-example deadline and its too-slow health check are timing assertions: off
    for the whole suite (tests/conftest.py), which bounds time with the scaled per-test timeout."""
    from hypothesis import HealthCheck, settings

    assert settings().deadline is None
    assert HealthCheck.too_slow in settings().suppress_health_check
