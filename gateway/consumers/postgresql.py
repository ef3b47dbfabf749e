"""The ``postgresql`` consumer: Centrifugo's transactional outbox table.

The table (docs/consumers.md has the DDL) holds one server API command per row: ``id``
(BIGSERIAL), ``method``, ``payload`` (JSONB) and ``partition``. Each of ``num_partitions``
partitions is consumed by its own loop, in ``id`` order: in one READ COMMITTED transaction it
takes the partition's advisory lock (``pg_advisory_xact_lock``, or the ``try`` variant with
``use_try_lock``), reads up to ``partition_select_limit`` rows, runs them one by one, deletes
the ones done or skipped and commits. A command failing with error 100 stops the batch there:
the rows before it are deleted, it and the rest stay for the next round after a backoff (at
least once, in order). Several gateways may consume one table: the lock serialises a partition.

A loop that read fewer rows than the limit waits ``partition_poll_interval``, or less when
``partition_notification_channel`` is set and a trigger ``pg_notify``-s the partition number
(LISTEN on a dedicated connection, to ``partition_notification_dsn`` when set, re-established
after a loss; polling goes on meanwhile). Connection failures are logged, counted and retried
with backoff: the consumer never stops while the gateway runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from gateway.config.sections.consumers import PostgresConsumerSettings
from gateway.consumers.dispatch import Dispatcher, RetryLater, backoff
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.consumers")

CONNECT_TIMEOUT_SECONDS = 10.0
LISTEN_RETRY_SECONDS = 1.0
_LOCKED = -1
"""``process_once``'s count when ``use_try_lock`` found the partition locked by another node."""


class PostgresConsumer:
    """Consumes one outbox table until cancelled."""

    def __init__(self, name: str, settings: PostgresConsumerSettings, dispatcher: Dispatcher) -> None:
        self.name = name
        self.settings = settings
        self.dispatcher = dispatcher
        self.lock_prefix = f"centrifugo_partition_lock_{name}"
        table = settings.outbox_table_name  # checked as an identifier at load (consumer_checks)
        self._select = f"SELECT id, method, payload FROM {table} WHERE partition=$1 ORDER BY id ASC LIMIT $2"
        self._delete = f"DELETE FROM {table} WHERE id = ANY($1::bigint[])"
        self.triggers = [asyncio.Event() for _ in range(settings.num_partitions)]

    async def run(self) -> None:
        retries = 0
        while True:
            try:
                pool = await asyncpg.create_pool(
                    self.settings.dsn,
                    min_size=0,
                    max_size=self.settings.num_partitions,
                    timeout=CONNECT_TIMEOUT_SECONDS,
                )
            except Exception as exc:  # unreachable, refused, bad credentials: retried, never fatal
                raise_if_cancelling(exc)
                retries += 1
                self.dispatcher.failed("cannot connect to PostgreSQL", exc)
                await asyncio.sleep(backoff(retries))
                continue
            try:
                async with asyncio.TaskGroup() as tg:
                    if self.settings.partition_notification_channel:
                        tg.create_task(self._listen())
                    for partition in range(self.settings.num_partitions):
                        tg.create_task(self._partition(pool, partition))
            finally:
                try:
                    await asyncio.wait_for(pool.close(), CONNECT_TIMEOUT_SECONDS)
                except Exception:  # closing is best effort; terminate what did not close
                    pool.terminate()

    async def _partition(self, pool: Any, partition: int) -> None:
        retries = 0
        trigger = self.triggers[partition]
        limit = self.settings.partition_select_limit
        while True:
            raise_if_cancelling()
            trigger.clear()
            try:
                count = await self.process_once(pool, partition)
            except RetryLater as exc:
                retries += 1
                self.dispatcher.failed("command failed, retried", exc)
                await asyncio.sleep(backoff(retries))
                continue
            except Exception as exc:  # the loop's boundary: logged, counted, retried, never fatal
                raise_if_cancelling(exc)
                retries += 1
                self.dispatcher.failed("error processing the outbox", exc)
                await asyncio.sleep(backoff(retries))
                continue
            retries = 0
            if count < limit:  # a full batch: more rows may be waiting, go on at once
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(trigger.wait(), self.settings.partition_poll_interval)

    async def process_once(self, pool: Any, partition: int) -> int:
        """One round on ``partition``: the rows handled (done or skipped), or ``_LOCKED``.

        Raises:
            RetryLater: a command failed with error 100 (the rows before it are deleted).
            asyncpg.PostgresError, OSError: the database failed (nothing was deleted).
        """
        failure: RetryLater | None = None
        handled: list[int] = []
        async with (
            pool.acquire(timeout=CONNECT_TIMEOUT_SECONDS) as conn,
            conn.transaction(isolation="read_committed"),
        ):
            lock = f"{self.lock_prefix}{partition}"
            if self.settings.use_try_lock:
                if not await conn.fetchval("SELECT pg_try_advisory_xact_lock(hashtext($1))", lock):
                    return _LOCKED
            else:
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", lock)
            rows = await conn.fetch(self._select, partition, self.settings.partition_select_limit)
            for row in rows:
                try:
                    await self.dispatcher.command(row["method"] or "", row["payload"])
                except RetryLater as exc:
                    failure = exc
                    break
                handled.append(row["id"])
            if handled:
                await conn.execute(self._delete, handled)
        self.dispatcher.metrics.processed.labels(self.name).inc(len(handled))
        if failure is not None:
            raise failure
        return len(handled)

    async def _listen(self) -> None:
        """LISTEN for partition numbers; each wakes its partition's loop."""
        dsn = self.settings.partition_notification_dsn or self.settings.dsn
        channel = self.settings.partition_notification_channel
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_SECONDS)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(channel, self._notified)
                for trigger in self.triggers:  # rows may have come while nobody listened
                    trigger.set()
                await lost.wait()
                self.dispatcher.failed("notification connection lost", ConnectionError("closed"))
            except Exception as exc:  # the listener's boundary: polling goes on meanwhile
                raise_if_cancelling(exc)
                self.dispatcher.failed("error listening for outbox notifications", exc)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), CONNECT_TIMEOUT_SECONDS)
            await asyncio.sleep(LISTEN_RETRY_SECONDS)

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            partition = int(payload)
        except ValueError:
            partition = -1
        if 0 <= partition < len(self.triggers):
            self.triggers[partition].set()
        else:
            self.dispatcher.limiter.log(
                logging.ERROR,
                f"notify:{self.name}",
                "consumer %s: notification payload %r is not a partition below num_partitions",
                self.name,
                payload[:32],
            )


__all__ = ["PostgresConsumer"]
