"""SQLAlchemy statements run straight on a DBAPI cursor of MySQL/MariaDB (asyncmy's): the driver
path of the relay's hot statements (``outbox_claims.claim_driver``, ``mark_published_driver``).

* :class:`DriverSQL` compiles a statement ONCE with the MySQL dialect and renders its text and
  positional arguments from the parameter dict the SQLAlchemy path binds: both paths share one
  definition of every statement.
* :func:`round_trip` sends several statements as ONE request (a multi-statement text) and returns
  every statement's rows; the server stops at the first failing statement.
* :func:`committed` records on the driver connection that a request ending in ``COMMIT`` left no
  transaction open (asyncmy would keep the previous statement's flags).

No outbox knowledge here: the statements are the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = ["DriverCursor", "DriverSQL", "Part", "committed", "round_trip"]


class DriverCursor(Protocol):
    """What the driver path uses of a DBAPI cursor (asyncmy's)."""

    async def execute(self, query: str, args: Sequence[Any] | None = None) -> int: ...

    async def fetchall(self) -> Sequence[Any]: ...

    async def nextset(self) -> bool | None: ...

    @property
    def rowcount(self) -> int: ...

    def mogrify(self, query: str, args: Sequence[Any]) -> str: ...

    @property
    def connection(self) -> Any: ...


class DriverSQL:
    """One SQLAlchemy statement as the driver runs it: its MySQL text (``%s`` placeholders) and how to
    build the positional arguments from the same parameter dict the SQLAlchemy path binds. An
    expanding ``IN`` parameter (``ids``) becomes one placeholder per id."""

    def __init__(self, stmt: sa.ClauseElement) -> None:
        from sqlalchemy.dialects import mysql

        compiled = stmt.compile(dialect=mysql.dialect(paramstyle="format"))
        assert isinstance(compiled, SQLCompiler)
        names = list(compiled.positiontup or ())
        values = compiled.params
        #: per position: a bound parameter's name (str: required, given by the caller) or a
        #: constant of the statement (a 1-tuple: ``status = 'PENDING'``, ``locked_by = NULL``)
        self._slots: list[str | tuple[Any]] = [
            n if compiled.binds[n].required else (values[n],) for n in names
        ]
        self._head, marker, self._tail = str(compiled).partition("__[POSTCOMPILE_ids]")
        self._expanding = bool(marker)
        self.sql = str(compiled)

    def render(self, params: dict[str, Any]) -> tuple[str, list[Any]]:
        """The SQL text and positional arguments for ``params``."""
        args: list[Any] = []
        for slot in self._slots:
            if isinstance(slot, tuple):
                args.append(slot[0])
            elif slot == "ids" and self._expanding:
                args.extend(params["ids"])
            else:
                args.append(params[slot])
        if not self._expanding:
            return self.sql, args
        return self._head + ", ".join(["%s"] * len(params["ids"])) + self._tail, args


#: One statement of a request: its SQL text and positional arguments (:meth:`DriverSQL.render`).
Part = tuple[str, Sequence[Any]]


async def round_trip(
    cur: DriverCursor, parts: Sequence[Part], counts: list[int] | None = None
) -> list[list[Any]]:
    """Run ``parts`` as ONE request and return every statement's rows, in order (``[]`` for a
    statement without a result set); ``counts``, when given, receives every statement's affected
    row count in the same order. One statement goes as it is (the driver may prepare it);
    several are sent as one multi-statement text (the connection allows them: asyncmy connects
    with ``CLIENT_MULTI_STATEMENTS``), rendered with the driver's own escaping. The server stops at
    the first failing statement: later ones (a trailing COMMIT) never run, and the error is raised
    here."""
    if len(parts) == 1:
        await cur.execute(*parts[0])
    else:
        await cur.execute("; ".join(cur.mogrify(sql, args) for sql, args in parts))
    sets = [list(await cur.fetchall())]
    if counts is not None:
        counts.append(cur.rowcount)
    while await cur.nextset():
        sets.append(list(await cur.fetchall()))
        if counts is not None:
            counts.append(cur.rowcount)
    return sets


#: ``SERVER_STATUS_IN_TRANS`` of the MySQL protocol's status flags.
_IN_TRANS = 0x0001


def committed(cur: DriverCursor) -> None:
    """Record on the driver connection that a request ending in COMMIT left no transaction open.
    The server's last OK packet says so with status flags of 0, which asyncmy ignores (it keeps the
    flags of the request's previous statement, IN_TRANS set); the pool's reset reads them
    (``status_api.storage.database``) and would otherwise send a needless ROLLBACK."""
    conn = cur.connection
    status = getattr(conn, "server_status", None)
    if isinstance(status, int):
        conn.server_status = status & ~_IN_TRANS
