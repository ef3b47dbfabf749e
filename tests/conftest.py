"""Shared fixtures: URLs of the real Redis and MariaDB that scripts/test.sh starts.

A bare ``pytest`` without those servers skips the ``redis``/``mysql`` tests; under
``TASKCAST_TEST_REQUIRE_SERVICES=1`` (set by ``make test`` and CI) a missing server is a failure.
"""

from __future__ import annotations

import os

import pytest


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
