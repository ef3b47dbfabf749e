"""The MariaDB replica promotion of docs/deploy.md, against real servers (taskcast/dev/mariadb.py):
a GTID replica follows the primary and refuses writes; the primary is lost; after the documented
statements the replica accepts writes, and a Status API started on it serves and records
events — nothing the primary had acknowledged and shipped is missing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from taskcast.dev.mariadb import MariaDB
from tests.status_api.harness import COORDINATOR, DEFAULT_STEPS, TEST_CONFIG
from tests.support import StatusApiProcess, scaled, wait_until_blocking

pytestmark = pytest.mark.timeout(scaled(300))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[MariaDB, MariaDB]]:
    primary = MariaDB(tmp_path / "primary", server_id=1)
    replica = MariaDB(tmp_path / "replica", server_id=2)
    try:
        primary.start(scaled(120))
        replica.start(scaled(120))
        replica.replicate_from(primary)
        primary.sql("CREATE DATABASE taskcast CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def _create(api: StatusApiProcess, task_id: str) -> httpx.Response:
    body = {
        "taskId": task_id, "tenantId": "t1", "ownerId": "u1", "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS", "title": task_id, "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1, "steps": DEFAULT_STEPS,
    }  # fmt: skip
    headers = {"Authorization": f"Bearer {COORDINATOR}"}
    return httpx.post(f"{api.url}/internal/v1/tasks", json=body, headers=headers, timeout=scaled(10))


def _tasks(server: MariaDB) -> set[str]:
    return set(server.sql("SELECT id FROM task", "taskcast").split())


def test_the_documented_promotion_turns_the_replica_into_a_writable_primary(
    pair: tuple[MariaDB, MariaDB], tmp_path: Path
) -> None:
    primary, replica = pair
    api = StatusApiProcess({**TEST_CONFIG, "database": {"url": primary.url("taskcast")}}, tmp_path / "a")
    api.start()
    try:
        acked = [f"promo-{n}" for n in range(3)]
        for task_id in acked:
            assert _create(api, task_id).status_code == 201
    finally:
        api.terminate()
    wait_until_blocking(lambda: _tasks(replica) >= set(acked), 60, "the replica has every task")
    with pytest.raises(RuntimeError, match=r"--read-only"):  # the services' account cannot write
        replica.app_sql("CREATE TABLE probe (i INT)", "taskcast")

    primary.stop()  # the primary is lost
    status = replica.replica_status()
    assert status["Exec_Master_Log_Pos"] == status["Read_Master_Log_Pos"], status  # applied all it got
    replica.promote()
    assert replica.replica_status() == {} and replica.sql("SELECT @@read_only").strip() == "0"

    api = StatusApiProcess({**TEST_CONFIG, "database": {"url": replica.url("taskcast")}}, tmp_path / "b")
    api.start()
    try:
        assert _create(api, "promo-after").status_code == 201
        assert _tasks(replica) == {*acked, "promo-after"}
        ready = httpx.get(f"{api.url}/readyz", timeout=scaled(10))
        assert ready.status_code == 200, ready.text
        assert json.loads(replica.sql("SELECT JSON_OBJECT('n', COUNT(*)) FROM task", "taskcast"))["n"] == 4
    finally:
        api.terminate()
