"""``taskcast status-api serve --workers N`` (issue 16, item 2; status_api/workers.py): N processes
on one port, each ingesting with its own group commit, over real MariaDB.

Which worker answered a connection is read from the operating system (psutil: each worker's
ESTABLISHED sockets on the port), never from the app.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import sqlalchemy as sa

from status_api.storage.database import create_engine
from status_api.storage.tables import task, task_event_log, task_outbox
from tests.helpers.mysql_db import schema_database
from tests.status_api.harness import COORDINATOR, DEFAULT_STEPS, TEST_CONFIG
from tests.support import ServiceProcess, free_port, merge, scaled, wait_until

pytestmark = pytest.mark.mysql

CLIENTS = 16  # keep-alive connections: SO_REUSEPORT hashes them over the workers
TASKS_PER_CLIENT = 4


@pytest.fixture(scope="module")
def db_url(mysql_url: str) -> Iterator[str]:
    with schema_database(mysql_url, "taskcast_workers") as url:
        yield url


class _Supervisor(ServiceProcess):
    """Ready once a worker answers; the supervisor applies the schema first, then N interpreters
    start at once on a loaded 2-core machine: a longer bound than one process needs."""

    def wait_healthy(self, timeout: float = 120.0) -> None:
        super().wait_healthy(timeout)


def _serve(tmp_path: Path, db_url: str, workers: int) -> tuple[ServiceProcess, int]:
    port = free_port()
    cfg = merge(TEST_CONFIG, {"database": {"url": db_url}, "http": {"host": "127.0.0.1", "port": port}})
    path = tmp_path / "status-api.json"
    path.write_text(json.dumps(cfg))
    args = ["status-api", "serve", "--config", str(path), "--workers", str(workers)]
    proc = _Supervisor(f"status-api-x{workers}", args, tmp_path, f"http://127.0.0.1:{port}/readyz")
    return proc.start(), port


def _workers(proc: ServiceProcess) -> list[psutil.Process]:
    assert proc.proc is not None
    return psutil.Process(proc.proc.pid).children()


def _established(pid: int, port: int) -> int:
    conns = psutil.Process(pid).net_connections(kind="tcp")
    return sum(1 for c in conns if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def _listening(workers: list[psutil.Process], port: int) -> bool:
    """Every worker has bound its SO_REUSEPORT socket (before that, the kernel routes around it)."""
    return all(
        any(
            c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
            for c in w.net_connections("tcp")
        )
        for w in workers
    )


def _event(created: dict[str, Any]) -> dict[str, Any]:
    ctx = created["steps"][0]
    return {
        "eventId": f"evt-{uuid.uuid4().hex}",
        "taskId": created["taskId"],
        "taskType": "DOCUMENT_PROCESS",
        "taskAttempt": ctx["taskAttempt"],
        "stepId": ctx["stepId"],
        "operationCode": ctx["operationCode"],
        "stepAttempt": ctx["stepAttempt"],
        "producerId": ctx["producerId"],
        "sourceSeq": 1,
        "eventType": "STEP_STARTED",
        "businessStatus": "PREPARING",
        "occurredAt": "2026-09-21T07:10:18.120Z",
    }


async def _client(url: str, owner: str) -> tuple[httpx.AsyncClient, list[str]]:
    """One keep-alive connection that creates tasks and reports a step event on each."""
    http = httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=1), timeout=scaled(60))
    ids = []
    for i in range(TASKS_PER_CLIENT):
        body = {
            "tenantId": "t1",
            "ownerId": owner,
            "product": "DOCUMENT",
            "taskType": "DOCUMENT_PROCESS",
            "title": f"workers {i}",
            "statusDefinitionVersion": 1,
            "operationDefinitionVersion": 1,
            "steps": DEFAULT_STEPS,
        }
        r = await http.post(
            "/internal/v1/tasks", json=body, headers={"Authorization": f"Bearer {COORDINATOR}"}
        )
        assert r.status_code == 201, r.text
        created = r.json()
        ev = _event(created)
        token = created["steps"][0]["executionToken"]
        r = await http.post(
            "/internal/v1/task-events",
            json=ev,
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": ev["eventId"]},
        )
        assert r.status_code == 200, r.text
        ids.append(created["taskId"])
    return http, ids


async def test_two_workers_answer_on_one_port_both_ingest_and_nothing_is_lost(
    tmp_path: Path, db_url: str
) -> None:
    proc, port = _serve(tmp_path, db_url, workers=2)
    clients: list[httpx.AsyncClient] = []
    try:
        workers = _workers(proc)
        assert len(workers) == 2, workers
        await wait_until(lambda: _listening(workers, port), within=120, what="both workers listening")
        results = await asyncio.gather(
            *(_client(f"http://127.0.0.1:{port}", f"u{n}") for n in range(CLIENTS))
        )
        clients = [c for c, _ in results]
        ids = [i for _, batch in results for i in batch]
        # Every connection is still open (keep-alive): each worker holds some of them.
        per_worker = {w.pid: _established(w.pid, port) for w in workers}
        assert sum(per_worker.values()) == CLIENTS, per_worker
        assert all(n > 0 for n in per_worker.values()), f"one worker served everything: {per_worker}"
    finally:
        for c in clients:
            await c.aclose()
        proc.send_sigterm()
    assert await proc.wait_exit(30) == 0, proc.log_text()
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            stored = await conn.scalar(sa.select(sa.func.count()).where(task.c.id.in_(ids)))
            versions = await conn.scalar(sa.select(sa.func.count()).where(task_event_log.c.task_id.in_(ids)))
            rows = await conn.scalar(
                sa.select(sa.func.count(sa.distinct(task_outbox.c.aggregate_id))).where(
                    task_outbox.c.aggregate_id.in_(ids), task_outbox.c.aggregate_version == 2
                )
            )
    finally:
        await engine.dispose()
    n = CLIENTS * TASKS_PER_CLIENT
    assert (stored, rows) == (n, n)  # every acknowledged creation and event is committed
    assert versions >= 2 * n
    assert "Traceback" not in proc.log_text()


async def test_a_dead_worker_stops_the_unit(tmp_path: Path, db_url: str) -> None:
    """No half-sized unit serving silently: the supervisor stops the others and exits 1."""
    proc, _port = _serve(tmp_path, db_url, workers=2)
    try:
        first, second = _workers(proc)
        first.send_signal(signal.SIGKILL)
        assert await proc.wait_exit(30) == 1, proc.log_text()
        await wait_until(lambda: not second.is_running() or second.status() == psutil.STATUS_ZOMBIE, 30)
    finally:
        proc.kill()
    assert "exited" in proc.log_text()


def test_workers_need_a_fixed_free_port(tmp_path: Path, db_url: str) -> None:
    import socket
    import subprocess

    from tests.support.procs import service_argv

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        for port, needle in ((0, "fixed port"), (taken.getsockname()[1], "cannot listen")):
            cfg = merge(
                TEST_CONFIG, {"database": {"url": db_url}, "http": {"host": "127.0.0.1", "port": port}}
            )
            path = tmp_path / f"c{port}.json"
            path.write_text(json.dumps(cfg))
            out = subprocess.run(
                [*service_argv(), "status-api", "serve", "--config", str(path), "--workers", "2"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 2 and needle in out.stderr, out.stderr
    finally:
        taken.close()
