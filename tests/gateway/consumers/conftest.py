"""The consumer tests' brokers: one PostgreSQL and one nats-server per session (per xdist
worker), started by tests/helpers/brokers.py; Redis is the suite's shared one (``redis_url``).
Each test isolates itself by table, stream and JetStream stream names of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.brokers import nats_server, postgres_server


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    with nats_server() as url:
        yield url
