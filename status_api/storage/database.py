"""Engine construction and ``init-db``: one place that knows the SQLite/MySQL differences.

* MySQL/MariaDB (asyncmy): READ COMMITTED (no gap locks between concurrent reporters); no pre-ping
  (one round trip less per transaction), connections recycled hourly; a per-connection prepared
  statement cache, which lets asyncmy send an executemany UPDATE (the ingest group commit's task and
  step writes) to MariaDB as ONE ``COM_STMT_BULK_EXECUTE`` instead of one round trip per row.
* SQLite (aiosqlite): WAL, foreign keys, and ``BEGIN IMMEDIATE`` so that a write transaction holds
  the database lock from its first statement — SQLite has no ``SELECT … FOR UPDATE`` and would
  otherwise let two transactions read the same task version.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from status_api.storage.tables import metadata

#: MySQL error codes worth retrying the whole transaction for: deadlock, lock wait timeout.
_RETRYABLE_MYSQL = {1205, 1213}
#: Prepared statements asyncmy keeps per connection (only executemany uses them).
_STMT_CACHE_SIZE = 32
#: Bounds on waiting for MariaDB/MySQL: a hung or blackholed server must become a coded 503, not a
#: request that never answers (issue 10). A read covers one statement, lock waits included.
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 10.0


def _dumps(value: Any) -> str:
    """JSON columns are encoded with orjson (a few µs instead of tens); anything orjson refuses
    (an int beyond 64 bits, say) falls back to the standard library."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value)


def create_engine(
    url: str, *, pool_size: int = 10, max_overflow: int = 20, echo: bool = False
) -> AsyncEngine:
    """Create the async engine for ``url`` (``sqlite+aiosqlite:///file.db`` or ``mysql+asyncmy://…``)."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        engine = create_async_engine(
            url,
            echo=echo,
            connect_args={"timeout": 30},
            json_serializer=_dumps,
            json_deserializer=orjson.loads,
        )

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_async_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=3600,
        isolation_level="READ COMMITTED",
        json_serializer=_dumps,
        json_deserializer=orjson.loads,
        connect_args=(
            {
                "stmt_cache_size": _STMT_CACHE_SIZE,
                "connect_timeout": CONNECT_TIMEOUT_SECONDS,
                "read_timeout": READ_TIMEOUT_SECONDS,
            }
            if u.get_driver_name() == "asyncmy"
            else {}
        ),
    )


def is_retryable(exc: BaseException) -> bool:
    """True for transient lock conflicts (deadlock, lock wait timeout, SQLite busy)."""
    orig = getattr(exc, "orig", None)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _RETRYABLE_MYSQL:
        return True
    return "database is locked" in str(exc)


def _upgrade(sync_conn: sa.Connection) -> list[str]:
    actions: list[str] = []
    insp = sa.inspect(sync_conn)
    existing = set(insp.get_table_names())
    for table in metadata.sorted_tables:
        if table.name not in existing:
            table.create(sync_conn)
            actions.append(f"created table {table.name}")
            continue
        have = {c["name"] for c in insp.get_columns(table.name)}
        for col in table.columns:
            if col.name in have:
                continue
            spec = sa.schema.CreateColumn(col).compile(dialect=sync_conn.dialect)
            if not col.nullable and col.server_default is None:
                # An additive upgrade can only add NOT NULL columns that have a default.
                raise RuntimeError(f"cannot add NOT NULL column {table.name}.{col.name} without a default")
            sync_conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {spec}"))
            actions.append(f"added column {table.name}.{col.name}")
        have_ix = {ix["name"] for ix in insp.get_indexes(table.name)}
        for ix in table.indexes:
            if ix.name not in have_ix:
                ix.create(sync_conn)
                actions.append(f"created index {ix.name}")
    return actions


async def init_db(engine: AsyncEngine) -> list[str]:
    """Create missing tables, columns and indexes (idempotent, additive). Returns what it did."""
    async with engine.begin() as conn:
        return await conn.run_sync(_upgrade)


async def drop_all(conn: AsyncConnection) -> None:
    await conn.run_sync(metadata.drop_all)
