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
floor's statements with them). The transaction itself (BEGIN, COMMIT, ROLLBACK) stays SQLAlchemy's,
except after a :class:`Request` sent with ``commit=True`` (below).

**One request per batch** (:class:`Request`): the ingest batch's reads go to MariaDB as ONE
multi-statement text, and its writes with the ``COMMIT`` as another (the connection allows them:
asyncmy connects with ``CLIENT_MULTI_STATEMENTS``), where each statement was a round trip of its
own, and, since a statement with parameters runs as a server-side prepared statement (asyncmy's
cache of 32 statements per connection, keyed by the text,
which varies with the row count), most were a ``COM_STMT_PREPARE`` + ``EXECUTE`` + ``CLOSE``. The
values are SQL literals rendered here: JSON column text (the encoder's output: no raw control
characters) is escaped with two C-level replaces, other strings with the driver's escaping (a
C-level scan, then its translation table only for strings that need it), timestamps once per
request (from ``isoformat``: the driver's own rendering costs ~5 µs each). The server runs the
statements in order and stops at the first error, which is raised as SQLAlchemy's exception for
it, as above; nothing after it (the ``COMMIT``) runs and the caller's transaction rolls back
everything. A ``COMMIT`` sent in a request is recorded on the connection
(:func:`~status_api.storage.database.committed_by_request`): the transaction's own commit then sends
nothing. The driver's ``read_timeout`` bounds each socket read with ``asyncio.wait_for`` (a task and
a timer per read); a request lifts it and bounds its whole exchange by as many seconds with one
``asyncio.timeout``: past that, the read is cancelled (the driver closes the connection) and the
error is the driver's own for a read timeout (``CR_SERVER_LOST``), raised as SQLAlchemy's with the
pooled connection invalidated, as a timed-out read was before.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from asyncmy import errors as driver_errors
from asyncmy.converters import escape_datetime, escape_string
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.database import (
    committed_by_request,
    json_dumps,
    mariadb,
    restore_read_timeout,
    suspend_read_timeout,
)

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
    sync = _sync(conn)
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


def _sync(conn: AsyncConnection) -> sa.Connection:
    sync = conn.sync_connection
    if sync is None:
        raise sa.exc.ResourceClosedError("connection is closed")
    return sync


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


#: ``SERVER_STATUS_NO_BACKSLASH_ESCAPES`` of the MySQL protocol's status flags.
_NO_BACKSLASH_ESCAPES = 0x0200
#: A request is sent in parts past about this much text (``max_allowed_packet``: 16 MiB by default).
MAX_REQUEST_BYTES = 4_000_000
#: MariaDB's error number for ``SIGNAL SQLSTATE '45000'`` (an affected-rows guard failed).
_GUARD_ERRNO = 1644
#: The driver's error for a read past its ``read_timeout`` (``CR_SERVER_LOST``), and its message.
_SERVER_LOST = 2013
_READ_TIMED_OUT = "Lost connection to MySQL server during query (read timeout)"


class Request:
    """Statements of one transaction sent to MariaDB/MySQL as ONE multi-statement text (the
    module docstring), values rendered as literals. Add statements, then :meth:`send` them; a
    :meth:`select` gives the index of its rows in what :meth:`send` returns."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        sync = _sync(conn)
        driver: Any = sync.connection.driver_connection  # asyncmy's connection
        self._driver = driver
        self._mariadb = mariadb(conn)
        #: SQL texts, and per text: the index of its rows in the answer (-1: none wanted).
        self._parts: list[str] = []
        self._size = 0
        #: index of a statement -> (expected affected rows, error message): MySQL's guards,
        #: checked here (MariaDB checks them in the request: :meth:`expect_affected`).
        self._checks: dict[int, tuple[int, str]] = {}
        #: affected rows of every statement run so far.
        self._counts: list[int] = []
        #: index of a SELECT -> (column names, result processors).
        self._selects: dict[int, tuple[tuple[str, ...], tuple[tuple[int, Callable[[Any], Any]], ...]]] = {}
        self._times: dict[Any, str] = {}
        #: indexes of statements that must go in the same request as the one before (a guard).
        self._glued: set[int] = set()
        if driver.server_status & _NO_BACKSLASH_ESCAPES:
            self._quote_json: Callable[[str], str] = _quote_doubled
            self._quote: Callable[[str], str] = _quote_doubled
        else:
            self._quote_json = _quote_json
            self._quote = _quote_escaped

    def __len__(self) -> int:
        return len(self._parts)

    def add(self, sql: str) -> int:
        """A statement of literal SQL (no placeholders); returns its index."""
        self._parts.append(sql)
        self._size += len(sql)
        return len(self._parts) - 1

    def literal(self, value: Any) -> str:
        """``value`` as an SQL literal (the driver's rendering for anything unusual)."""
        t = type(value)
        if t is str:
            return self._quote(value)
        if value is None:
            return "NULL"
        if t is int:
            return str(value)
        if t is _Literal:
            return value  # type: ignore[no-any-return]
        if t is bool:
            return "1" if value else "0"
        if t is datetime:
            found = self._times.get(value)
            if found is None:
                found = self._times[value] = _datetime_literal(value)
            return found
        return str(self._driver.literal(value))

    def insert(
        self,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        *,
        upsert: bool = False,
        expect_per_row: int = 0,
        message: str = "",
    ) -> None:
        """:func:`insert_rows`'s statement(s) for ``rows`` (non-empty; every row has the first
        row's keys; several statements past :data:`MAX_STATEMENT_BYTES`). ``expect_per_row``:
        each statement must report that many affected rows per row (:meth:`expect_affected`,
        with ``message``)."""
        head, _, tail, values, json_columns = _render(table, columns=tuple(rows[0]), upsert=upsert)
        literal, quote_json = self.literal, self._quote_json
        out: list[str] = []
        size = 0
        for row in rows:
            vals: Sequence[Any] = values(row)
            if json_columns:
                as_list = list(vals)
                for i in json_columns:
                    as_list[i] = _Literal(quote_json(json_dumps(as_list[i])))
                vals = as_list
            text = "(" + ", ".join(map(literal, vals)) + ")"
            out.append(text)
            size += len(text)
            if size >= MAX_STATEMENT_BYTES:
                self._insert(head + ", ".join(out) + tail, len(out) * expect_per_row, message)
                out, size = [], 0
        if out:
            self._insert(head + ", ".join(out) + tail, len(out) * expect_per_row, message)

    def _insert(self, sql: str, expected: int, message: str) -> None:
        index = self.add(sql)
        if expected:
            self.expect_affected(index, expected, message)

    def expect_affected(self, index: int, expected: int, message: str) -> None:
        """The statement at ``index`` (the last one added) must report ``expected`` affected
        rows, or the request fails with ``RuntimeError(message)`` before anything after it runs
        (MariaDB: a guard statement in the request; MySQL: checked on the answer, and a
        ``COMMIT`` of the same request is sent after the check instead)."""
        if self._mariadb:
            guard = self.add(
                f"IF ROW_COUNT() <> {int(expected)} THEN SIGNAL SQLSTATE '45000'"
                f" SET MESSAGE_TEXT = {self._quote(message)}; END IF"
            )
            self._glued.add(guard)
        else:
            self._checks[index] = (expected, message)

    def select(
        self,
        table: sa.Table,
        key: str,
        ids: Sequence[Any],
        *,
        order_by: str = "",
        for_update: bool = False,
    ) -> int:
        """:func:`select_in`'s query for ``ids`` (non-empty); returns its index."""
        sql, names, processors = _render_select(self.conn, table, key, len(ids), order_by, for_update)
        head, _, tail = sql.partition("IN (")
        tail = tail.partition(")")[2]
        index = self.add(head + "IN (" + ", ".join([self.literal(i) for i in ids]) + ")" + tail)
        self._selects[index] = (names, processors)
        return index

    async def send(self, *, commit: bool = False) -> list[list[Mapping[str, Any]]]:
        """Run the statements (then ``COMMIT`` when ``commit``) in as few requests as their size
        allows (one, in practice), inside the connection's open transaction. Returns, per
        statement, the rows of a :meth:`select` (``[]`` for the others). Driver errors are raised
        as SQLAlchemy's (module docstring); a failed guard as ``RuntimeError``."""
        out: list[list[Mapping[str, Any]]] = []
        commit_here = commit and not self._checks
        parts = self._parts + (["COMMIT"] if commit_here else [])
        start = 0
        while start < len(parts):
            end, size = start + 1, len(parts[start])
            while end < len(parts) and (size + len(parts[end]) < MAX_REQUEST_BYTES or end in self._glued):
                size += len(parts[end])
                end += 1
            out += await self._run(parts, start, end, committing=commit_here and end == len(parts))
            start = end
        for index, (expected, message) in self._checks.items():
            if self._counts[index] not in (-1, expected):
                raise RuntimeError(f"{message} (affected rows {self._counts[index]}, expected {expected})")
        if commit and not commit_here:
            await self._run(["COMMIT"], 0, 1, committing=True)
        return out[: len(self._parts)]

    async def _run(self, parts: list[str], start: int, end: int, *, committing: bool) -> list[list[Any]]:
        sync = _sync(self.conn)
        sql = ";\n".join(parts[start:end])
        cursor = self._driver.cursor()
        counts = self._counts
        out: list[list[Any]] = []
        driver = self._driver
        bound = suspend_read_timeout(driver)  # the driver's per-read bound, for the whole request here
        try:
            listeners = sync.dispatch.before_cursor_execute
            if listeners:
                listeners(sync, cursor, sql, None, None, False)
            async with asyncio.timeout(bound):
                await cursor.execute(sql)
                index = start
                while True:
                    rows = await cursor.fetchall()
                    counts.append(cursor.rowcount)
                    out.append(self._rows(index, rows))
                    index += 1
                    if not await cursor.nextset():
                        break
            if committing:
                committed_by_request(driver)
            return out
        except TimeoutError as exc:  # the read was cancelled: the driver closed the connection
            lost = driver_errors.OperationalError(_SERVER_LOST, _READ_TIMED_OUT)
            raise _translated(sync, cursor, sql, (), lost) from exc
        except sync.dialect.loaded_dbapi.Error as exc:
            if exc.args and exc.args[0] == _GUARD_ERRNO:
                raise RuntimeError(str(exc.args[-1])) from exc
            raise _translated(sync, cursor, sql, (), exc) from exc
        finally:
            restore_read_timeout(driver, bound)
            await cursor.close()

    def _rows(self, index: int, rows: Sequence[tuple[Any, ...]]) -> list[Any]:
        found = self._selects.get(index)
        if found is None:
            return []
        names, processors = found
        out: list[Any] = []
        for row in rows:
            values = list(row)
            for i, process in processors:
                values[i] = process(values[i])
            out.append(dict(zip(names, values, strict=True)))
        return out


def _datetime_literal(value: datetime) -> str:
    """The driver's literal of a timestamp (``escape_datetime``: ``'YYYY-MM-DD HH:MM:SS[.ffffff]'``,
    no fraction when the microseconds are 0, no offset), from ``isoformat`` (C, ~8x cheaper)."""
    if value.tzinfo is not None:
        return str(escape_datetime(value))
    return "'" + value.isoformat(" ") + "'"


class _Literal(str):
    """SQL text already rendered as a literal (a JSON column's quoted text)."""

    __slots__ = ()


def _quote_json(text: str) -> str:
    """JSON text (no raw control characters, the encoder escapes them) as a string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quote_escaped(text: str) -> str:
    return "'" + escape_string(text) + "'"


def _quote_doubled(text: str) -> str:
    """A string literal under ``NO_BACKSLASH_ESCAPES`` (the driver's own rule for that mode)."""
    return "'" + text.replace("'", "''") + "'"
