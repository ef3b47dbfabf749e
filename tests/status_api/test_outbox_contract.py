"""The outbox contract the relay reads (issue 14): one message type and one priority rule in
``storage/outbox.py``, the relay's claims and the operators' queries beside it (none of them loads
anything of the domain), and one enum per projection."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from status_api.domain.projections import Projection, detail_channel, project_channel, user_channel
from status_api.storage import outbox, outbox_admin, outbox_claims, write
from status_api.storage.outbox import Priority, effective_priority, supersedable
from status_api.storage.tables import task_outbox
from tests.status_api.harness import Harness

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_outbox_loads_no_domain_or_service() -> None:
    code = (
        "import sys, status_api.storage.outbox, status_api.storage.outbox_claims, "
        "status_api.storage.outbox_admin; "
        "bad = [m for m in sys.modules if m.startswith(('status_api.domain', 'status_api.service'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("priority", "version", "stored", "superseded"),
    [
        (Priority.PROGRESS, 7, 0, True),
        (Priority.PROGRESS, 1, Priority.NEW_AGGREGATE, False),  # a new task never waits behind progress
        (Priority.NOTICE, 1, Priority.NOTICE, False),
        (Priority.NOTICE, 9, Priority.NOTICE, False),
        (-3, 4, -3, True),
    ],
)
def test_priority_floor_and_superseding(priority: int, version: int, stored: int, superseded: bool) -> None:
    assert effective_priority(priority, version) == stored
    assert supersedable(stored) is superseded
    assert Priority.of(urgent=True) is Priority.NOTICE and Priority.of(urgent=False) is Priority.PROGRESS
    assert outbox.PRIORITY_NEW_AGGREGATE == Priority.NEW_AGGREGATE


def test_a_projection_is_one_enum_with_its_kind_and_namespace() -> None:
    assert [(p.name, p.kind, p.namespace) for p in Projection] == [
        ("USER_SUMMARY", "task.summary", "task_user"),
        ("TASK_DETAIL", "task.detail", "task_detail"),
        ("PROJECT_BROADCAST", "task.project", "task_project"),
    ]
    assert user_channel("t1", "u1") == "task_user:t1/u1"
    assert detail_channel("t1", "x") == "task_detail:t1/x"
    assert project_channel("t1", "p") == "task_project:t1/p"


async def test_stored_rows_carry_projection_name_kind_and_priority(h: Harness) -> None:
    t = await h.create_task(project="p1")
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    await h.task_event(t, "TASK_CANCELLED", "CANCELLED")
    rows = await h.outbox_rows(t.id)
    # ONE row per version: a VERSION row on the owner's user channel carrying all three projections
    assert [(r["aggregate_version"], r["projection"], r["channel"]) for r in rows] == [
        (v, outbox.VERSION_PROJECTION, "task_user:t1/u1") for v in (1, 2, 3)
    ]
    pubs = await h.outbox_publications(t.id)
    by_version: dict[int, set[int]] = {}
    for r in pubs:
        p = Projection[r["projection"]]
        assert r["payload"]["kind"] == p.kind and r["channel"].startswith(p.namespace + ":")
        by_version.setdefault(r["aggregate_version"], set()).add(r["priority"])
    assert by_version == {1: {Priority.NEW_AGGREGATE}, 2: {Priority.PROGRESS}, 3: {Priority.NOTICE}}
    assert [r["projection"] for r in pubs] == ["USER_SUMMARY", "TASK_DETAIL", "PROJECT_BROADCAST"] * 3


async def test_release_can_refund_the_claims_attempt(h: Harness) -> None:
    now = h.clock()
    msg = outbox.OutboxMessage("task_user:t1/u1", "USER_SUMMARY", {"kind": "task.summary"}, 0)
    async with h.comp.engine.begin() as conn:
        await conn.execute(task_outbox.delete())
        await write.append_outbox_version(conn, "refund-task", 2, [msg], now)

    async def cycle(refund: bool) -> int:
        async with h.comp.engine.begin() as conn:
            (row,) = await outbox_claims.claim(conn, "relay-a", 10, now)
            assert await outbox_claims.release(conn, [row.id], "relay-b", now, refund_attempt=refund) == 0
            assert await outbox_claims.release(conn, [row.id], "relay-a", now, refund_attempt=refund) == 1
        async with h.comp.engine.connect() as conn:
            return int(await conn.scalar(sa.select(task_outbox.c.attempts)))

    assert await cycle(refund=True) == 0  # a gateway-wide failure: the attempt does not count
    assert await cycle(refund=False) == 1  # graceful shutdown: attempts unchanged by release
    async with h.comp.engine.begin() as conn:
        await conn.execute(task_outbox.delete())  # the harness validates real projections at teardown


async def test_published_rows_keep_their_lease_and_retention_reads_by_it(h: Harness) -> None:
    """A published row keeps ``locked_by``/``locked_at`` (who published it, when it was leased);
    retention deletes exactly the PUBLISHED rows published before its cutoff, rows published before
    lease times were kept (``locked_at`` NULL) included, and nothing else."""
    now = h.clock()
    msg = outbox.OutboxMessage("task_user:t1/u1", "USER_SUMMARY", {"kind": "task.summary"}, 0)
    later = now + timedelta(seconds=60)
    async with h.comp.engine.begin() as conn:
        await conn.execute(task_outbox.delete())
        for version in (1, 2, 3):
            await write.append_outbox_version(conn, "lease-task", version, [msg], now)
        rows = await outbox_claims.claim(conn, "relay-a", 10, now)
        assert len(rows) == 3
        published = [r.id for r in rows[:2]]
        assert await outbox_claims.mark_published(conn, published, "relay-a", now + timedelta(seconds=1)) == 2
        await outbox_claims.release(conn, [rows[2].id], "relay-a", now)  # stays PENDING
        await write.append_outbox_version(conn, "legacy-task", 1, [msg], now)
        await conn.execute(  # published by an older relay, which cleared the lease columns
            task_outbox.update()
            .where(task_outbox.c.aggregate_id == "legacy-task")
            .values(status="PUBLISHED", published_at=now, locked_by=None, locked_at=None)
        )
    c = task_outbox.c
    async with h.comp.engine.connect() as conn:
        kept = (await conn.execute(sa.select(c.locked_by, c.locked_at).where(c.id.in_(published)))).all()
    assert kept == [("relay-a", now), ("relay-a", now)]
    async with h.comp.engine.begin() as conn:  # a cutoff before the publications: nothing to do
        assert await outbox_admin.purge_published(conn, now - timedelta(seconds=1)) == 0
    async with h.comp.engine.begin() as conn:
        assert await outbox_admin.purge_published(conn, later, limit=2) == 2
        assert await outbox_admin.purge_published(conn, later, limit=2) == 1
        assert await outbox_admin.purge_published(conn, later, limit=2) == 0
    async with h.comp.engine.begin() as conn:
        left = (await conn.execute(sa.select(c.aggregate_id, c.status))).all()
        await conn.execute(task_outbox.delete())  # the harness validates real projections at teardown
    assert left == [("lease-task", "PENDING")]
