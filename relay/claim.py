"""The relay's side of the outbox table: leased claims, settling, operator queries.

The only relay module that knows which database is in use, and the only one that opens
transactions. Every method is one short transaction around one call into the outbox contract:
``status_api.storage.outbox_claims`` (claim and settle) or ``status_api.storage.outbox_admin``
(the operators' queries behind ``relay purge``, ``relay dead`` and the gauges). The engine, its
bounded waits (connect, read, lock), the clock and the transient-error test are the plumbing
shared with the Status API (``status_api.storage.database``; ``create_engine`` and ``utc_now``
are re-exported here).

* **MySQL/MariaDB**: READ COMMITTED (no gap locks on the claim range scan) and a short
  ``innodb_lock_wait_timeout``; claims use ``FOR UPDATE SKIP LOCKED``, so any number of replicas
  take disjoint batches. Deadlocks (1213) and lock-wait timeouts (1205) retry the transaction.
* **The hot statements on MySQL/MariaDB** (the claim with its next-due read, and the mark of a
  published batch) run straight on the pooled connection's DBAPI (asyncmy) connection
  (``outbox_claims.claim_driver``): SQLAlchemy keeps the engine, the pool and every other
  statement. Driver errors are mapped to ``sqlalchemy.exc.DBAPIError`` as SQLAlchemy would, so
  retries (deadlock, lock wait) and callers see the same exceptions; a connection that failed
  any other way is invalidated rather than returned to the pool. On these held connections the
  read bound (10 s) covers one claim or mark as a whole instead of each read (``_Held``).
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
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from status_api.storage import outbox_admin, outbox_claims
from status_api.storage.database import (
    Clock,
    create_engine,
    is_retryable,
    restore_read_timeout,
    suspend_read_timeout,
    utc_now,
)
from status_api.storage.driver_statements import DriverCursor
from status_api.storage.outbox import DeadRow, OutboxRow, Retry

try:
    from asyncmy.errors import Error as _AsyncmyError

    _DRIVER_ERRORS: tuple[type[BaseException], ...] = (_AsyncmyError,)
except ImportError:  # pragma: no cover - SQLite-only installs
    _DRIVER_ERRORS = ()


#: How long :class:`OutboxLeases` keeps one pooled connection checked out for its driver path
#: (the engines' ``pool_recycle`` is an hour): then it goes back to the pool and a fresh one is taken.
HELD_RECYCLE_SECONDS = 600.0


@dataclass
class _Held:
    """A pooled connection kept checked out between claims (one per concurrent loop): a claim or
    a mark takes no pool checkout, return or reset.

    While held, the driver's own per-read timeout is off (asyncmy wraps every read that waits in
    ``asyncio.wait_for``: a task and a timer per read) and :meth:`OutboxLeases._driver` bounds each
    body as a whole by the same ``read_timeout`` instead (one timer per claim or mark). It is put
    back before the connection returns to the pool."""

    conn: AsyncConnection
    driver: Any
    since: float
    read_timeout: float | None

    async def give_back(self) -> None:
        """Return it to the pool as it was taken (the driver's read timeout restored)."""
        restore_read_timeout(self.driver, self.read_timeout)
        await self.conn.close()

    async def drop(self) -> None:
        """Close it for good (a failed or cancelled body): invalidated, never reused."""
        try:
            await self.conn.invalidate()
        finally:
            await self.conn.close()


def _within_pool_size(engine: AsyncEngine) -> bool:
    """True while the connections checked out of ``engine``'s pool do not exceed its size: held
    connections never keep the overflow, which stays for the statements that check out per call
    (gauges, retention, releases)."""
    pool: Any = engine.sync_engine.pool
    return bool(pool.checkedout() <= pool.size())


def _read_timed_out(seconds: float | None) -> Exception:
    """The driver's own error for a read that exceeded its bound (asyncmy raises it per read)."""
    message = f"Lost connection to MySQL server during query (read timeout, {seconds} s)"
    if _DRIVER_ERRORS:
        from asyncmy.errors import OperationalError

        return OperationalError(2013, message)
    return TimeoutError(message)  # pragma: no cover - SQLite-only installs have no driver path


async def _rolled_back(driver: Any, transactional: bool) -> bool:
    """End a failed body's transaction on the driver; False when even that failed."""
    if not transactional:
        return True
    try:
        await driver.rollback()
    except Exception:
        return False
    return True


__all__ = ["Clock", "OutboxLeases", "create_engine", "utc_now"]

log = logging.getLogger("taskcast.relay.claim")

T = TypeVar("T")
TRANSACTION_ATTEMPTS = 4


class OutboxLeases:
    """Leased access to ``task_outbox`` for one relay identity (``relay_id`` = ``locked_by``)."""

    def __init__(
        self,
        engine: AsyncEngine,
        relay_id: str,
        *,
        lease_seconds: float,
        now: Clock = utc_now,
        settle_engine: AsyncEngine | None = None,
        hold_connections: bool = False,
    ):
        self.engine = engine
        self._dialect: str | None = None
        #: MySQL/MariaDB driver path: keep a connection checked out between claims and marks (one
        #: per concurrent caller) instead of a pool checkout, return and reset per call. It holds
        #: up to one pooled connection per relay loop and engine: the pools must allow that many.
        self.hold_connections = hold_connections
        #: Where :meth:`settle` runs its statements without a transaction (an autocommit engine,
        #: MySQL/MariaDB): each is one round trip with no COMMIT. None: in a transaction on ``engine``.
        self.settle_engine = settle_engine
        self.relay_id = relay_id
        self.lease_seconds = lease_seconds
        self.now = now
        #: After a claim that had room (fewer rows than its limit): when the earliest PENDING row
        #: that was not yet due becomes due (``outbox_claims.next_due``), None when none waits.
        #: After a full claim: None (the relay claims again at once anyway).
        self.next_due: datetime | None = None
        #: Idle held connections per engine (MySQL/MariaDB driver path, :meth:`_driver`).
        self._held: dict[AsyncEngine, list[_Held]] = {}
        #: Deferred marks (:meth:`defer_published`): published rows still leased, and the
        #: earliest acknowledgement time among them (their ``published_at``).
        self._unmarked: list[int] = []
        self._unmarked_at: datetime | None = None
        self._unmarked_since: float | None = None
        #: Called with the number of deferred rows that were no longer ours when their mark ran
        #: (another replica took them over): the relay counts them as lost leases.
        self.on_lost_marks: Callable[[int], None] | None = None
        #: The last :meth:`nothing_to_claim` read the table (False: it answered without a look).
        self.looked = False

    @classmethod
    def open(
        cls, url: str, relay_id: str, *, lease_seconds: float, pool_size: int, lock_wait_timeout_seconds: int
    ) -> OutboxLeases:
        """Leases on the database at ``url``: a claims engine and, on MySQL/MariaDB, an autocommit
        engine for the marks (one round trip each, no COMMIT); pools of ``pool_size`` (+ as much
        overflow) each. Close with :meth:`dispose`."""

        def engine(autocommit: bool) -> AsyncEngine:
            return create_engine(
                url,
                pool_size=pool_size,
                max_overflow=pool_size,
                lock_wait_timeout_seconds=lock_wait_timeout_seconds,
                autocommit=autocommit,
            )

        claims = engine(autocommit=False)
        settle = engine(autocommit=True) if claims.dialect.name == "mysql" else None
        return cls(claims, relay_id, lease_seconds=lease_seconds, settle_engine=settle, hold_connections=True)

    @property
    def dialect(self) -> str:
        """The engine's dialect name (read once: it is on every claim's path)."""
        name = self._dialect
        if name is None:
            name = self._dialect = str(self.engine.dialect.name)
        return name

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

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[OutboxRow]:
        """Lease up to ``limit`` rows (expired leases of any relay first, unless ``takeover`` is
        False); ``backlog`` = the previous claim was full, skip the one-SELECT probe. See
        ``outbox_claims.claim``. A claim with room also reads :attr:`next_due` in the same
        transaction."""
        now = self.now()
        lease = self.lease_seconds if takeover else None

        async def body(conn: AsyncConnection) -> tuple[list[OutboxRow], datetime | None]:
            rows = await outbox_claims.claim(
                conn, self.relay_id, limit, now, lease_seconds=lease, probe=not backlog
            )
            due = await outbox_claims.next_due(conn, now) if len(rows) < limit else None
            return rows, due

        if self.dialect != "mysql":
            rows, self.next_due = await self._tx(body)
            return rows

        marks = self._take_unmarked()
        mark = None if marks is None else (marks[0], marks[1])

        def driver_body(cur: DriverCursor) -> Awaitable[outbox_claims.DriverClaim]:
            return outbox_claims.claim_driver(
                cur, self.relay_id, limit, now, lease_seconds=lease, probe=not backlog, mark=mark
            )

        try:
            result = await self._driver(self.engine, driver_body, transactional=True)
        except BaseException:
            if marks is not None:
                self._defer(*marks)
            raise
        self.next_due = result.next_due
        if marks is not None:
            self._count_lost(len(marks[0]) - result.marked)
        return result.rows

    async def nothing_to_claim(self, *, takeover: bool = True) -> bool:
        """A poll's look before its claim (MySQL/MariaDB, with the autocommit engine): True when a
        :meth:`claim` now would lease nothing — no due row and, with ``takeover``, no expired
        lease — read by one statement without a lock or a transaction; :attr:`next_due` is then
        set as the empty claim would have set it. False (claim) when something is claimable,
        when deferred marks wait for a claim to carry them, and on SQLite (no look: claim);
        :attr:`looked` says whether this call read the table."""
        self.looked = False
        if self.settle_engine is None or self._unmarked or self.dialect != "mysql":
            return False
        self.looked = True
        now = self.now()
        lease = self.lease_seconds if takeover else None
        look = await self._driver(
            self.settle_engine, lambda cur: outbox_claims.look_driver(cur, now, lease), transactional=False
        )
        if look.claimable:
            return False
        self.next_due = look.next_due
        return True

    @property
    def defers_marks(self) -> bool:
        """Whether :meth:`defer_published` is available: the claim can carry a mark (the
        MySQL/MariaDB driver path). SQLite marks at once."""
        return self.dialect == "mysql"

    @property
    def unmarked(self) -> int:
        """How many published rows wait for their deferred mark."""
        return len(self._unmarked)

    def defer_published(self, ids: Sequence[int], published_at: datetime) -> None:
        """Mark the rows of ``ids`` (published: the gateway acknowledged them) PUBLISHED with the
        next claim instead of now: its second request carries the mark (``claim_driver``'s
        ``mark``), one round trip less per cycle. Until then they stay PROCESSING under their
        lease; the caller bounds the wait (:attr:`unmarked_since`, :meth:`flush_marks`). A crash
        before the mark republishes them (at-least-once); nothing that was not published is ever
        passed here. ``published_at`` of all waiting rows is the earliest acknowledgement among
        them."""
        if ids:
            self._defer(list(ids), published_at, time.monotonic())

    @property
    def unmarked_since(self) -> float | None:
        """Since when (``time.monotonic()``) the oldest deferred row waits; None: none waits."""
        return self._unmarked_since

    async def flush_marks(self) -> int:
        """Mark the deferred rows now, on their own (one UPDATE on the driver); returns how many
        were marked. On an error they stay deferred (a later claim or flush marks them) and the
        error propagates."""
        marks = self._take_unmarked()
        if marks is None:
            return 0
        try:
            n, _, _ = await self.settle(marks[0], [], [], now=marks[1])
        except BaseException:
            self._defer(*marks)
            raise
        self._count_lost(len(marks[0]) - n)
        return n

    def _defer(self, ids: list[int], published_at: datetime, since: float) -> None:
        self._unmarked.extend(ids)
        if self._unmarked_at is None or published_at < self._unmarked_at:
            self._unmarked_at = published_at
        if self._unmarked_since is None or since < self._unmarked_since:
            self._unmarked_since = since

    def _take_unmarked(self) -> tuple[list[int], datetime, float] | None:
        if not self._unmarked or self._unmarked_at is None or self._unmarked_since is None:
            return None
        marks = (self._unmarked, self._unmarked_at, self._unmarked_since)
        self._unmarked, self._unmarked_at, self._unmarked_since = [], None, None
        return marks

    def _count_lost(self, lost: int) -> None:
        if lost and self.on_lost_marks is not None:
            self.on_lost_marks(lost)

    async def settle(
        self,
        published: Sequence[int],
        retries: Sequence[Retry],
        dead: Sequence[tuple[int, str]],
        released: Sequence[int] = (),
        *,
        now: datetime | None = None,
    ) -> tuple[int, int, int]:
        """Record a batch's results in one transaction; rows no longer leased by us are left alone.

        ``retries`` go back to PENDING at their own ``available_at`` (a row-specific failure);
        ``released`` are due again at once with the claim's attempt refunded (the gateway as a whole
        failed, nothing wrong with them: an outage never counts toward ``max_attempts``).
        Returns the numbers of rows actually marked (published, back to PENDING, dead).

        With ``settle_engine`` the statements run without a transaction around them: each one is
        guarded by the lease on its own (``status = PROCESSING AND locked_by = me``), so nothing
        needs them to commit together, and a retry after a conflict marks only what is still ours.
        ``now`` (default: the clock) is the ``published_at`` of the published rows.
        """
        now = self.now() if now is None else now

        async def body(conn: AsyncConnection) -> tuple[int, int, int]:
            n_pub = await outbox_claims.mark_published(conn, published, self.relay_id, now)
            n_back = await outbox_claims.mark_retries(conn, retries, self.relay_id)
            n_back += await outbox_claims.release(conn, released, self.relay_id, now, refund_attempt=True)
            n_dead = 0
            for row_id, error in dead:
                n_dead += await outbox_claims.mark_dead(conn, row_id, self.relay_id, error)
            return n_pub, n_back, n_dead

        if self.settle_engine is not None:
            if not (retries or dead or released):  # the common case: one UPDATE on the driver
                return (
                    await self._driver(
                        self.settle_engine,
                        lambda cur: outbox_claims.mark_published_driver(cur, published, self.relay_id, now),
                        transactional=False,
                    ),
                    0,
                    0,
                )
            return await self._autocommit(self.settle_engine, body)
        return await self._tx(body)

    async def return_connections(self) -> None:
        """Give the idle held connections back to their pools (``hold_connections``)."""
        for held_list in self._held.values():
            while held_list:
                await held_list.pop().give_back()

    async def dispose(self) -> None:
        """Close the held connections and the pools of both engines."""
        await self.return_connections()
        await self.engine.dispose()
        if self.settle_engine is not None:
            await self.settle_engine.dispose()

    async def _autocommit(self, engine: AsyncEngine, body: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                async with engine.connect() as conn:
                    return await body(conn)
            except sa.exc.DBAPIError as exc:
                if attempt == TRANSACTION_ATTEMPTS or not is_retryable(exc):
                    raise
                log.info("outbox statement conflict (attempt %d), retrying", attempt)
                await asyncio.sleep(0.005 * attempt)
        raise AssertionError("unreachable")

    async def _driver(
        self,
        engine: AsyncEngine,
        body: Callable[[DriverCursor], Awaitable[T]],
        *,
        transactional: bool,
    ) -> T:
        """``body`` on a cursor of a held connection's DBAPI connection (MySQL/MariaDB); on a
        ``transactional`` engine the body commits its own work (``outbox_claims.claim_driver``
        sends its COMMIT with its last statements), an autocommit one needs none. A driver error
        rolls back (``transactional``) and is raised as ``sqlalchemy.exc.DBAPIError``; deadlocks
        and lock wait timeouts retry the whole body; any other error (or a cancellation) closes the
        connection instead of keeping it."""
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            held = await self._take(engine)
            ok = False
            try:
                async with asyncio.timeout(held.read_timeout):
                    result = await body(held.driver.cursor())
                ok = True
                return result
            except TimeoutError as exc:  # the held connection's read bound (see _Held): dropped below
                raise sa.exc.DBAPIError(None, None, _read_timed_out(held.read_timeout)) from exc
            except _DRIVER_ERRORS as exc:
                error = sa.exc.DBAPIError(None, None, exc)
                if not is_retryable(error) or attempt == TRANSACTION_ATTEMPTS:
                    raise error from exc
                ok = await _rolled_back(held.driver, transactional)
            finally:
                if ok and self.hold_connections and _within_pool_size(engine):
                    self._held[engine].append(held)
                elif ok:
                    await held.give_back()
                else:
                    await held.drop()
            log.info("outbox transaction conflict (attempt %d), retrying", attempt)
            await asyncio.sleep(0.005 * attempt)
        raise AssertionError("unreachable")

    async def _take(self, engine: AsyncEngine) -> _Held:
        """A held connection of ``engine``: an idle one kept by an earlier call (younger than
        :data:`HELD_RECYCLE_SECONDS`), else a new checkout from the pool."""
        idle = self._held.setdefault(engine, [])
        while idle:
            held = idle.pop()
            if time.monotonic() - held.since < HELD_RECYCLE_SECONDS:
                return held
            await held.give_back()
        conn = await engine.connect()
        try:
            raw = await conn.get_raw_connection()
        except BaseException:
            await conn.close()
            raise
        driver: Any = raw.driver_connection
        read_timeout = suspend_read_timeout(driver)  # bounded per body instead (see _Held)
        return _Held(conn, driver, time.monotonic(), read_timeout)

    async def release(self, ids: Sequence[int]) -> int:
        """Give back leases we hold (shutdown): the rows are due again at once for any replica."""
        now = self.now()
        return await self._tx(lambda c: outbox_claims.release(c, ids, self.relay_id, now))

    async def purge(self, retention_seconds: float, chunk: int = 5000) -> int:
        """Delete PUBLISHED rows older than the retention window, in bounded chunks."""
        older_than = self.now() - timedelta(seconds=retention_seconds)
        total = 0
        while True:
            n = await self._tx(lambda c: outbox_admin.purge_published(c, older_than, chunk))
            total += n
            if n < chunk:
                return total

    async def stats(self) -> dict[str, Any]:
        now = self.now()
        async with self.engine.connect() as conn:
            return await outbox_admin.stats(conn, now)

    async def list_dead(self, limit: int = 100) -> list[DeadRow]:
        async with self.engine.connect() as conn:
            return await outbox_admin.list_dead(conn, limit)

    async def requeue_dead(self, ids: Sequence[int] | None) -> int:
        now = self.now()
        return await self._tx(lambda c: outbox_admin.requeue_dead(c, ids, now))
