"""``taskcast up`` as a real process on free ports: both servers healthy, the board served, a demo
task reaches SUCCEEDED through the user API and its summaries reach a centrifuge-python client on
``task_user:{tenant}/{user}``; SIGTERM stops it cleanly within a bound; no secret is logged."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from centrifuge import Client, ClientEventHandler, ServerPublicationContext

from taskcast.dev.procs import ROOT, Proc, service_argv
from tests.support import WaitTimeout, free_port, scaled, wait_until, wait_until_blocking
from tests.support.procs import READY_TIMEOUT_SECONDS

USER = "demo/alice"
STARTUP_SECONDS = READY_TIMEOUT_SECONDS  # the suite's bound on a process turning ready (scaled)
TASK_SECONDS = 40.0
STOP_SECONDS = 12.0  # taskcast.up.SHUTDOWN_SECONDS + interpreter exit


@dataclass
class Up:
    child: Proc
    gateway: str
    api: str
    data_dir: Path

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        assert self.child.popen is not None
        return self.child.popen

    def log(self) -> str:
        return self.child.log_text()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    pg, pa = free_port(), free_port()
    while pa == pg:
        pa = free_port()
    data_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKCAST_", "CENTRIFUGO_"))}
    argv = service_argv("up", "--port-gateway", str(pg), "--port-api", str(pa))
    argv += ["--data-dir", str(data_dir), "--demo-speed", "20"]
    child = Proc("taskcast-up", argv, env, tmp_path / "up.log").start()
    try:
        yield Up(child, f"http://127.0.0.1:{pg}", f"http://127.0.0.1:{pa}", data_dir)
    finally:
        child.kill()


def _wait_healthy(up: Up) -> None:
    def healthy(c: httpx.Client) -> bool:
        assert up.child.running, f"taskcast up exited early:\n{up.log()}"
        try:
            return (
                c.get(f"{up.gateway}/health").status_code == 200
                and c.get(f"{up.api}/healthz").status_code == 200
                and "Task board:" in up.log()
            )
        except httpx.TransportError:
            return False

    with httpx.Client(timeout=scaled(30)) as c:
        try:
            wait_until_blocking(lambda: healthy(c), STARTUP_SECONDS, "taskcast up healthy")
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{up.log()}") from None


@dataclass
class Summaries(ClientEventHandler):
    """Collects ``task.summary`` publications of server-side subscriptions."""

    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def on_publication(self, ctx: ServerPublicationContext) -> None:
        self.items.append((ctx.channel, ctx.pub.data))


async def _succeeded_via_api_and_realtime(up: Up) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    headers = {"X-Taskcast-Dev-User": USER}
    async with httpx.AsyncClient(base_url=up.api, headers=headers, timeout=scaled(30)) as api:
        session = (await api.get("/api/realtime/session")).json()
        summaries = Summaries()
        client = Client(
            f"{up.gateway.replace('http', 'ws')}/connection/websocket",
            events=summaries,
            token=session["token"],
            proxy=None,
        )
        await client.connect()

        async def succeeded_and_live() -> list[str]:
            """Tasks that succeeded in the API and whose SUCCEEDED summary arrived live."""
            listing = (await api.get("/api/tasks")).json()["items"]
            done = {t["id"] for t in listing if t["lifecycleStatus"] == "SUCCEEDED"}
            live = {
                d["task"]["id"] for _, d in summaries.items if d["task"]["lifecycleStatus"] == "SUCCEEDED"
            }
            return sorted(done & live)

        try:
            both = await wait_until(succeeded_and_live, TASK_SECONDS, "a SUCCEEDED task, live", every=0.2)
            return both[0], summaries.items
        finally:
            await client.disconnect()
            # The SDK closes its socket in a task of its own; let it finish before asyncio.run
            # cancels it (a cancelled close leaves an unclosed socket for a later test's GC).
            me = asyncio.current_task()
            await wait_until(lambda: asyncio.all_tasks() == {me}, 10, "the SDK to close its connection")


def test_taskcast_up_serves_board_runs_demo_publishes_and_stops_on_sigterm(up: Up) -> None:
    _wait_healthy(up)
    board = httpx.get(f"{up.api}/board/?user={USER}", timeout=5.0)
    if (ROOT / "client-js" / "board" / "index.html").exists():
        assert board.status_code == 200 and board.headers["content-type"].startswith("text/html")
    assert f"{up.api}/board/?user={USER}\n" in up.log()
    # The printed URL needs no gateway parameter: the page learns the gateway from config.js.
    config_js = httpx.get(f"{up.api}/board/config.js", timeout=5.0).text
    assert config_js == f'window.TASKCAST_BOARD = {{"gateway": "{up.gateway}"}};\n', config_js

    task_id, received = asyncio.run(_succeeded_via_api_and_realtime(up))
    mine = [d["task"] for _, d in received if d["task"]["id"] == task_id]
    assert {channel for channel, _ in received} == {f"task_user:{USER}"}
    assert all(d["kind"] == "task.summary" for _, d in received)
    # Terminal rows are published with priority, so order may vary; the highest version is final.
    assert max(mine, key=lambda d: int(d["version"]))["lifecycleStatus"] == "SUCCEEDED"
    assert len({d["version"] for d in mine}) == len(mine)  # no duplicate delivery

    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(scaled(STOP_SECONDS)) == 0, up.log()
    log = up.log()
    assert "Traceback" not in log, log
    keys = json.loads((up.data_dir / "secrets.json").read_text())
    assert oct((up.data_dir / "secrets.json").stat().st_mode & 0o777) == "0o600"
    for value in keys.values():
        assert value not in log
    assert (up.data_dir / "taskcast.db").exists()


def test_taskcast_up_refuses_a_busy_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        argv = service_argv("up", "--port-gateway", str(busy), "--port-api", str(free_port()))
        r = subprocess.run(
            [*argv, "--data-dir", str(tmp_path / "var")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=scaled(30),
        )
    assert r.returncode == 2
    assert f"port {busy}" in r.stderr and "--port-gateway" in r.stderr


def test_every_secrets_json_key_is_documented() -> None:
    from taskcast.up import SECRET_NAMES

    quickstart = (ROOT / "docs" / "quickstart.md").read_text()
    assert [name for name in SECRET_NAMES if f"| `{name}` |" not in quickstart] == []
