"""Fixtures: every storage-touching test runs on SQLite (a temp file) and on MariaDB (a database of
its own per test session, rows deleted before each test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.database import create_engine, init_db
from status_api.storage.tables import metadata
from tests.helpers.mysql_db import schema_database
from tests.status_api.harness import FakeClock, Harness, build


@pytest.fixture(scope="session")
def mysql_db_url(mysql_url: str) -> Iterator[str]:
    """A throwaway database with the Status API schema, for this pytest session only."""
    with schema_database(mysql_url, "taskcast_sa") as url:
        yield url


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
