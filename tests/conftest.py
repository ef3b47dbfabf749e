"""Shared fixtures: URLs of the real Redis and MariaDB that scripts/test.sh starts.

A bare ``pytest`` without those servers skips the ``redis``/``mysql`` tests; under
``TASKCAST_TEST_REQUIRE_SERVICES=1`` (set by ``make test`` and CI) a missing server is a failure.

Per-test time limits are bounds, not expectations: every test without its own ``timeout`` marker
gets the ini's ``timeout`` (property-based tests, which generate hundreds of examples, get
``HYPOTHESIS_TIMEOUT_SECONDS``), scaled by ``TASKCAST_TEST_TIME_SCALE`` like every wait.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from taskcast.dev import procs
from tests.support import leaks, suite
from tests.support.waiting import scaled

HYPOTHESIS_TIMEOUT_SECONDS = 600.0

# Hypothesis's own clocks are wall-clock assertions: a 200 ms deadline per example and a "too slow"
# health check on data generation both fail a correct test on a loaded machine. The suite bounds
# time with pytest-timeout (scaled) instead; a test's own ``@settings`` still wins for what it sets.
settings.register_profile(
    "taskcast", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("taskcast")


def timeout_bound(base: float, marked: float | None, hypothesis_test: bool) -> float:
    """A test's pytest-timeout limit: the largest of the ini's ``timeout``, its own ``timeout``
    marker and (property-based tests) ``HYPOTHESIS_TIMEOUT_SECONDS``, scaled. A marker may raise the
    bound, never lower it: the first test of a module also pays for its module fixtures (whole
    topologies), and a loaded machine is slow, not broken. 0 = no limit."""
    limit = max(base, marked or 0.0, HYPOTHESIS_TIMEOUT_SECONDS if hypothesis_test else 0.0)
    return scaled(limit) if limit > 0 else 0.0


def _fixture_modules(item: pytest.Item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) if info is not None else {}
    return {getattr(d.func, "__module__", "") for fixturedefs in defs.values() for d in fixturedefs}


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker hands out listening ports from a range of its own (``free_port``), so
    two workers never pick the same port before either binds it. ``TASKCAST_TEST_LEAKS=1``
    charges a leaked socket to the test that leaked it (tests/support/leaks.py)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 0:
        lo, hi = procs.PORT_RANGE
        width = (hi - lo) // count
        start = lo + int(worker[2:]) * width
        os.environ[procs.PORT_RANGE_ENV] = f"{start}-{start + width}"
    if leaks.enabled():
        config.pluginmanager.register(leaks.CollectAfterEachTest(), "taskcast-leaks")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scaled time limits; the ``process`` and ``services`` markers (tests/support/suite.py); under
    pytest-xdist, whole files longest first (tests/durations.json)."""
    base = float(config.getini("timeout") or 0)
    for item in items:
        module = getattr(getattr(item, "module", None), "__name__", "")
        if suite.starts_processes(module, _fixture_modules(item)):
            item.add_marker(pytest.mark.process)
        if suite.needs_services(item.fixturenames, (m.name for m in item.iter_markers())):
            item.add_marker(pytest.mark.services)
        marker = item.get_closest_marker("timeout")
        marked = float(marker.args[0] if marker.args else marker.kwargs.get("timeout", 0)) if marker else None
        hypothesis_test = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
        limit = timeout_bound(base, marked, hypothesis_test)
        if limit > 0:
            item.add_marker(pytest.mark.timeout(limit), append=False)  # first: the closest marker wins
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = suite.order_by_duration(items, suite.load_durations())


QUICK_ENV = "TASKCAST_TEST_QUICK"
"""Set by ``make test-quick``: a test that starts a process anyway fails, naming the classifier."""


def refuse_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until ``monkeypatch`` undoes it, starting a process raises (``asyncio``'s subprocesses too:
    they are ``subprocess.Popen`` underneath)."""

    def refuse(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        raise AssertionError(
            "a test selected by `make test-quick` started a process: tests/support/suite.py "
            "did not see how it does (add the name to PROCESS_NAMES)"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(autouse=True)
def _quick_tests_start_no_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if os.environ.get(QUICK_ENV) == "1":
        refuse_processes(monkeypatch)
    yield


def _service_url(var: str) -> str:
    url = os.environ.get(var, "")
    if not url:
        if os.environ.get("TASKCAST_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{var} is not set but TASKCAST_TEST_REQUIRE_SERVICES=1")
        pytest.skip(f"{var} not set (run `make test` to start the service)")
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    return _service_url("TASKCAST_TEST_REDIS_URL")


@pytest.fixture(scope="session")
def mysql_url() -> str:
    return _service_url("TASKCAST_TEST_MYSQL_URL")
