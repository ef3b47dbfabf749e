"""The ``postgresql`` consumer against a real PostgreSQL (tests/helpers/brokers.py): Centrifugo's
outbox table consumed in order per partition, rows deleted once handled, poison rows skipped and
counted while the consumer goes on, error 100 retried in place, LISTEN/NOTIFY waking a partition,
two gateways sharing a table, an unreachable database retried."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.api.requests import ApiError
from gateway.config.sections.consumers import PostgresConsumerSettings
from gateway.consumers.dispatch import ConsumerMetrics, Dispatcher
from gateway.consumers.postgresql import PostgresConsumer
from gateway.protocol import codes
from taskcast.dev.procs import free_port
from tests.gateway.consumers.support import history, processed, running, runtime, sample
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

DDL = """CREATE TABLE IF NOT EXISTS {table} (
    id BIGSERIAL PRIMARY KEY,
    method text NOT NULL,
    payload JSONB NOT NULL,
    partition INTEGER NOT NULL default 0,
    created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL
)"""

NOTIFY = """CREATE OR REPLACE FUNCTION {table}_notify() RETURNS TRIGGER AS $$
BEGIN
    PERFORM pg_notify('{channel}', NEW.partition::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER {table}_trigger AFTER INSERT ON {table}
FOR EACH ROW EXECUTE FUNCTION {table}_notify();"""


@pytest.fixture
async def outbox(postgres_dsn: str) -> AsyncIterator[str]:
    table = f"outbox_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(DDL.format(table=table))
        yield table
        await conn.execute(f"DROP TABLE {table} CASCADE")
    finally:
        await conn.close()


async def insert(dsn: str, table: str, rows: list[tuple[str, object, int]]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.executemany(
            f"INSERT INTO {table} (method, payload, partition) VALUES ($1, $2::jsonb, $3)",
            [(method, json.dumps(payload), partition) for method, payload, partition in rows],
        )
    finally:
        await conn.close()


async def count_rows(dsn: str, table: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
    finally:
        await conn.close()


def consumer(dsn: str, table: str, **postgresql: Any) -> dict[str, Any]:
    return {
        "name": "c1",
        "enabled": True,
        "type": "postgresql",
        "postgresql": {
            "dsn": dsn,
            "outbox_table_name": table,
            "partition_poll_interval": "50ms",
            **postgresql,
        },
    }


def publish(channel: str, data: object, **extra: object) -> tuple[str, object, int]:
    return ("publish", {"channel": channel, "data": data, **extra}, 0)


async def test_rows_are_published_in_order_and_deleted(
    tmp_path: Path, postgres_dsn: str, outbox: str
) -> None:
    await insert(postgres_dsn, outbox, [publish("news", {"n": n}) for n in range(5)])
    rt = runtime(tmp_path, [consumer(postgres_dsn, outbox)])
    async with running(*rt.consumers):
        await wait_until(lambda: history(rt, "news"), what="publications")
        await wait_until(lambda: _len_is(history(rt, "news"), 5), what="five publications")
        assert await history(rt, "news") == [{"n": n} for n in range(5)]
        await wait_until(lambda: _zero(count_rows(postgres_dsn, outbox)), what="the outbox emptied")
        await wait_until(lambda: processed(rt) >= 5, what="five rows counted")  # counted after COMMIT
    assert processed(rt) == 5
    assert sample(rt, "centrifugo_consumers_errors_total") == 0
    await rt.close()


async def test_poison_rows_are_skipped_counted_and_the_consumer_goes_on(
    tmp_path: Path, postgres_dsn: str, outbox: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "taskcast.gateway.consumers")
    await insert(
        postgres_dsn,
        outbox,
        [
            publish("news", 1),
            ("", {"method": "publish", "payload": "{not json"}, 0),  # bad JSON inside a document
            ("", {"method": "publish", "payload": "{still not json"}, 0),
            ("frobnicate", {"channel": "news"}, 0),  # unknown method
            publish("news", "x" * 600),  # oversized (max_message_size 512)
            publish("nope:x", 1),  # refused by the API: unknown namespace (102)
            publish("news", 2),
        ],
    )
    rt = runtime(tmp_path, [{**consumer(postgres_dsn, outbox), "max_message_size": 512}])
    async with running(*rt.consumers):
        await wait_until(lambda: _len_is(history(rt, "news"), 2), what="the two good rows")
        await wait_until(lambda: _zero(count_rows(postgres_dsn, outbox)), what="every row deleted")
        await wait_until(lambda: processed(rt) >= 7, what="seven rows counted")  # counted after COMMIT
    assert await history(rt, "news") == [1, 2]
    skipped = "taskcast_gateway_consumer_messages_skipped_total"
    assert sample(rt, skipped, reason="malformed") == 2
    assert sample(rt, skipped, reason="unknown_method") == 1
    assert sample(rt, skipped, reason="oversized") == 1
    assert sample(rt, skipped, reason="rejected") == 1
    assert processed(rt) == 7
    lines = [r.getMessage() for r in caplog.records if "skipped a message" in r.getMessage()]
    assert len(lines) == 4, lines  # once per reason: the second malformed row is held and counted
    await rt.close()


async def test_error_100_keeps_the_row_and_its_successors_until_it_passes(
    tmp_path: Path, postgres_dsn: str, outbox: str
) -> None:
    rt = runtime(tmp_path, [])
    calls: list[str] = []
    failures = 3

    async def flaky(method: str, params: object) -> dict[str, Any]:
        nonlocal failures
        assert isinstance(params, dict)
        calls.append(params["channel"])
        if params["channel"] == "flaky" and failures:
            failures -= 1
            raise ApiError(codes.ERROR_INTERNAL)
        return await rt.api.call(method, params, protocol="consuming")

    metrics = ConsumerMetrics(rt.metrics.registry)
    settings = PostgresConsumerSettings(
        dsn=postgres_dsn, outbox_table_name=outbox, partition_poll_interval=0.05
    )
    pg = PostgresConsumer("c1", settings, Dispatcher("c1", flaky, metrics, 1 << 20))
    await insert(postgres_dsn, outbox, [publish("first", 1), publish("flaky", 2), publish("after", 3)])
    async with running(pg):
        await wait_until(lambda: history(rt, "after"), what="the row after the flaky one")
        # Published before its row is deleted: leaving the block earlier would cancel that round.
        await wait_until(lambda: _zero(count_rows(postgres_dsn, outbox)), what="the outbox emptied")
    assert calls == ["first", "flaky", "flaky", "flaky", "flaky", "after"]  # in order, at least once
    assert await history(rt, "flaky") == [2]
    assert sample(rt, "centrifugo_consumers_errors_total") == 3
    await rt.close()


async def test_a_notification_wakes_the_partition_long_before_its_poll(
    tmp_path: Path, postgres_dsn: str, outbox: str
) -> None:
    channel = f"{outbox}_change"
    conn = await asyncpg.connect(postgres_dsn)
    await conn.execute(NOTIFY.format(table=outbox, channel=channel))
    rt = runtime(
        tmp_path,
        [
            consumer(
                postgres_dsn, outbox, partition_poll_interval="300s", partition_notification_channel=channel
            )
        ],
    )
    try:
        async with running(*rt.consumers):

            async def listening() -> bool:
                found = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = $1", f'LISTEN "{channel}"'
                )
                return bool(found)

            await wait_until(listening, what="the consumer's LISTEN")
            await insert(postgres_dsn, outbox, [publish("news", "woken")])
            # Bounded far below the 300 s poll: only the notification can deliver it in time.
            await wait_until(lambda: history(rt, "news"), within=20, what="the notified row")
    finally:
        await conn.close()
    assert await history(rt, "news") == ["woken"]
    await rt.close()


@pytest.mark.parametrize("use_try_lock", [False, True])
async def test_two_gateways_share_a_table_each_row_once_in_partition_order(
    tmp_path: Path, postgres_dsn: str, outbox: str, use_try_lock: bool
) -> None:
    rows = [publish(f"p{n % 2}", n) for n in range(60)]
    rows = [(method, payload, n % 2) for n, (method, payload, _) in enumerate(rows)]
    await insert(postgres_dsn, outbox, rows)
    config = consumer(
        postgres_dsn, outbox, num_partitions=2, partition_select_limit=7, use_try_lock=use_try_lock
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rt_a, rt_b = runtime(tmp_path / "a", [config]), runtime(tmp_path / "b", [config])
    async with running(*rt_a.consumers, *rt_b.consumers):
        await wait_until(lambda: _zero(count_rows(postgres_dsn, outbox)), what="every row handled")
    for partition in (0, 1):
        got_a, got_b = await history(rt_a, f"p{partition}"), await history(rt_b, f"p{partition}")
        assert sorted(got_a + got_b) == list(range(partition, 60, 2))  # each row once
        assert got_a == sorted(got_a) and got_b == sorted(got_b)  # each gateway's share in order
    await rt_a.close()
    await rt_b.close()


async def test_an_unreachable_database_is_retried_never_fatal(tmp_path: Path) -> None:
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    rt = runtime(tmp_path, [consumer(dead, "centrifugo_outbox")])
    async with running(*rt.consumers):
        await wait_until(lambda: sample(rt, "centrifugo_consumers_errors_total") >= 2, what="retries")
    await rt.close()


async def _len_is(values: Any, n: int) -> bool:
    return bool(len(await values) == n)


async def _zero(count: Any) -> bool:
    return bool(await count == 0)
