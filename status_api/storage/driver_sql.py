"""Multi-row INSERTs of the hot write path as SQL text handed to the driver.

On MariaDB/MySQL a batch's rows of one table go to the driver as ONE ``INSERT … VALUES (…), (…)``
(optionally ``ON DUPLICATE KEY UPDATE`` every non-key column given), whose text is rendered once per
(table, column set) and kept: no SQLAlchemy statement compile-cache lookup, no per-row parameter
processing by the compiled statement (a few µs per row each, the larger part of an ingest batch's
SQLAlchemy CPU). The rows are stored exactly as :func:`sqlalchemy.insert` stores them: JSON columns
are encoded with the engine's JSON serializer (a Python ``None`` in a JSON column is the JSON
``null``, SQLAlchemy's ``none_as_null=False`` default), every other value goes to the driver as
given. Other dialects (SQLite) run the SQLAlchemy statement.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.database import json_dumps

#: (table name, columns, upsert) -> (SQL text, a row's values in column order, JSON columns' indexes).
_Rendered = tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]], tuple[int, ...]]
_rendered: dict[tuple[str, tuple[str, ...], bool], _Rendered] = {}
_inserts: dict[str, sa.Insert] = {}


def _render(table: sa.Table, columns: tuple[str, ...], upsert: bool) -> _Rendered:
    key = (table.name, columns, upsert)
    found = _rendered.get(key)
    if found is not None:
        return found
    names = ", ".join(f"`{c}`" for c in columns)
    sql = f"INSERT INTO `{table.name}` ({names}) VALUES ({', '.join(['%s'] * len(columns))})"
    if upsert:
        keys = {c.name for c in table.primary_key.columns}
        sql += " ON DUPLICATE KEY UPDATE " + ", ".join(
            f"`{c}` = VALUES(`{c}`)" for c in columns if c not in keys
        )
    json_columns = tuple(i for i, c in enumerate(columns) if isinstance(table.c[c].type, sa.JSON))
    values = operator.itemgetter(*columns) if len(columns) > 1 else lambda row: (row[columns[0]],)
    found = _rendered[key] = (sql, values, json_columns)
    return found


async def insert_rows(
    conn: AsyncConnection, table: sa.Table, rows: Sequence[Mapping[str, Any]], *, upsert: bool = False
) -> CursorResult[Any]:
    """Insert ``rows`` (non-empty; every row has the first row's keys) into ``table`` with one statement;
    ``upsert``: rows whose key exists update every non-key column given instead (MariaDB/MySQL; on
    other dialects only plain inserts are supported). Returns the driver's result (``rowcount``:
    MySQL's affected rows, 2 per updated row of an upsert)."""
    if conn.dialect.name not in ("mysql", "mariadb"):
        if upsert:
            raise ValueError("upsert needs MariaDB/MySQL")
        stmt = _inserts.get(table.name)
        if stmt is None:  # built once: a statement object memoizes its compiled-cache key
            stmt = _inserts[table.name] = sa.insert(table)
        return await conn.execute(stmt, list(rows))
    columns = tuple(rows[0])
    sql, values, json_columns = _render(table, columns, upsert)
    params: list[tuple[Any, ...]] = []
    for row in rows:
        out = values(row)
        if json_columns:
            as_list = list(out)
            for i in json_columns:
                as_list[i] = json_dumps(as_list[i])
            out = tuple(as_list)
        params.append(out)
    return await conn.exec_driver_sql(sql, params)
