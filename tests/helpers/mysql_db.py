"""A throwaway MariaDB database with the Status API schema, for one pytest session."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from status_api.storage.database import create_engine, init_db


@contextmanager
def schema_database(server_url: str, prefix: str) -> Iterator[str]:
    """Create ``<prefix>_<random>`` on the server, apply the schema, yield its URL, drop it."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    server = sa.make_url(server_url)

    async def admin(sql: str) -> None:
        eng = create_engine(server.render_as_string(hide_password=False))
        async with eng.begin() as conn:
            await conn.exec_driver_sql(sql)
        await eng.dispose()

    async def schema(url: str) -> None:
        eng = create_engine(url)
        await init_db(eng)
        await eng.dispose()

    asyncio.run(admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        asyncio.run(schema(url))
        yield url
    finally:
        asyncio.run(admin(f"DROP DATABASE `{name}`"))
