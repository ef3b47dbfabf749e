"""The relay's side of the outbox table: engine, leased claims, settling, operator queries.

The only relay module that knows which database is in use, and the only one that opens
transactions. Every method is one short transaction around one call into
``status_api.storage.outbox`` (the single status_api module the relay may import).

* **MySQL/MariaDB**: READ COMMITTED (no gap locks on the claim range scan) and a short
  ``innodb_lock_wait_timeout``; claims use ``FOR UPDATE SKIP LOCKED``, so any number of replicas
  take disjoint batches. Deadlocks (1213) and lock-wait timeouts (1205) retry the transaction.
* **SQLite**: a single claimer. The dialect silently drops ``FOR UPDATE``; instead every
  transaction starts with ``BEGIN IMMEDIATE`` and holds the database write lock, so concurrent
  claimers (tasks or processes) serialise and still never share a row — but there is no
  parallelism; run one relay per SQLite file.

Clock: ``now()`` returns naive UTC (how the Status API stores timestamps) and is injected, so
lease expiry and backoff are testable without waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from status_api.storage import outbox

log = logging.getLogger("taskcast.relay.claim")

T = TypeVar("T")
Clock = Callable[[], datetime]
#: MySQL errors that abort only this transaction: lock wait timeout, deadlock.
RETRYABLE_MYSQL_ERRORS = frozenset({1205, 1213})
TRANSACTION_ATTEMPTS = 4


def utc_now() -> datetime:
    """Naive UTC with millisecond precision (``DATETIME(3)`` truncates the rest anyway)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def create_engine(url: str, *, pool_size: int = 5, lock_wait_timeout_seconds: int = 5) -> AsyncEngine:
    """An async engine for ``sqlite+aiosqlite://…`` or ``mysql+asyncmy://…`` set up for claiming."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        engine = create_async_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=3600,
        isolation_level="READ COMMITTED",
        connect_args={
            "init_command": f"SET SESSION innodb_lock_wait_timeout={int(lock_wait_timeout_seconds)}"
        },
    )


def is_retryable(exc: BaseException) -> bool:
    """True for a lock conflict that only aborted this transaction (deadlock, lock wait, SQLite busy)."""
    orig = getattr(exc, "orig", None)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in RETRYABLE_MYSQL_ERRORS:
        return True
    return "database is locked" in str(exc)


class OutboxLeases:
    """Leased access to ``task_outbox`` for one relay identity (``relay_id`` = ``locked_by``)."""

    def __init__(self, engine: AsyncEngine, relay_id: str, *, lease_seconds: float, now: Clock = utc_now):
        self.engine = engine
        self.relay_id = relay_id
        self.lease_seconds = lease_seconds
        self.now = now

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def _tx(self, body: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                async with self.engine.begin() as conn:
                    return await body(conn)
            except sa.exc.DBAPIError as exc:
                if attempt == TRANSACTION_ATTEMPTS or not is_retryable(exc):
                    raise
                log.info("outbox transaction conflict (attempt %d), retrying", attempt)
                await asyncio.sleep(0.005 * attempt)
        raise AssertionError("unreachable")

    async def claim(self, limit: int) -> list[outbox.OutboxRow]:
        """Lease up to ``limit`` rows (expired leases of any relay first); see ``outbox.claim``."""
        now = self.now()
        return await self._tx(
            lambda c: outbox.claim(c, self.relay_id, limit, now, lease_seconds=self.lease_seconds)
        )

    async def settle(
        self,
        published: Sequence[int],
        retries: Sequence[outbox.Retry],
        dead: Sequence[tuple[int, str]],
    ) -> tuple[int, int, int]:
        """Record a batch's results in one transaction; rows no longer leased by us are left alone.

        Returns the numbers of rows actually marked (published, retried, dead).
        """
        now = self.now()

        async def body(conn: AsyncConnection) -> tuple[int, int, int]:
            n_pub = await outbox.mark_published(conn, published, self.relay_id, now)
            n_retry = await outbox.mark_retries(conn, retries, self.relay_id)
            n_dead = 0
            for row_id, error in dead:
                n_dead += await outbox.mark_dead(conn, row_id, self.relay_id, error)
            return n_pub, n_retry, n_dead

        return await self._tx(body)

    async def release(self, ids: Sequence[int]) -> int:
        """Give back leases we hold (shutdown): the rows are due again at once for any replica."""
        now = self.now()
        return await self._tx(lambda c: outbox.release(c, ids, self.relay_id, now))

    async def purge(self, retention_seconds: float, chunk: int = 5000) -> int:
        """Delete PUBLISHED rows older than the retention window, in bounded chunks."""
        older_than = self.now() - timedelta(seconds=retention_seconds)
        total = 0
        while True:
            n = await self._tx(lambda c: outbox.purge_published(c, older_than, chunk))
            total += n
            if n < chunk:
                return total

    async def stats(self) -> dict[str, Any]:
        now = self.now()
        async with self.engine.connect() as conn:
            return await outbox.stats(conn, now)

    async def list_dead(self, limit: int = 100) -> list[outbox.DeadRow]:
        async with self.engine.connect() as conn:
            return await outbox.list_dead(conn, limit)

    async def requeue_dead(self, ids: Sequence[int] | None) -> int:
        now = self.now()
        return await self._tx(lambda c: outbox.requeue_dead(c, ids, now))
