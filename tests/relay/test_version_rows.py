"""A task version's ONE outbox row (``outbox.VERSION_PROJECTION``) through a real relay, MariaDB and
a real gateway process: every publication of a row reaches its channel once, with the commit-time
tag of its row, next to rows of one projection each (written before VERSION rows existed); a row
whose one publication the gateway refuses ends DEAD as a whole (operators see its channels), a
malformed VERSION payload ends DEAD alone; superseded progress rows are dropped per task."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.publisher import committed_at_ms
from relay.relay import Relay
from status_api.storage.outbox import VERSION_PROJECTION
from status_api.storage.tables import task_outbox
from tests.relay.harness import (
    RowSpec,
    Subscriber,
    detail_channel,
    drain,
    insert,
    make_relay,
    plan,
    relay_config,
    statuses,
    user_channel,
    wait_until,
)
from tests.support import GatewayProcess

pytestmark = pytest.mark.mysql


def _relay(engine: AsyncEngine, gateway: GatewayProcess, **overrides: object) -> Relay:
    return make_relay(engine, relay_config(engine.url.render_as_string(False), gateway, **overrides))


def _sample(relay: Relay, name: str, **labels: str) -> float:
    return relay.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_each_publication_of_a_version_row_reaches_its_channel_once_beside_legacy_rows(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    versioned = plan(tasks=3, versions=4)  # 12 rows of 2 publications
    legacy = plan(tasks=2, versions=2)  # 8 rows of one projection each
    await insert(engine, versioned, one_row=True)
    await insert(engine, legacy)
    async with engine.connect() as conn:
        rows = list(await conn.execute(sa.select(task_outbox)))
    assert {r.projection for r in rows} == {VERSION_PROJECTION, "USER_SUMMARY", "TASK_DETAIL"}
    created = {(r.aggregate_id, int(r.aggregate_version)): (r.projection, r.created_at) for r in rows}
    relay = _relay(engine, gateway, batch_size=100)
    specs = versioned + legacy
    async with Subscriber(gateway, sorted({s.channel for s in specs})) as sub:
        assert await drain(relay) == 12 + 8  # rows
        await wait_until(lambda: sub.has_all(specs), what="every publication")
        sub.assert_exactly_once(specs)
        sub.assert_gate_monotonic(specs)
    assert await statuses(engine) == {"PUBLISHED": 20}
    for _channel, task, version, tags in sub.received:
        assert tags["committed_at_ms"] == str(committed_at_ms(created[(task, version)][1]))
        assert tags["task"] == task
    await relay.publisher.aclose()


async def test_a_refused_publication_kills_its_row_and_a_malformed_row_dies_alone(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    good = plan(tasks=2, versions=2)
    refused = [RowSpec("t-refused", 1, user_channel(0)), RowSpec("t-refused", 1, "no_such_namespace:t1/x")]
    await insert(engine, good, one_row=True)
    await insert(engine, refused, one_row=True)
    async with engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO task_outbox (aggregate_type, aggregate_id, aggregate_version, channel,"
                " projection, payload, status, priority, available_at, attempts, created_at)"
                " VALUES ('task', 't-malformed', 1, :ch, :p, :payload, 'PENDING', 0, UTC_TIMESTAMP(3), 0,"
                " UTC_TIMESTAMP(3))"
            ),
            {"ch": user_channel(1), "p": VERSION_PROJECTION, "payload": '[{"channel": "x"}]'},
        )
    relay = _relay(engine, gateway, batch_size=100)
    async with Subscriber(gateway, sorted({s.channel for s in good})) as sub:
        assert await drain(relay) == 4 + 2
        await wait_until(lambda: sub.has_all(good), what="the good rows' publications")
    assert await statuses(engine) == {"PUBLISHED": 4, "DEAD": 2}
    dead = {d.aggregate_id: d for d in await relay.leases.list_dead()}
    assert dead["t-refused"].channel == f"{user_channel(0)},no_such_namespace:t1/x"
    assert dead["t-refused"].projection == "USER_SUMMARY,TASK_DETAIL"
    assert "102" in (dead["t-refused"].last_error or "")
    assert (dead["t-malformed"].channel, dead["t-malformed"].projection) == (
        user_channel(1),
        VERSION_PROJECTION,
    )
    assert "VERSION payload" in (dead["t-malformed"].last_error or "")
    assert (
        _sample(relay, "taskcast_relay_publish_failures_total", failure_class="malformed", outcome="dead")
        == 1
    )
    await relay.publisher.aclose()


async def test_superseded_progress_version_rows_are_dropped_per_task_on_both_channels(
    engine: AsyncEngine, gateway: GatewayProcess
) -> None:
    task = "t-collapse-v"
    specs = [RowSpec(task, v, ch) for v in range(2, 12) for ch in (user_channel(3), detail_channel(task))]
    notice = [RowSpec(task, 12, ch, priority=10) for ch in (user_channel(3), detail_channel(task))]
    last = [RowSpec(task, 13, ch) for ch in (user_channel(3), detail_channel(task))]
    await insert(engine, specs + notice + last, one_row=True)
    relay = _relay(engine, gateway, batch_size=100, collapse_superseded_progress=True)
    async with Subscriber(gateway, [user_channel(3), detail_channel(task)]) as sub:
        assert await drain(relay) == 12  # rows: 10 progress, the notice, the newest
        await wait_until(lambda: len(sub.received) == 4, what="four publications")
        assert sorted((c, v) for c, _, v, _ in sub.received) == sorted(
            (c, v) for v in (12, 13) for c in (user_channel(3), detail_channel(task))
        )
    assert await statuses(engine) == {"PUBLISHED": 12}
    assert _sample(relay, "taskcast_relay_superseded_rows_total") == 10
    await relay.publisher.aclose()
