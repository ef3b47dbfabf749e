"""A claim's cost in statements, and its order on both of its paths (issue 16), on real MariaDB.

The claim is the relay's hot path between a wake-up hint and the publish: every statement is a
round trip to MariaDB. Counted with the server's own per-session counters (``SHOW SESSION STATUS``
on an engine of one pooled connection, so every transaction runs on the session we read):

* a connection goes back to the pool without a reset ROLLBACK after ``engine.begin()`` committed
  (before: COMMIT + ROLLBACK per transaction), and a transaction left open is still rolled back;
* a claim with fewer due rows than its limit is one SELECT (+ the lease UPDATE + COMMIT), where
  the three priority tiers were three SELECTs;
* both paths (few rows, backlog) return rows in tier order: priority first, then due time, then id;
* the mark of a published batch on the relay's autocommit engine is one UPDATE: no COMMIT, no
  ROLLBACK (it was UPDATE + COMMIT in a transaction);
* with ``hold_connections`` claims and marks keep one pooled connection each and reuse it (no pool
  checkout per cycle); a held connection the server dropped fails one claim, is discarded, and
  the next claim runs on a fresh one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from relay.claim import OutboxLeases, create_engine, utc_now
from relay.config import build_config
from relay.publisher import PUBLISHED, PublishResult
from relay.relay import Relay
from status_api.storage import database, outbox_claims, write
from status_api.storage.driver_statements import DriverCursor
from status_api.storage.outbox import OutboxMessage, OutboxRow
from status_api.storage.tables import task_outbox

pytestmark = pytest.mark.mysql

COUNTERS = ("Com_select", "Com_update", "Com_commit", "Com_rollback")


@pytest.fixture
async def one_conn(relay_db_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine of exactly one pooled connection: every transaction runs on the one session."""
    eng = create_engine(relay_db_url, pool_size=1, max_overflow=0)
    async with eng.begin() as conn:
        await conn.execute(task_outbox.delete())
    yield eng
    await eng.dispose()


async def session_counters(eng: AsyncEngine) -> dict[str, int]:
    """This session's statement counters. Reading them is itself one transaction: ended by the
    Connection's own ROLLBACK on close (+1 Com_rollback), which :func:`delta` subtracts."""
    async with eng.connect() as conn:
        rows = (await conn.exec_driver_sql("SHOW SESSION STATUS")).all()
    return {str(r[0]): int(r[1]) for r in rows if r[0] in COUNTERS}


async def delta(eng: AsyncEngine, before: dict[str, int], *, autocommit: bool = False) -> dict[str, int]:
    after = await session_counters(eng)
    out = {k: after[k] - before[k] for k in COUNTERS}
    if not autocommit:  # no transaction to end on an autocommit engine
        out["Com_rollback"] -= 1  # the read of ``before`` ended with its own rollback
    return out


async def add(eng: AsyncEngine, task: str, priority: int, *, age_s: float = 0.0, version: int = 2) -> None:
    async with eng.begin() as conn:
        await write.append_outbox_version(
            conn,
            task,
            version,
            [OutboxMessage(f"ch:{task}", "TASK_DETAIL", {"t": task}, priority)],
            utc_now() - timedelta(seconds=age_s),
        )


async def test_a_committed_transaction_goes_back_to_the_pool_without_a_rollback(
    one_conn: AsyncEngine,
) -> None:
    before = await session_counters(one_conn)
    for _ in range(5):
        async with one_conn.begin() as conn:
            await conn.execute(sa.select(sa.func.count()).select_from(task_outbox))
    d = await delta(one_conn, before)
    assert d["Com_commit"] == 5
    assert d["Com_rollback"] == 0, d  # was 5: the pool's reset after every COMMIT


async def test_a_transaction_left_open_is_rolled_back_when_its_connection_returns(
    one_conn: AsyncEngine,
) -> None:
    """The reset still runs when the server says a transaction is open: a raw DBAPI connection
    that wrote without committing gives back a clean session, and the write is gone."""

    def write_and_return() -> None:  # the pool's own path, as SQLAlchemy runs it (in a greenlet)
        raw = one_conn.sync_engine.raw_connection()
        try:
            cur = raw.cursor()
            cur.execute(
                "INSERT INTO task_outbox (aggregate_type, aggregate_id, aggregate_version, channel,"
                " projection, payload, status, priority, available_at, attempts, created_at) VALUES"
                " ('task', 'left-open', 1, 'c', 'p', '{}', 'PENDING', 0, NOW(3), 0, NOW(3))"
            )
            cur.close()
        finally:
            raw.close()

    await greenlet_spawn(write_and_return)
    async with one_conn.connect() as conn:  # the same session: it would see its own open insert
        n = (await conn.execute(sa.select(sa.func.count()).select_from(task_outbox))).scalar_one()
    assert n == 0


@pytest.mark.parametrize("takeover", [False, True], ids=["hint", "poll"])
async def test_a_claim_with_room_is_one_select(one_conn: AsyncEngine, takeover: bool) -> None:
    """Plus the next-due read (``outbox_claims.next_due``, one index seek) of a claim with room."""
    leases = OutboxLeases(one_conn, "r-rt", lease_seconds=30)
    before = await session_counters(one_conn)
    assert await leases.claim(10, takeover=takeover) == []
    d = await delta(one_conn, before)
    # Empty: the due SELECT, the next-due read (+ the takeover scan for a poll) and the COMMIT;
    # no tiers, no ROLLBACK.
    assert d == {"Com_select": 2 + takeover, "Com_update": 0, "Com_commit": 1, "Com_rollback": 0}, d

    for i in range(3):
        await add(one_conn, f"rt-{i}", 0)
    before = await session_counters(one_conn)
    rows = await leases.claim(10, takeover=takeover)
    d = await delta(one_conn, before)
    assert len(rows) == 3
    assert d == {"Com_select": 2 + takeover, "Com_update": 1, "Com_commit": 1, "Com_rollback": 0}, d


async def test_both_claim_paths_return_tier_order(one_conn: AsyncEngine) -> None:
    """Priority first (notice 10 > new task 5 > progress 0 > negative), then due time, then id —
    whether the claim took every due row in one SELECT or had to walk the tiers."""
    spec = [  # (task, priority, age seconds): insertion order is neither due nor priority order
        ("p0-new", 0, 1.0),
        ("neg", -3, 9.0),
        ("notice", 10, 0.5),
        ("p0-old", 0, 5.0),
        ("new-task", 5, 2.0),
        ("neg-urgent", -1, 0.1),
    ]
    for task, prio, age in spec:
        await add(one_conn, task, prio, age_s=age)
    expected = ["notice", "new-task", "p0-old", "p0-new", "neg-urgent", "neg"]

    leases = OutboxLeases(one_conn, "r-order", lease_seconds=30)
    few = await leases.claim(len(spec) + 1, takeover=False)  # room left: the one-SELECT path
    assert [r.aggregate_id for r in few] == expected
    assert all(r.attempts == 1 for r in few)

    async with one_conn.begin() as conn:
        await conn.execute(task_outbox.delete())
    for task, prio, age in spec:
        await add(one_conn, task, prio, age_s=age)
    taken: list[str] = []
    before = await session_counters(one_conn)
    while batch := await leases.claim(2, takeover=False):  # always full: the tier path
        taken += [r.aggregate_id for r in batch]
    d = await delta(one_conn, before)
    assert taken == expected
    assert d["Com_select"] > 4  # the tiers ran: the full first SELECT was not trusted for order


async def test_a_backlog_claim_leases_only_what_it_returns(one_conn: AsyncEngine) -> None:
    """On the tier path the first SELECT's rows that the tiers leave out stay PENDING and unleased."""
    for i in range(4):
        await add(one_conn, f"bulk-{i}", 0, age_s=10.0 - i)
    await add(one_conn, "urgent", 10, age_s=0.0)  # the newest row, but the most urgent
    leases = OutboxLeases(one_conn, "r-backlog", lease_seconds=30)
    rows = await leases.claim(2, takeover=False)
    assert [r.aggregate_id for r in rows] == ["urgent", "bulk-0"]
    async with one_conn.connect() as conn:
        states = dict((await conn.execute(sa.select(task_outbox.c.aggregate_id, task_outbox.c.status))).all())
        locked = (
            await conn.execute(sa.select(sa.func.count()).where(task_outbox.c.locked_by.is_not(None)))
        ).scalar_one()
    assert states == {
        "urgent": "PROCESSING",
        "bulk-0": "PROCESSING",
        "bulk-1": "PENDING",
        "bulk-2": "PENDING",
        "bulk-3": "PENDING",
    }
    assert locked == 2


async def test_a_backlog_beyond_the_probe_is_claimed_in_tier_order(one_conn: AsyncEngine) -> None:
    """More due rows than the first query reads (``FAST_CLAIM_ROWS``), the most urgent one newest:
    the claim walks the tiers and still takes everything it has room for, urgent first."""
    n = outbox_claims.FAST_CLAIM_ROWS + 6
    async with one_conn.begin() as conn:
        old = utc_now() - timedelta(seconds=60)
        await write.append_outbox(
            conn,
            [
                (
                    f"bulk-{i:03d}",
                    2,
                    [OutboxMessage("ch", "TASK_DETAIL", {"i": i}, 0)],
                    old + timedelta(milliseconds=i),
                )
                for i in range(n)
            ],
        )
    await add(one_conn, "urgent", 10)
    leases = OutboxLeases(one_conn, "r-probe", lease_seconds=30)
    before = await session_counters(one_conn)
    rows = await leases.claim(n + 10, takeover=False)
    d = await delta(one_conn, before)
    assert [r.aggregate_id for r in rows] == ["urgent"] + [f"bulk-{i:03d}" for i in range(n)]
    assert d["Com_select"] == 4 + 1  # the bounded probe, the three tiers, the next-due read


async def test_a_claim_marked_backlog_skips_the_probe(one_conn: AsyncEngine) -> None:
    for i in range(3):
        await add(one_conn, f"bk-{i}", 0)
    leases = OutboxLeases(one_conn, "r-bk", lease_seconds=30)
    before = await session_counters(one_conn)
    rows = await leases.claim(10, takeover=False, backlog=True)
    d = await delta(one_conn, before)
    assert len(rows) == 3
    assert d["Com_select"] == 3 + 1  # the tiers only, then the next-due read (the claim had room)


class _Flags(OutboxLeases):
    """Real leases that record each claim's ``backlog`` flag."""

    flags: list[bool]

    async def claim(self, limit: int, *, takeover: bool = True, backlog: bool = False) -> list[OutboxRow]:
        self.flags.append(backlog)
        return await super().claim(limit, takeover=takeover, backlog=backlog)


async def test_the_relay_skips_the_probe_only_after_a_full_batch(one_conn: AsyncEngine) -> None:
    """A full batch says "backlog": the next claim goes straight to the tiers; a short one (the
    backlog's tail) turns the probe back on."""
    for i in range(7):
        await add(one_conn, f"rl-{i}", 0)
    leases = _Flags(one_conn, "r-flags", lease_seconds=30)
    leases.flags = []
    relay = Relay(
        leases,
        _Published(),
        build_config(
            {
                "database_url": "sqlite+aiosqlite:///unused.db",
                "gateway_api_url": "http://unused/api",
                "relay_id": "r-flags",
                "batch_size": 3,
            }
        ),
    )
    claimed = [(await relay.run_batch()).claimed for _ in range(4)]
    assert claimed == [3, 3, 1, 0]
    assert leases.flags == [False, True, True, False]
    for i in range(7):
        await add(one_conn, f"rl2-{i}", 0)
    assert (await relay.run_batch()).claimed == 3  # full again
    assert (await relay.run_batch(limit=1)).claimed == 1  # the gateway prober's one-row claim:
    assert (await relay.run_batch()).claimed == 3  # full, but says nothing of the backlog
    assert leases.flags[-3:] == [False, True, True]


class _Published:
    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        return [PUBLISHED for _ in rows]

    async def aclose(self) -> None:
        return None


async def test_the_mark_of_a_published_batch_is_one_statement(
    relay_db_url: str, one_conn: AsyncEngine
) -> None:
    settle = create_engine(relay_db_url, pool_size=1, max_overflow=0, autocommit=True)
    try:
        leases = OutboxLeases(one_conn, "r-mark", lease_seconds=30, settle_engine=settle)
        for i in range(3):
            await add(one_conn, f"mk-{i}", 0)
        rows = await leases.claim(10, takeover=False)
        before = await session_counters(settle)
        assert await leases.settle([r.id for r in rows], [], []) == (3, 0, 0)
        d = await delta(settle, before, autocommit=True)
        assert d == {"Com_select": 0, "Com_update": 1, "Com_commit": 0, "Com_rollback": 0}, d
        async with one_conn.connect() as conn:  # committed: another session sees it
            q = sa.select(sa.func.count()).where(task_outbox.c.status == "PUBLISHED")
            assert (await conn.execute(q)).scalar_one() == 3
        # Rows no longer ours are left alone, as in a transaction.
        assert await leases.settle([r.id for r in rows], [], []) == (0, 0, 0)
    finally:
        await settle.dispose()


async def test_held_connections_are_reused_and_a_dropped_one_is_replaced(
    relay_db_url: str, one_conn: AsyncEngine
) -> None:
    settle = create_engine(relay_db_url, pool_size=1, max_overflow=0, autocommit=True)
    killer = create_engine(relay_db_url, pool_size=1, max_overflow=0)
    try:
        async with one_conn.connect() as conn:  # the one pooled session the leases will hold
            session = (await conn.exec_driver_sql("SELECT CONNECTION_ID()")).scalar_one()
        leases = OutboxLeases(
            one_conn, "r-held", lease_seconds=30, settle_engine=settle, hold_connections=True
        )
        for cycle in range(2):
            await add(one_conn, f"held-{cycle}", 0)
            rows = await leases.claim(10, takeover=False)
            assert [r.aggregate_id for r in rows] == [f"held-{cycle}"]
            assert await leases.settle([r.id for r in rows], [], []) == (1, 0, 0)
            # Both stay checked out between cycles: the claims and the marks take no checkout.
            assert one_conn.sync_engine.pool.checkedout() == 1  # type: ignore[attr-defined]
            assert settle.sync_engine.pool.checkedout() == 1  # type: ignore[attr-defined]
            await leases.return_connections()  # (``add`` needs the claims engine's one connection)

        await leases.claim(10, takeover=False)  # held again
        async with killer.connect() as conn:
            await conn.exec_driver_sql(f"KILL {int(session)}")
        with pytest.raises(sa.exc.DBAPIError):
            await leases.claim(10, takeover=False)
        assert one_conn.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        await add(one_conn, "held-after", 0)
        rows = await leases.claim(10, takeover=False)
        assert [r.aggregate_id for r in rows] == ["held-after"]
        await leases.dispose()
    finally:
        await killer.dispose()
        await settle.dispose()


class _Requests:
    """Every request the engine's asyncmy connections send (``execute``: one COM_QUERY or
    COM_STMT_EXECUTE each, i.e. one round trip), recorded by the driver's own query callback."""

    def __init__(self, eng: AsyncEngine) -> None:
        self.sent: list[str] = []

        def on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.driver_connection._query_callback = lambda _cur, query, _ms: self.sent.append(
                str(query)
            )

        event.listen(eng.sync_engine, "connect", on_connect)

    def take(self) -> list[str]:
        sent, self.sent = self.sent, []
        return sent


@pytest.fixture
async def counted(relay_db_url: str) -> AsyncIterator[tuple[OutboxLeases, _Requests, _Requests]]:
    """Leases opened as the relay opens them (held connections, an autocommit settle engine), with
    the requests of each engine recorded."""
    claims = create_engine(relay_db_url, pool_size=2, max_overflow=0)
    settle = create_engine(relay_db_url, pool_size=2, max_overflow=0, autocommit=True)
    recorded = _Requests(claims), _Requests(settle)
    async with claims.begin() as conn:
        await conn.execute(task_outbox.delete())
    leases = OutboxLeases(claims, "r-req", lease_seconds=30, settle_engine=settle, hold_connections=True)
    yield leases, *recorded
    await leases.dispose()


@pytest.mark.parametrize("takeover", [False, True], ids=["hint", "poll"])
async def test_a_claim_is_two_requests_and_a_cycle_three(
    counted: tuple[OutboxLeases, _Requests, _Requests], takeover: bool
) -> None:
    """A claim with room is two round trips whatever it finds: its locking reads (the expired-lease
    scan of a poll rides along with the due rows' probe), then the lease UPDATE, the next-due read
    and the COMMIT. With the mark of the published batch, a cycle is three (it was five)."""
    leases, claim_reqs, settle_reqs = counted
    claim_reqs.take()
    assert await leases.claim(10, takeover=takeover) == []
    sent = claim_reqs.take()
    assert len(sent) == 2, sent
    assert sent[0].count("SKIP LOCKED") == 1 + takeover
    assert "min(" in sent[1] and sent[1].endswith("COMMIT"), sent[1]

    for i in range(3):
        await add(leases.engine, f"req-{takeover}-{i}", 0)
    claim_reqs.take()
    rows = await leases.claim(10, takeover=takeover)
    assert len(rows) == 3
    assert await leases.settle([r.id for r in rows], [], []) == (3, 0, 0)
    sent, marks = claim_reqs.take(), settle_reqs.take()
    assert len(sent) == 2, sent
    assert sent[0].count("SKIP LOCKED") == 1 + takeover
    assert sent[1].startswith("UPDATE") and "min(" in sent[1] and sent[1].endswith("COMMIT"), sent[1]
    assert len(marks) == 1 and marks[0].startswith("UPDATE"), marks


async def test_a_two_request_claim_keeps_leases_order_and_the_next_due_time(
    counted: tuple[OutboxLeases, _Requests, _Requests],
) -> None:
    """A poll whose expired leases and due rows together exceed its limit takes the expired leases
    first (oldest lease first), then due rows in tier order; the rest stay PENDING and unleased;
    the due time of a held-back row is read in the same two requests."""
    leases, claim_reqs, _ = counted
    eng = leases.engine
    for task, prio in (("due-a", 0), ("due-b", 10), ("stale-2", 0), ("stale-1", 0), ("held", 0)):
        await add(eng, task, prio)
    held_until = utc_now() + timedelta(seconds=30)
    c = task_outbox.c
    async with eng.begin() as conn:
        for task, age in (("stale-1", 90), ("stale-2", 60)):
            await conn.execute(
                task_outbox.update()
                .where(c.aggregate_id == task)
                .values(status="PROCESSING", locked_by="gone", locked_at=utc_now() - timedelta(seconds=age))
            )
        await conn.execute(
            task_outbox.update().where(c.aggregate_id == "held").values(available_at=held_until)
        )
    claim_reqs.take()
    rows = await leases.claim(3, takeover=True)
    assert len(claim_reqs.take()) == 2
    assert [(r.aggregate_id, r.taken_over) for r in rows] == [
        ("stale-1", True),
        ("stale-2", True),
        ("due-b", False),
    ]
    assert leases.next_due is None  # a full claim reads no due time
    async with eng.connect() as conn:  # committed: another session sees the leases
        states = dict((await conn.execute(sa.select(c.aggregate_id, c.locked_by))).all())
    assert states == {"stale-1": "r-req", "stale-2": "r-req", "due-b": "r-req", "due-a": None, "held": None}

    rows = await leases.claim(3, takeover=True)
    assert [r.aggregate_id for r in rows] == ["due-a"]
    assert leases.next_due == held_until


async def test_a_held_connection_bounds_each_claim_and_gets_its_read_timeout_back(
    relay_db_url: str, one_conn: AsyncEngine
) -> None:
    """While held, the driver's per-read timeout is replaced by one bound on the whole body: a
    body that outlives it fails as the driver's lost-connection error (2013) and the connection is
    dropped; a connection given back to the pool has the driver's read timeout again."""
    leases = OutboxLeases(one_conn, "r-bound", lease_seconds=30, hold_connections=True)
    assert await leases.claim(10, takeover=False) == []
    (held,) = leases._held[one_conn]
    assert held.driver._read_timeout is None and held.read_timeout == database.READ_TIMEOUT_SECONDS
    held.read_timeout = 0.2  # (the production bound is 10 s)

    async def stalled(cur: DriverCursor) -> None:
        await cur.execute("SELECT SLEEP(5)")

    with pytest.raises(sa.exc.DBAPIError) as failed:
        await leases._driver(one_conn, stalled, transactional=True)
    assert failed.value.orig is not None and failed.value.orig.args[0] == 2013
    assert one_conn.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    await add(one_conn, "after-stall", 0)
    assert [r.aggregate_id for r in await leases.claim(10, takeover=False)] == ["after-stall"]

    await leases.return_connections()
    async with one_conn.connect() as conn:
        raw = await conn.get_raw_connection()
        assert raw.driver_connection._read_timeout == database.READ_TIMEOUT_SECONDS  # type: ignore[union-attr]
    await leases.dispose()
