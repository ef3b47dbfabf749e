"""Relay fixtures: a MariaDB database of our own per test session (rows deleted before each test)
and one shared real gateway process (tests use fresh task ids, so channels never collide)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import create_engine
from status_api.storage.database import init_db
from status_api.storage.tables import task_outbox
from tests.helpers.gateway_proc import GatewayProcess
from tests.relay.harness import GATEWAY_CONFIG


@pytest.fixture(scope="session")
def relay_db_url(mysql_url: str) -> Iterator[str]:
    """A throwaway database with the Status API schema, for this pytest session only."""
    name = f"taskcast_relay_{uuid.uuid4().hex[:10]}"
    server = sa.make_url(mysql_url)

    async def admin(sql: str) -> None:
        eng = create_engine(server.render_as_string(hide_password=False))
        async with eng.begin() as conn:
            await conn.exec_driver_sql(sql)
        await eng.dispose()

    asyncio.run(admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
    url = server.set(database=name).render_as_string(hide_password=False)

    async def schema() -> None:
        eng = create_engine(url)
        await init_db(eng)
        await eng.dispose()

    asyncio.run(schema())
    yield url
    asyncio.run(admin(f"DROP DATABASE `{name}`"))


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
