"""examples/worker.py runs as docs/quickstart-worker.md says, against a real Status API started
from examples/worker-status-api.json (ttl 4 s), with credentials minted by ``taskcast token``:
its own task type, three steps, a failed-and-retried step, a step across a token renewal; and the
same example against a real ``taskcast up`` (what ``make up`` runs), credentials from
``taskcast token --data-dir``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import sqlalchemy as sa

from taskcast.dev.procs import Proc, service_argv
from tests.support import ROOT, StatusApiProcess, free_port, merge, scaled, wait_until_blocking
from tests.support.procs import READY_TIMEOUT_SECONDS

COORD = "example-coordinator"

CONFIG = ROOT / "examples" / "worker-status-api.json"


def _token(config: Path, role: str, sub: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "taskcast", "token", "--config", str(config), "--role", role, "--sub", sub],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=scaled(60),
    )
    assert "local development only" in out.stderr
    return out.stdout.strip()


def test_the_worker_example_runs_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "example.db"
    cfg = merge(json.loads(CONFIG.read_text()), {"database": {"url": f"sqlite+aiosqlite:///{db}"}})
    api = StatusApiProcess(cfg, tmp_path).start()
    try:
        env = {
            "TASKCAST_ADMIN_TOKEN": _token(api.config_path, "admin", "ops-example"),
            "TASKCAST_COORDINATOR_TOKEN": _token(api.config_path, "coordinator", "example-coordinator"),
            "PATH": "/usr/bin:/bin",
        }
        run = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "worker.py"), "--url", api.url],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(120),
        )
        assert run.returncode == 0, run.stdout + run.stderr
        task_id = run.stdout.strip().splitlines()[-1]
        dev = {"X-Taskcast-Dev-User": "t1/u1"}
        detail = httpx.get(f"{api.url}/api/tasks/{task_id}", headers=dev, timeout=scaled(10)).json()
        assert detail["lifecycleStatus"] == "SUCCEEDED" and detail["businessStatus"] == "EXPORTED"
        assert detail["taskType"] == "REPORT_EXPORT"
        steps = {s["id"]: s for s in detail["steps"]}
        assert {k: (s["attempt"], s["lifecycleStatus"]) for k, s in steps.items()} == {
            "01_query": (1, "SUCCEEDED"),
            "02_render": (2, "SUCCEEDED"),
            "03_upload": (1, "SUCCEEDED"),
        }
        assert steps["01_query"]["progress"] == {"current": 50, "total": 50, "unit": "rows"}
        events = httpx.get(
            f"{api.url}/api/tasks/{task_id}/events?limit=500", headers=dev, timeout=scaled(10)
        ).json()["events"]
        query_progress = [
            e for e in events if e["stepId"] == "01_query" and e["eventType"] == "STEP_PROGRESS"
        ]
        assert 1 <= len(query_progress) < 50  # coalesced, and the last value reached the server
        assert [e["stepAttempt"] for e in events if e["eventType"] == "STEP_FAILED"] == [1]
        eng = sa.create_engine(f"sqlite:///{db}")
        with eng.connect() as conn:
            renewals = (
                conn.execute(
                    sa.text("SELECT step_id FROM execution_token_renewal WHERE task_id = :t"), {"t": task_id}
                )
                .scalars()
                .all()
            )
        eng.dispose()
        assert "03_upload" in renewals
    finally:
        api.terminate()
    assert "Traceback" not in api.log_text()


def _up_token(data_dir: Path, role: str, sub: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "taskcast",
            "token",
            "--data-dir",
            str(data_dir),
            "--role",
            role,
            "--sub",
            sub,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )


def test_the_worker_example_against_taskcast_up(tmp_path: Path) -> None:
    """docs/quickstart-worker.md "Against make up": credentials from ``taskcast token --data-dir``
    of a running ``taskcast up``; the example's task lands on the board's user (dev mode)."""
    data_dir = tmp_path / "var"
    missing = _up_token(data_dir, "coordinator", "c")
    assert missing.returncode == 2 and "start `taskcast up --data-dir" in missing.stderr
    pg, pa = free_port(), free_port()
    while pa == pg:
        pa = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKCAST_", "CENTRIFUGO_"))}
    argv = service_argv("up", "--port-gateway", str(pg), "--port-api", str(pa), "--no-demo")
    up = Proc("taskcast-up-worker", [*argv, "--data-dir", str(data_dir)], env, tmp_path / "up.log").start()
    api = f"http://127.0.0.1:{pa}"
    try:

        def healthy() -> bool:
            assert up.running, f"taskcast up exited early:\n{up.log_text()}"
            try:
                return httpx.get(f"{api}/healthz", timeout=scaled(5)).status_code == 200
            except httpx.TransportError:
                return False

        wait_until_blocking(healthy, READY_TIMEOUT_SECONDS, "taskcast up healthy")
        user = _up_token(data_dir, "user", "alice")
        assert user.returncode == 2 and "X-Taskcast-Dev-User" in user.stderr
        tokens = {}
        for name, role, sub in (("ADMIN", "admin", "ops-example"), ("COORDINATOR", "coordinator", COORD)):
            out = _up_token(data_dir, role, sub)
            assert out.returncode == 0, out.stderr
            tokens[f"TASKCAST_{name}_TOKEN"] = out.stdout.strip()
        run = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / "worker.py"),
                "--url",
                api,
                "--tenant",
                "demo",
                "--owner",
                "alice",
            ],
            cwd=ROOT,
            env={**tokens, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=scaled(120),
        )
        assert run.returncode == 0, run.stdout + run.stderr
        task_id = run.stdout.strip().splitlines()[-1]
        dev = {"X-Taskcast-Dev-User": "demo/alice"}
        listed = httpx.get(f"{api}/api/tasks", headers=dev, timeout=scaled(10)).json()["items"]
        mine = [t for t in listed if t["id"] == task_id]
        assert mine and mine[0]["lifecycleStatus"] == "SUCCEEDED" and mine[0]["taskType"] == "REPORT_EXPORT"
        assert "1 renewals" in run.stdout
    finally:
        up.kill()
