"""Database plumbing shared by the Status API and the relay: the clock of stored timestamps, engine
construction with bounded waits, the transient-error test, and ``init-db``.

The one place that knows the SQLite/MySQL differences outside the relay's claim SQL. Imports
nothing of the domain or the services (the relay imports it: tests/test_layering.py).

* MySQL/MariaDB (asyncmy): READ COMMITTED (no gap locks between concurrent reporters, none on the
  relay's claim range scan); no pre-ping (one round trip less per transaction), connections
  recycled hourly; a per-connection prepared statement cache (asyncmy then runs every statement
  that has parameters as a server-side prepared statement, and an executemany as ONE
  ``COM_STMT_BULK_EXECUTE``). The ingest batch does not use it: its statements go as literal SQL
  in one request each for its reads and its writes (``driver_sql.Request``); a request ending in
  ``COMMIT`` spares the transaction its own (:func:`committed_by_request`).
* A connection goes back to the pool without the pool's reset ROLLBACK when the server says no
  transaction is open (:func:`_reset_unless_idle`): ``engine.begin()`` has already committed or
  rolled back, and the reset was one round trip more per transaction (the relay's claim
  was COMMIT + ROLLBACK). A connection with a transaction still open is rolled back as before.
* Every wait on MariaDB is bounded, for both services: connecting
  (:data:`CONNECT_TIMEOUT_SECONDS`), each read — one statement's answer
  (:data:`READ_TIMEOUT_SECONDS`) — and a row lock (``innodb_lock_wait_timeout``,
  :data:`LOCK_WAIT_TIMEOUT_SECONDS`, shorter than a read so a lock conflict ends as the retryable
  error 1205 rather than a dropped connection). A hung or blackholed server becomes an error the
  caller maps (a coded 503; a relay loop error and backoff), never a wait without end.
* SQLite (aiosqlite): WAL, foreign keys, and ``BEGIN IMMEDIATE`` so that a write transaction holds
  the database lock from its first statement — SQLite has no ``SELECT … FOR UPDATE`` and would
  otherwise let two transactions read the same task version (and two relays claim the same row).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from status_api.storage.tables import RETIRED_INDEXES, metadata

#: MySQL error codes worth retrying the whole transaction for: deadlock, lock wait timeout.
RETRYABLE_MYSQL_ERRORS = frozenset({1205, 1213})
#: Prepared statements asyncmy keeps per connection (only executemany uses them).
_STMT_CACHE_SIZE = 32
#: Bounds on waiting for MariaDB/MySQL (see the module docstring). A read covers one statement
#: (a ``driver_sql.Request``: its whole exchange).
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 10.0
#: ``innodb_lock_wait_timeout`` of every session (whole seconds; below :data:`READ_TIMEOUT_SECONDS`).
LOCK_WAIT_TIMEOUT_SECONDS = 5

#: A source of "now" as stored: naive UTC (injected wherever leases, expiry or staleness are computed).
Clock = Callable[[], datetime]


_EPOCH = datetime(1970, 1, 1)


def utc_now() -> datetime:
    """Naive UTC now, truncated to milliseconds (what ``DATETIME(3)`` stores): the system clock
    ``datetime.now`` reads, as whole milliseconds since the epoch (a third of its CPU)."""
    return _EPOCH + timedelta(milliseconds=time.time_ns() // 1_000_000)


def json_dumps(value: Any) -> str:
    """JSON columns are encoded with orjson (a few µs instead of tens); anything orjson refuses
    (an int beyond 64 bits, say) falls back to the standard library."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value)


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 20,
    echo: bool = False,
    lock_wait_timeout_seconds: int = LOCK_WAIT_TIMEOUT_SECONDS,
    autocommit: bool = False,
) -> AsyncEngine:
    """Create the async engine for ``url`` (``sqlite+aiosqlite:///file.db`` or ``mysql+asyncmy://…``)
    with every wait bounded (module docstring). ``autocommit`` (MySQL/MariaDB; ignored for
    SQLite): every statement commits on its own, so a one-statement write is one round trip with
    no COMMIT; for writes that need no transaction around them.

    Raises:
        ValueError: ``lock_wait_timeout_seconds`` is not below :data:`READ_TIMEOUT_SECONDS`.
    """
    if not 1 <= lock_wait_timeout_seconds < READ_TIMEOUT_SECONDS:
        raise ValueError(f"lock wait must be 1 s up to below {READ_TIMEOUT_SECONDS:g} s")
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        engine = create_async_engine(
            url,
            echo=echo,
            connect_args={"timeout": 30},
            json_serializer=json_dumps,
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
    engine = create_async_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=3600,
        pool_reset_on_return=None,
        isolation_level="AUTOCOMMIT" if autocommit else "READ COMMITTED",
        json_serializer=json_dumps,
        json_deserializer=orjson.loads,
        connect_args=(
            {
                "stmt_cache_size": _STMT_CACHE_SIZE,
                "connect_timeout": CONNECT_TIMEOUT_SECONDS,
                "read_timeout": READ_TIMEOUT_SECONDS,
                "init_command": f"SET SESSION innodb_lock_wait_timeout={int(lock_wait_timeout_seconds)}",
            }
            if u.get_driver_name() == "asyncmy"
            else {}
        ),
    )
    event.listen(engine.sync_engine.pool, "reset", _reset_unless_idle)
    if autocommit:
        _rollback_only_when_open(engine)
    else:
        _no_commit_after_request(engine)
    return engine


#: asyncmy's per-read bound on a connection: every read that waits is wrapped in
#: ``asyncio.wait_for`` (a task and a timer per read) while it is set.
_DRIVER_READ_TIMEOUT = "_read_timeout"


def suspend_read_timeout(driver_conn: Any) -> float | None:
    """Turn off the driver's own per-read timeout on ``driver_conn`` (an asyncmy connection) and
    return the bound it had; the caller then bounds its whole request by that value itself (one
    timer per request) and must hand it back with :func:`restore_read_timeout`."""
    bound = getattr(driver_conn, _DRIVER_READ_TIMEOUT, None)
    if bound is not None:
        setattr(driver_conn, _DRIVER_READ_TIMEOUT, None)
    return bound


def restore_read_timeout(driver_conn: Any, bound: float | None) -> None:
    """Put back the per-read bound :func:`suspend_read_timeout` returned."""
    if hasattr(driver_conn, _DRIVER_READ_TIMEOUT):
        setattr(driver_conn, _DRIVER_READ_TIMEOUT, bound)


#: Driver connections whose open transaction a request ending in ``COMMIT`` has just committed
#: (id -> the connection, kept alive while marked so its id cannot be reused).
_committed_by_request: dict[int, Any] = {}


#: ``SERVER_STATUS_IN_TRANS`` of the MySQL protocol's status flags.
_IN_TRANS = 0x0001


def committed_by_request(driver_conn: Any) -> None:
    """Record that the server has just committed the transaction open on ``driver_conn`` (an
    asyncmy connection) in a request of the caller's (``driver_sql.Request``): the SQLAlchemy
    transaction around it then ends without sending a ``COMMIT`` of its own (a round trip).

    The connection's status flags are set to "no transaction open" as well: the server's last OK
    packet says so with flags of 0, which asyncmy ignores for the last statement of a
    multi-statement request (it keeps the flags of the one before, IN_TRANS set); the pool's reset
    (:func:`_reset_unless_idle`) reads them and would otherwise send a needless ROLLBACK (the
    relay's ``outbox_claims._committed`` does the same after its claim's COMMIT)."""
    status = getattr(driver_conn, "server_status", None)
    if isinstance(status, int):
        driver_conn.server_status = status & ~_IN_TRANS
    _committed_by_request[id(driver_conn)] = driver_conn


def _no_commit_after_request(engine: AsyncEngine) -> None:
    """This engine's dialect commits (and rolls back) as before, but sends no ``COMMIT`` for a
    connection :func:`committed_by_request` marked; a commit or rollback clears the mark."""
    dialect = engine.sync_engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def marked(dbapi_conn: Any) -> bool:
        driver = getattr(dbapi_conn, "driver_connection", None)
        return _committed_by_request.pop(id(driver), None) is not None

    def do_commit(dbapi_conn: Any) -> None:
        if not (_committed_by_request and marked(dbapi_conn)):
            commit(dbapi_conn)

    def do_rollback(dbapi_conn: Any) -> None:
        if _committed_by_request:
            marked(dbapi_conn)
        rollback(dbapi_conn)

    dialect.do_commit = do_commit  # type: ignore[method-assign,assignment]
    dialect.do_rollback = do_rollback  # type: ignore[method-assign,assignment]


def mariadb(conn: AsyncConnection) -> bool:
    """Whether ``conn`` is on MariaDB (not MySQL): the dialect knows once connected."""
    return bool(getattr(conn.dialect, "is_mariadb", False))


def _rollback_only_when_open(engine: AsyncEngine) -> None:
    """An autocommit engine's ``Connection.close()`` still ends its implicit SQLAlchemy
    transaction with a DBAPI ROLLBACK: one wasted round trip per use. This engine's dialect sends
    it only when the server reports a transaction open (as the pool's reset does)."""
    dialect = engine.sync_engine.dialect
    rollback = dialect.do_rollback

    def do_rollback(dbapi_conn: Any) -> None:
        if _in_transaction(getattr(dbapi_conn, "dbapi_connection", dbapi_conn)):
            rollback(dbapi_conn)

    dialect.do_rollback = do_rollback  # type: ignore[method-assign,assignment]


def _in_transaction(dbapi_conn: Any) -> bool:
    """Whether the server reported an open transaction on this asyncmy connection in its last
    status flags (``SERVER_STATUS_IN_TRANS`` of the last OK/result packet). Anything we cannot
    read counts as open."""
    raw = getattr(dbapi_conn, "_connection", None)
    status = getattr(raw, "get_transaction_status", None)
    if status is None:
        return True
    try:
        return bool(status())
    except Exception:  # a closed or broken connection: let the rollback find out
        return True


def _reset_unless_idle(dbapi_conn: Any, _record: Any, state: Any) -> None:
    """The pool's reset on return (``pool_reset_on_return=None`` plus this ``reset`` event): roll
    back only when a transaction may still be open. ``state.asyncio_safe`` False (a connection
    collected outside the loop) does no I/O: the pool terminates such a connection."""
    if not state.asyncio_safe or state.transaction_was_reset:
        return
    if _in_transaction(dbapi_conn):
        dbapi_conn.rollback()


def is_retryable(exc: BaseException) -> bool:
    """True for a lock conflict that aborted only this transaction (deadlock, lock wait timeout,
    SQLite busy): retrying the whole transaction is safe and likely to succeed."""
    orig = getattr(exc, "orig", None)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in RETRYABLE_MYSQL_ERRORS:
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
        for retired in (name for t, name in RETIRED_INDEXES if t == table.name and name in have_ix):
            _drop_index(sync_conn, table.name, retired)
            actions.append(f"dropped index {retired}")
    return actions


def _drop_index(sync_conn: sa.Connection, table: str, name: str) -> None:
    """Drop index ``name`` of ``table`` (one of :data:`RETIRED_INDEXES`)."""
    prep = sync_conn.dialect.identifier_preparer
    if sync_conn.dialect.name in ("mysql", "mariadb"):
        sql = f"DROP INDEX {prep.quote(name)} ON {prep.quote(table)}"
    else:
        sql = f"DROP INDEX {prep.quote(name)}"
    sync_conn.execute(sa.text(sql))


async def init_db(engine: AsyncEngine) -> list[str]:
    """Create missing tables, columns and indexes (idempotent, additive). Returns what it did."""
    async with engine.begin() as conn:
        return await conn.run_sync(_upgrade)


async def drop_all(conn: AsyncConnection) -> None:
    await conn.run_sync(metadata.drop_all)
