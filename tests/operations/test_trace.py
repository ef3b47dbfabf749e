"""``taskcast trace EVENT_ID`` against real processes: a Status API, a gateway (memory engine,
deploy/gateway.json's namespaces) and a relay on MariaDB. A task runs to completion; the trace of
its TASK_COMPLETED event names the version, every outbox row of that version as PUBLISHED with its
channel, and each row's publication in the gateway's history (offset, epoch) — the same offset
a subscriber received. An unknown eventId is a coded error."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
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
from tests.helpers.mysql_db import schema_database
from tests.status_api.harness import SERVICE_SECRET, TEST_CONFIG
from tests.support import ROOT, GatewayProcess, RelayProcess, StatusApiProcess, scaled, wait_until

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(scaled(240))]

API_KEY = "trace-test-api-key"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, mysql_url: str) -> Iterator[tuple[str, Path, str]]:
    workdir = tmp_path_factory.mktemp("trace")
    cfg = json.loads((ROOT / "deploy/gateway.json").read_text())
    cfg.pop("engine")
    cfg["client"]["token"]["hmac_secret_key"] = "trace-test-hmac-secret-0123456789"
    cfg["http_api"]["key"] = API_KEY
    with schema_database(mysql_url, "trace") as db_url:
        api = StatusApiProcess({**TEST_CONFIG, "database": {"url": db_url}}, workdir / "api")
        gateway = GatewayProcess(cfg, workdir / "gw")
        started: list[Any] = []
        try:
            started.append(api.start())
            started.append(gateway.start())
            relay_cfg = {
                "relay_id": "trace-relay",
                "database_url": db_url,
                "gateway_api_url": gateway.api_url,
                "gateway_api_key": API_KEY,
                "poll_interval_seconds": 0.1,
            }
            relay = RelayProcess(relay_cfg, workdir)
            started.append(relay.start())
            yield api.url, relay.config_path, db_url
        finally:
            for proc in reversed(started):
                proc.terminate()


def _trace(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskcast", "trace", *args, "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={"PATH": "/usr/bin:/bin"},
    )


async def _completed_event(db_url: str, task_id: str) -> tuple[str, int, int]:
    """(eventId of TASK_COMPLETED, its version, how many outbox rows that version has PUBLISHED)."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            event_id, version = (
                await conn.execute(
                    sa.select(task_event_log.c.event_id, task_event_log.c.task_version).where(
                        task_event_log.c.task_id == task_id, task_event_log.c.event_type == "TASK_COMPLETED"
                    )
                )
            ).one()
            published = (
                await conn.execute(
                    sa.select(sa.func.count()).where(
                        task_outbox.c.aggregate_id == task_id,
                        task_outbox.c.aggregate_version == version,
                        task_outbox.c.status == "PUBLISHED",
                    )
                )
            ).scalar_one()
            return event_id, version, published
    finally:
        await engine.dispose()


async def test_trace_follows_an_event_to_its_publications(pipeline: tuple[str, Path, str]) -> None:
    api_url, relay_config, db_url = pipeline
    task_id = f"trace-{uuid.uuid4().hex[:12]}"
    async with httpx.AsyncClient(base_url=api_url, timeout=scaled(10)) as client:
        run = TaskRun(
            StatusApi(client, SERVICE_SECRET), SCENARIOS["document_ok"](task_id), "t1/u1", Pace(speed=50)
        )
        await run.run()

    async def all_published() -> tuple[str, int, int] | None:
        found = await _completed_event(db_url, task_id)
        return found if found[2] >= 1 else None

    event_id, version, published = await wait_until(all_published, 60, "the final version published")
    result = await asyncio.to_thread(_trace, relay_config, event_id, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["event"]["event_id"] == event_id and doc["event"]["task_version"] == version
    assert doc["event"]["event_type"] == "TASK_COMPLETED" and doc["event"]["task_id"] == task_id
    rows = doc["rows"]  # one per publication of the version's one row
    assert published == 1 and len(rows) == 2 and len({r["id"] for r in rows}) == 1
    assert {r["status"] for r in rows} == {"PUBLISHED"}
    assert [r["projection"] for r in rows] == ["USER_SUMMARY", "TASK_DETAIL"]
    channels = {r["channel"] for r in rows}
    assert "task_user:t1/u1" in channels and f"task_detail:t1/{task_id}" in channels
    for row in rows:
        pub = row["publication"]
        assert isinstance(pub, dict) and pub["offset"] >= 1 and pub["epoch"], row

    text = await asyncio.to_thread(_trace, relay_config, event_id)
    assert text.returncode == 0 and f"task {task_id} version {version}" in text.stdout
    assert "→ task_user:t1/u1: PUBLISHED" in text.stdout and "published: offset" in text.stdout
    assert API_KEY not in text.stdout + text.stderr


def test_an_unknown_event_is_a_coded_error(pipeline: tuple[str, Path, str]) -> None:
    _, relay_config, _ = pipeline
    result = _trace(relay_config, "no-such-event")
    assert result.returncode == 1 and result.stderr.startswith("EVENT_NOT_FOUND"), result.stderr
    assert result.stdout == ""
