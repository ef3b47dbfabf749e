"""The outbox contract the relay reads (issue 14): one message type and one priority rule in
``storage/outbox.py`` (which loads nothing of the domain), and one enum per projection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from status_api.domain.projections import Projection, detail_channel, project_channel, user_channel
from status_api.storage import outbox
from status_api.storage.outbox import Priority, effective_priority, supersedable
from tests.status_api.harness import Harness

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_outbox_loads_no_domain_or_service() -> None:
    code = (
        "import sys, status_api.storage.outbox; "
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
    by_version: dict[int, set[int]] = {}
    for r in rows:
        p = Projection[r["projection"]]
        assert r["payload"]["kind"] == p.kind and r["channel"].startswith(p.namespace + ":")
        by_version.setdefault(r["aggregate_version"], set()).add(r["priority"])
    assert by_version == {1: {Priority.NEW_AGGREGATE}, 2: {Priority.PROGRESS}, 3: {Priority.NOTICE}}
    assert len(rows) == 9  # three projections per version
