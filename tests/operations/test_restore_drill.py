"""The restore drill of docs/operations.md, step by step, against real processes: a MariaDB with a
binary log (taskcast/dev/mariadb.py), a Status API, a gateway and a relay.

Tasks run; a backup (``mariadb-dump --single-transaction --master-data=2``) is taken while they
keep writing; then the disaster (``DROP DATABASE``). The runbook's steps: stop the writers, find
the disaster in the binlog with ``mariadb-binlog``, load the dump, replay the binlog from the
dump's coordinates to just before the disaster, start the services again. Then: every event the
Status API acknowledged before that point is there, the relay publishes what was left pending,
and a browser-like client converges on the restored state."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from status_api.storage.database import create_engine
from status_api.storage.tables import task_event_log, task_outbox
from taskcast.demo.runner import Pace, TaskRun
from taskcast.demo.scenarios import SCENARIOS
from taskcast.demo.status_client import StatusApi
from taskcast.dev.mariadb import MariaDB
from tests.helpers.follower import Endpoints, Follower
from tests.status_api.harness import REALTIME_SECRET, SERVICE_SECRET, TEST_CONFIG, USER_SECRET
from tests.support import ROOT, GatewayProcess, RelayProcess, StatusApiProcess, scaled, wait_until

pytestmark = pytest.mark.timeout(scaled(400))

USER = "t1/drill"
API_KEY = "restore-drill-api-key"
DATABASE = "taskcast"


class RecordingApi(StatusApi):
    """The demo's coordinator and workers, remembering every eventId the Status API acknowledged."""

    def __init__(self, client: httpx.AsyncClient, acked: list[str]) -> None:
        super().__init__(client, SERVICE_SECRET)
        self.acked = acked

    async def post(self, path: str, body: dict[str, Any] | None, token: str, key: str | None = None) -> Any:
        reply = await super().post(path, body, token, key)
        if body is not None and "eventId" in body:
            self.acked.append(str(body["eventId"]))
        return reply


@dataclass
class Drill:
    workdir: Path
    db: MariaDB
    gateway: GatewayProcess
    api: StatusApiProcess | None = None
    relay: RelayProcess | None = None
    acked: list[str] = field(default_factory=list)

    @property
    def db_url(self) -> str:
        return self.db.url(DATABASE)

    def start_writers(self) -> None:
        self.api = StatusApiProcess(
            {**TEST_CONFIG, "database": {"url": self.db_url}}, self.workdir / "api"
        ).start()
        relay_cfg = {
            "relay_id": f"drill-{uuid.uuid4().hex[:6]}",
            "database_url": self.db_url,
            "gateway_api_url": self.gateway.api_url,
            "gateway_api_key": API_KEY,
            "poll_interval_seconds": 0.1,
            "lease_seconds": 2,
            "publish_timeout_seconds": 1,
        }
        self.relay = RelayProcess(relay_cfg, self.workdir / "relay").start()

    def stop_writers(self) -> None:
        for proc in (self.relay, self.api):
            if proc is not None:
                proc.terminate()

    async def run_tasks(self, n: int) -> list[str]:
        assert self.api is not None
        ids = [f"drill-{uuid.uuid4().hex[:10]}" for _ in range(n)]
        async with httpx.AsyncClient(base_url=self.api.url, timeout=scaled(10)) as client:
            api = RecordingApi(client, self.acked)
            runs = [TaskRun(api, SCENARIOS["document_ok"](i), USER, Pace(speed=20)) for i in ids]
            await asyncio.gather(*(r.run() for r in runs))
        return ids


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    db = MariaDB(tmp_path / "mariadb").start(scaled(120))
    cfg = json.loads((ROOT / "deploy/gateway.json").read_text())
    cfg.pop("engine")
    cfg["client"]["token"]["hmac_secret_key"] = REALTIME_SECRET
    cfg["http_api"]["key"] = API_KEY
    gateway = GatewayProcess(cfg, tmp_path / "gw")
    drill = Drill(tmp_path, db, gateway)
    try:
        db.sql(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        gateway.start()
        yield drill
    finally:
        drill.stop_writers()
        gateway.terminate()
        db.stop()


def backup(db: MariaDB, path: Path) -> tuple[str, int]:
    """docs/operations.md *Backup*: a consistent dump with the binlog coordinates it is at."""
    with path.open("w") as out:
        subprocess.run(
            [*db.client("mariadb-dump"), "--single-transaction", "--master-data=2", "--routines",
             "--events", "--triggers", "--databases", DATABASE],
            stdout=out, check=True, timeout=scaled(120),
        )  # fmt: skip
    found = re.search(r"MASTER_LOG_FILE='([^']+)', MASTER_LOG_POS=(\d+)", path.read_text())
    assert found, "the dump carries no binlog coordinates"
    return found.group(1), int(found.group(2))


def binlogs_from(db: MariaDB, first: str) -> list[Path]:
    files = sorted(p for p in db.binlog_dir.glob("binlog.[0-9]*"))
    return [p for p in files if p.name >= first]


def disaster_position(files: list[Path], statement: str) -> tuple[Path, int]:
    """docs/operations.md *Point-in-time recovery*: the ``# at`` offset of the transaction (its
    GTID event) that holds ``statement``, as ``mariadb-binlog`` prints it."""
    for path in reversed(files):
        text = subprocess.run(
            ["mariadb-binlog", "--base64-output=decode-rows", str(path)],
            capture_output=True, text=True, check=True, timeout=scaled(60),
        ).stdout  # fmt: skip
        at, gtid_at = 0, 0
        for line in text.splitlines():
            if line.startswith("# at "):
                at = int(line.split()[2])
            elif re.search(r"\sGTID \d", line):
                gtid_at = at
            elif statement in line:
                return path, gtid_at
    raise AssertionError(f"{statement!r} is in no binlog")


def restore(db: MariaDB, dump: Path, coords: tuple[str, int], stop: tuple[Path, int]) -> None:
    """Load the dump, then replay the binlog from the dump's coordinates up to ``stop``, one file
    at a time (the first from the dump's position, the last up to the stop position)."""
    with dump.open() as src:
        subprocess.run(db.client(), stdin=src, check=True, timeout=scaled(120))
    files = [p for p in binlogs_from(db, coords[0]) if p.name <= stop[0].name]
    for path in files:
        bounds = []
        if path.name == coords[0]:
            bounds.append(f"--start-position={coords[1]}")
        if path == stop[0]:
            bounds.append(f"--stop-position={stop[1]}")
        replay = subprocess.run(
            ["mariadb-binlog", *bounds, str(path)], capture_output=True, check=True, timeout=scaled(120)
        )
        subprocess.run(db.client(), input=replay.stdout, check=True, timeout=scaled(120))


async def _logged(db_url: str) -> set[str]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            return set((await conn.execute(sa.select(task_event_log.c.event_id))).scalars())
    finally:
        await engine.dispose()


async def _outbox(db_url: str) -> dict[str, int]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(task_outbox.c.status, sa.func.count()).group_by(task_outbox.c.status)
            )
            return {status: n for status, n in rows}
    finally:
        await engine.dispose()


async def test_backup_keep_writing_restore_to_a_point_relays_resume_clients_converge(drill: Drill) -> None:
    drill.start_writers()
    assert drill.api is not None
    endpoints = Endpoints(drill.gateway.ws_url, drill.api.url, REALTIME_SECRET, USER_SECRET)
    follower = Follower(endpoints, USER)
    try:
        await drill.run_tasks(2)

        # Back up while tasks keep writing.
        writing = asyncio.create_task(drill.run_tasks(3))
        await wait_until(lambda: len(drill.acked) > 20, 60, "writes under way")
        marks = {"backup_start": len(drill.acked)}
        coords = await asyncio.to_thread(backup, drill.db, drill.workdir / "backup.sql")
        marks["backup_end"] = len(drill.acked)
        await writing
        drill.db.sql("FLUSH BINARY LOGS")  # a rotation between backup and disaster: replay spans files
        assert drill.relay is not None
        drill.relay.terminate()  # the last task's rows stay PENDING: the restored relay must publish them
        marks["flush"] = len(drill.acked)
        last = await drill.run_tasks(1)
        acked = list(drill.acked)
        assert acked and set(acked) <= await _logged(drill.db_url)
        assert (await _outbox(drill.db_url)).get("PENDING", 0) > 0
        assert last[0] not in follower.versions or follower.versions[last[0]] == 1  # created, never pushed

        # The disaster, then the runbook.
        drill.db.sql(f"DROP DATABASE {DATABASE}")
        drill.stop_writers()
        stop = await asyncio.to_thread(disaster_position, binlogs_from(drill.db, coords[0]), "DROP DATABASE")
        await asyncio.to_thread(restore, drill.db, drill.workdir / "backup.sql", coords, stop)

        restored = await _logged(drill.db_url)
        lost = [acked.index(e) for e in acked if e not in restored]
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged events lost, at {lost} ({marks})"

        drill.start_writers()  # the Status API and a relay on the restored database
        assert drill.api is not None
        follower.endpoints = Endpoints(drill.gateway.ws_url, drill.api.url, REALTIME_SECRET, USER_SECRET)
        await wait_until(lambda: _settled(drill.db_url), 60, "the relay drained the outbox")
        truth = await follower.truth()
        assert len(truth) == 6
        await wait_until(
            lambda: all(follower.versions.get(t) == v for t, v in truth.items()), 60, "converged"
        )
    finally:
        await follower.close()


async def _settled(db_url: str) -> bool:
    counts = await _outbox(db_url)
    return set(counts) == {"PUBLISHED"}
