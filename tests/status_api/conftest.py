"""Fixtures: every storage-touching test runs on SQLite (a temp file) and on MariaDB (a database of
its own per test session, rows deleted before each test)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.database import create_engine, init_db
from status_api.storage.tables import metadata
from tests.status_api.harness import FakeClock, Harness, build


@pytest.fixture(scope="session")
def mysql_db_url(mysql_url: str) -> Iterator[str]:
    """A throwaway database with the schema, for this pytest session only."""
    name = f"taskcast_sa_{uuid.uuid4().hex[:10]}"
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


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def db_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/status.db"
    return str(request.getfixturevalue("mysql_db_url"))


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(db_url, pool_size=5, max_overflow=70)
    if eng.dialect.name == "sqlite":
        await init_db(eng)
    else:
        async with eng.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                await conn.execute(table.delete())
    yield eng
    await eng.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def h(engine: AsyncEngine, clock: FakeClock) -> AsyncIterator[Harness]:
    harness = Harness(build(engine, clock), clock)
    await harness.service.load_registry_files()
    yield harness
    await harness.http.aclose()
    await harness.check_outbox_messages()
