"""Relay fixtures: a MariaDB database of our own per test session (rows deleted before each test)
and one shared real gateway process (tests use fresh task ids, so channels never collide)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import create_engine
from status_api.storage.tables import task_outbox
from tests.helpers.mysql_db import schema_database
from tests.relay.harness import GATEWAY_CONFIG
from tests.support import GatewayProcess


@pytest.fixture(scope="session")
def relay_db_url(mysql_url: str) -> Iterator[str]:
    """A throwaway database with the Status API schema, for this pytest session only."""
    with schema_database(mysql_url, "taskcast_relay") as url:
        yield url


@pytest.fixture
async def engine(relay_db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(relay_db_url, pool_size=10)
    async with eng.begin() as conn:
        await conn.execute(task_outbox.delete())
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(GATEWAY_CONFIG, tmp_path_factory.mktemp("relay-gw")).start()
    yield gw
    gw.terminate()


@pytest.fixture
def own_gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway only this test uses (it may stop and restart it)."""
    gw = GatewayProcess(GATEWAY_CONFIG, tmp_path / "gw").start()
    yield gw
    gw.terminate()
