"""Issue 28, risk 9: ``kill -9`` of the ``--workers`` supervisor. Its workers stop with it (even
while clients that never answer the close handshake hold their graceful shutdown open), and the
next supervisor removes the private directory (``/tmp/taskcast-gateway-*``) the killed one left.
Before: the workers lingered for seconds after it, and the directory stayed for good."""

from __future__ import annotations

import base64
import os
import re
import socket
from pathlib import Path

from gateway.workers import PID_FILE, remove_stale_workdirs
from tests.support.procs import GatewayProcess
from tests.support.waiting import wait_until


def _worker_pids(gw: GatewayProcess) -> list[int]:
    return [int(pid) for _, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", gw.log_text())]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _engine_dir(pid: int) -> Path:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(argv[argv.index(b"--engine-socket") + 1].decode()).parent


def _stuck_client(port: int) -> socket.socket:
    """A WebSocket client that upgrades, then never reads: a graceful close waits on it."""
    sock = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16))
    sock.sendall(
        b"GET /connection/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    assert b" 101 " in sock.recv(4096)
    return sock


async def test_workers_die_with_a_killed_supervisor_and_its_directory_is_cleaned(tmp_path: Path) -> None:
    config = {"client": {"insecure": True}}
    gw = GatewayProcess(config, tmp_path / "gw", workers=2).start()
    clients: list[socket.socket] = []
    try:
        pids = _worker_pids(gw)
        assert len(pids) == 2
        workdir = _engine_dir(pids[0])
        assert (workdir / PID_FILE).read_text().strip() == str(gw.proc.pid if gw.proc else 0)
        clients = [_stuck_client(gw.port) for _ in range(8)]
        assert gw.proc is not None
        gw.proc.kill()  # SIGKILL: no cleanup, no SIGTERM to the workers
        await wait_until(lambda: not any(_alive(pid) for pid in pids), 30, "workers gone with the supervisor")
        assert re.search(r"supervisor \d+ is gone: stopping", gw.log_text()), gw.log_text()[-2000:]
        assert workdir.exists()  # the killed supervisor could not remove it
    finally:
        for client in clients:
            client.close()
        gw.terminate()
    nxt = GatewayProcess(config, tmp_path / "gw2", workers=2).start()
    try:
        await wait_until(lambda: not workdir.exists(), 30, "the stale directory removed")
        assert "Traceback" not in nxt.log_text()
    finally:
        nxt.terminate()


def test_only_directories_of_dead_supervisors_are_removed(tmp_path: Path) -> None:
    dead, alive, foreign = (
        tmp_path / "taskcast-gateway-a",
        tmp_path / "taskcast-gateway-b",
        tmp_path / "taskcast-gateway-c",
    )
    for path in (dead, alive, foreign):
        path.mkdir()
    (dead / PID_FILE).write_text("999999999\n")  # above pid_max: never running
    (alive / PID_FILE).write_text(f"{os.getpid()}\n")
    assert remove_stale_workdirs(tmp_path) == [dead]
    assert alive.exists() and foreign.exists()  # no pid file: not known to be one of ours
