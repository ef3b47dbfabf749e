"""MariaDB only: 50 concurrent reporters on one task get versions 2..51 with no gap or duplicate and
exactly one outbox row per version, carrying every projection."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from status_api.storage.outbox import VERSION_PROJECTION
from status_api.storage.tables import task_event_log, task_outbox
from tests.status_api.harness import Harness

pytestmark = pytest.mark.mysql


@pytest.fixture
def db_url(mysql_db_url: str) -> str:
    return mysql_db_url


async def test_fifty_concurrent_reporters_one_task_versions_2_to_51(h: Harness) -> None:
    steps = [
        {"stepId": f"s{i:02d}", "operationCode": "DOCUMENT.PARSE", "producerId": f"document-parser-{i}"}
        for i in range(50)
    ]
    t = await h.create_task(project="p1", steps=steps)
    bodies = [
        (h.step_event(t, s["stepId"], "STEP_STARTED", "PARSING"), t.steps[s["stepId"]].token) for s in steps
    ]
    results = await asyncio.gather(*(h.send(b, tok) for b, tok in bodies))
    versions = sorted(int(r["taskVersion"]) for r in results)
    assert versions == list(range(2, 52))
    async with h.comp.engine.connect() as conn:
        logged = [
            int(r[0])
            for r in await conn.execute(
                sa.select(task_event_log.c.task_version).where(task_event_log.c.task_id == t.id)
            )
        ]
        per = (
            await conn.execute(
                sa.select(task_outbox.c.aggregate_version, task_outbox.c.projection, sa.func.count())
                .where(task_outbox.c.aggregate_id == t.id)
                .group_by(task_outbox.c.aggregate_version, task_outbox.c.projection)
            )
        ).all()
    assert sorted(logged) == list(range(1, 52))
    assert len(per) == 51 and all(int(c) == 1 and p == VERSION_PROJECTION for _, p, c in per)
    pubs = await h.outbox_publications(t.id)
    assert len(pubs) == 51 * 3 and len({(r["aggregate_version"], r["projection"]) for r in pubs}) == 51 * 3
    # retries of all 50 after "lost responses" return the first versions, concurrently too
    again = await asyncio.gather(*(h.send(b, tok) for b, tok in bodies))
    assert [r["taskVersion"] for r in again] == [r["taskVersion"] for r in results]
    assert all(r["duplicate"] for r in again)
