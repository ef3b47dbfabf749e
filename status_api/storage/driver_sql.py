"""The ingest batch's statements as SQL text handed to the driver: multi-row INSERTs and the
``WHERE key IN (…)`` reads.

On MariaDB/MySQL a batch's rows of one table go to the driver as ONE ``INSERT … VALUES (…), (…)``
(optionally ``ON DUPLICATE KEY UPDATE`` every non-key column given), whose text is rendered once per
(table, column set) and kept: no SQLAlchemy statement compile-cache lookup, no per-row parameter
processing by the compiled statement (a few µs per row each, the larger part of an ingest batch's
SQLAlchemy CPU). The rows are stored exactly as :func:`sqlalchemy.insert` stores them: JSON columns
are encoded with the engine's JSON serializer (a Python ``None`` in a JSON column is the JSON
``null``, SQLAlchemy's ``none_as_null=False`` default), every other value goes to the driver as
given. :func:`select_in` reads rows by key the same way (text rendered once per id count) and
processes them as SQLAlchemy's result does (JSON decoded, booleans). Other dialects (SQLite) run
the SQLAlchemy statement.

On MariaDB the statements run on the driver connection under the caller's ``AsyncConnection``
(the same connection, inside its open transaction), not through
:meth:`AsyncConnection.exec_driver_sql`: that bridge (a greenlet per statement, an execution
context, a cursor result) cost ~100 µs of CPU per statement, about three times the driver's own
work, and a batch runs ~9 statements. What it provided is kept: a driver error is raised as
SQLAlchemy's exception for it (:meth:`sqlalchemy.exc.DBAPIError.instance`: ``IntegrityError``,
``OperationalError`` with the driver's error as ``orig``, so the transaction retries on deadlocks
and integrity races are unchanged), a lost connection invalidates the pooled connection, and
``before_cursor_execute`` listeners see every statement (``loadtest/bench_capacity.py`` records the
floor's statements with them). The transaction itself (BEGIN, COMMIT, ROLLBACK) stays SQLAlchemy's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.database import json_dumps

#: (table name, columns, upsert) -> (SQL before the rows, one row's placeholders, SQL after the
#: rows, a row's values in column order, JSON columns' indexes).
_Rendered = tuple[str, str, str, Callable[[Mapping[str, Any]], tuple[Any, ...]], tuple[int, ...]]
_rendered: dict[tuple[str, tuple[str, ...], bool], _Rendered] = {}
_inserts: dict[str, sa.Insert] = {}

#: A statement's rows are cut into several statements past about this much text (the server's
#: ``max_allowed_packet`` is 16 MiB by default; the driver's own multi-row cut is 1 MB).
MAX_STATEMENT_BYTES = 1_000_000
#: What a row's non-JSON values may add to the statement (identifiers, codes, short texts, numbers).
_ROW_ALLOWANCE = 4096


def _render(table: sa.Table, columns: tuple[str, ...], upsert: bool) -> _Rendered:
    key = (table.name, columns, upsert)
    found = _rendered.get(key)
    if found is not None:
        return found
    names = ", ".join(f"`{c}`" for c in columns)
    head = f"INSERT INTO `{table.name}` ({names}) VALUES "
    tail = ""
    if upsert:
        keys = {c.name for c in table.primary_key.columns}
        tail = " ON DUPLICATE KEY UPDATE " + ", ".join(
            f"`{c}` = VALUES(`{c}`)" for c in columns if c not in keys
        )
    json_columns = tuple(i for i, c in enumerate(columns) if isinstance(table.c[c].type, sa.JSON))
    values = operator.itemgetter(*columns) if len(columns) > 1 else lambda row: (row[columns[0]],)
    found = _rendered[key] = (head, f"({', '.join(['%s'] * len(columns))})", tail, values, json_columns)
    return found


async def insert_rows(
    conn: AsyncConnection, table: sa.Table, rows: Sequence[Mapping[str, Any]], *, upsert: bool = False
) -> int:
    """Insert ``rows`` (non-empty; every row has the first row's keys) into ``table`` with one
    statement (several past :data:`MAX_STATEMENT_BYTES`); ``upsert``: rows whose key exists update
    every non-key column given instead (MariaDB/MySQL; on other dialects only plain inserts are
    supported). Returns the affected rows as MySQL counts them (2 per updated row of an upsert;
    -1 when the driver does not say)."""
    if conn.dialect.name not in ("mysql", "mariadb"):
        if upsert:
            raise ValueError("upsert needs MariaDB/MySQL")
        stmt = _inserts.get(table.name)
        if stmt is None:  # built once: a statement object memoizes its compiled-cache key
            stmt = _inserts[table.name] = sa.insert(table)
        return (await conn.execute(stmt, list(rows))).rowcount
    head, row_marks, tail, values, json_columns = _render(table, columns=tuple(rows[0]), upsert=upsert)
    affected = 0
    flat: list[Any] = []
    n = size = 0
    for row in rows:
        out = values(row)
        if json_columns:
            as_list = list(out)
            for i in json_columns:
                text = as_list[i] = json_dumps(as_list[i])
                size += len(text)
            out = tuple(as_list)
        flat += out
        n += 1
        size += _ROW_ALLOWANCE
        if size >= MAX_STATEMENT_BYTES:
            affected += await _execute(conn, head + ", ".join([row_marks] * n) + tail, flat)
            flat, n, size = [], 0, 0
    if n:
        affected += await _execute(conn, head + ", ".join([row_marks] * n) + tail, flat)
    return affected


async def _execute(conn: AsyncConnection, sql: str, params: list[Any]) -> int:
    """One statement through the driver (its rows' placeholders filled in by the driver)."""
    _, rowcount = await driver_execute(conn, sql, tuple(params))
    return rowcount


async def driver_execute(
    conn: AsyncConnection, sql: str, params: tuple[Any, ...], *, fetch: bool = False
) -> tuple[list[tuple[Any, ...]], int]:
    """MariaDB/MySQL: run ``sql`` (``%s`` placeholders) with ``params`` on the driver connection
    of ``conn``, inside its open transaction; returns the rows (when ``fetch``) and the affected
    row count. Errors, invalidation and cursor events as the module docstring says."""
    sync = conn.sync_connection
    if sync is None:
        raise sa.exc.ResourceClosedError("connection is closed")
    driver: Any = sync.connection.driver_connection
    cursor = driver.cursor()
    try:
        listeners = sync.dispatch.before_cursor_execute
        if listeners:
            listeners(sync, cursor, sql, params, None, False)
        await cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = await cursor.fetchall() if fetch else []
        rowcount: int = cursor.rowcount
        return rows, rowcount
    except sync.dialect.loaded_dbapi.Error as exc:
        raise _translated(sync, cursor, sql, params, exc) from exc
    finally:
        await cursor.close()


def _translated(
    sync: sa.Connection, cursor: Any, sql: str, params: tuple[Any, ...], exc: Exception
) -> BaseException:
    """The SQLAlchemy exception ``exec_driver_sql`` would have raised for the driver error
    ``exc`` (the connection invalidated when the error says it is lost)."""
    dialect = sync.dialect
    lost = dialect.is_disconnect(exc, sync.connection, cursor)  # type: ignore[arg-type]
    if lost:
        sync.invalidate(exc)
    return sa.exc.DBAPIError.instance(
        sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect, connection_invalidated=lost
    )


#: (table, key column, id count, order, for update) -> (SQL text, column names, result processors
#: by column index).
_Select = tuple[str, tuple[str, ...], tuple[tuple[int, Callable[[Any], Any]], ...]]
_selects: dict[tuple[str, str, int, str, bool], _Select] = {}
_MAX_SELECTS = 1024


def _render_select(
    conn: AsyncConnection, table: sa.Table, key: str, n: int, order_by: str, for_update: bool
) -> _Select:
    cache_key = (table.name, key, n, order_by, for_update)
    found = _selects.get(cache_key)
    if found is not None:
        return found
    dialect = conn.dialect
    names = tuple(c.name for c in table.c)
    columns = ", ".join(f"`{c}`" for c in names)
    sql = f"SELECT {columns} FROM `{table.name}` WHERE `{key}` IN ({', '.join(['%s'] * n)})"
    if order_by:
        sql += f" ORDER BY `{order_by}`"
    if for_update:
        sql += " FOR UPDATE"
    processors = []
    for i, c in enumerate(table.c):
        process = c.type.dialect_impl(dialect).result_processor(dialect, None)
        if process is not None:
            processors.append((i, process))
    if len(_selects) >= _MAX_SELECTS:  # one entry per id count: bounded by the batch size in practice
        _selects.clear()
    found = _selects[cache_key] = (sql, names, tuple(processors))
    return found


async def select_in(
    conn: AsyncConnection,
    table: sa.Table,
    key: str,
    ids: Sequence[Any],
    statement: sa.Select[Any],
    *,
    order_by: str = "",
    for_update: bool = False,
) -> list[Mapping[str, Any]]:
    """Every column of ``table``'s rows whose ``key`` is one of ``ids`` (non-empty), ordered by
    ``order_by`` and locked ``FOR UPDATE`` when asked, as mappings with SQLAlchemy's result
    processing (JSON decoded by the engine's deserializer, booleans as ``bool``). On MariaDB/MySQL
    the SQL text is rendered once per id count and handed to the driver; other dialects run
    ``statement``, the same query with an expanding ``ids`` parameter."""
    if conn.dialect.name not in ("mysql", "mariadb"):
        return list((await conn.execute(statement, {"ids": list(ids)})).mappings())
    sql, names, processors = _render_select(conn, table, key, len(ids), order_by, for_update)
    out: list[Mapping[str, Any]] = []
    rows, _ = await driver_execute(conn, sql, tuple(ids), fetch=True)
    for row in rows:
        values = list(row)
        for i, process in processors:
            values[i] = process(values[i])
        out.append(dict(zip(names, values, strict=True)))
    return out
