"""``taskcast gateway --workers N`` (``http_server.workers``): the supervisor of N gateway
processes listening on one port, and the socket each worker listens on.

Every worker is a whole gateway (``python -m gateway --worker-index I``, one event loop, one
core) with its own ``SO_REUSEPORT`` listening socket on the same address, so the kernel spreads
new connections across them. Workers share one engine and are nodes of one cluster
(docs/scaling.md): on the Redis engine each talks to Redis as any node does; on the memory engine
the supervisor serves ONE memory engine to all of them over a Unix socket in a private directory
(gateway/engine/shared_server.py), so history, recovery and presence stay those of one process.

The supervisor holds the port (a bound, never listening ``SO_REUSEPORT`` socket: it gets no
connections but makes a port in use fail here, and resolves port 0), restarts a worker that
exits (with a growing pause when it keeps dying at start), and on SIGTERM/SIGINT stops every
worker with SIGTERM (each shuts down gracefully, 3001 to its clients) and SIGKILLs those still
running after ``shutdown.timeout`` plus a margin. A supervisor killed outright takes its workers
with it (``die_with_parent``), and the next one removes the private directory it left
(``remove_stale_workdirs``). Imports neither gateway/app.py nor uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from gateway.config.schema import Settings
from gateway.engine.shared_server import BrokerServer

log = logging.getLogger("taskcast.gateway.workers")

BROKER_SOCKET_NAME = "engine.sock"
RESTART_PAUSE_SECONDS = (0.1, 5.0)
"""Pause before restarting a worker that died within ``QUICK_EXIT_SECONDS`` of its start:
doubling from the first value up to the second; a worker that ran longer restarts at once."""
QUICK_EXIT_SECONDS = 5.0
STOP_MARGIN_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1
ORPHAN_POLL_SECONDS = 0.25
ORPHAN_EXIT_SECONDS = 2.0
"""A worker whose supervisor died stops gracefully (3001 to its clients) but exits at the
latest this long after noticing."""
WORKDIR_PREFIX = "taskcast-gateway-"
PID_FILE = "supervisor.pid"


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` with ``SO_REUSEPORT`` (not yet listening: uvicorn
    calls ``listen`` when it serves it). Every worker binds its own; the kernel balances
    connections between the listening ones."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def die_with_parent(parent_pid: int) -> None:
    """In a worker: stop when the supervisor dies, even by ``kill -9``, so no worker outlives it
    holding the port. Linux delivers SIGTERM at once (``PR_SET_PDEATHSIG``); everywhere, a
    watchdog thread that sees the parent gone sends SIGTERM itself and, if the graceful stop has
    not ended ``ORPHAN_EXIT_SECONDS`` later (clients that never answer the close handshake can
    hold it for seconds), ends the process."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    threading.Thread(target=_orphan_watchdog, args=(parent_pid,), name="orphan-watchdog", daemon=True).start()


def _orphan_watchdog(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(ORPHAN_POLL_SECONDS)
    log.warning("worker %d: supervisor %d is gone: stopping", os.getpid(), parent_pid)
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signal.SIGTERM)  # a no-op on Linux: PDEATHSIG already sent it
    time.sleep(ORPHAN_EXIT_SECONDS)
    log.warning(
        "worker %d: still running %.0f s after its supervisor died: exiting", os.getpid(), ORPHAN_EXIT_SECONDS
    )
    logging.shutdown()
    os._exit(1)


def remove_stale_workdirs(tmp: Path | None = None) -> list[Path]:
    """Remove the private directories (``taskcast-gateway-*``, this user's) of supervisors that
    died without cleaning up (``kill -9``): each holds ``supervisor.pid``; a directory whose
    supervisor is no longer running is stale. Returns what was removed."""
    removed: list[Path] = []
    root = tmp or Path(tempfile.gettempdir())
    for path in root.glob(f"{WORKDIR_PREFIX}*"):
        try:
            if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
            pid = int((path / PID_FILE).read_text().strip() or "0")
        except (OSError, ValueError):
            continue  # not ours, or not one of these directories (no pid file): leave it
        if pid > 0 and _running(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process reuses the pid: keep the directory
    return True


class Supervisor:
    """Runs ``workers`` copies of ``worker_argv`` (plus ``--worker-index I --port P`` and, on the
    memory engine, ``--engine-socket PATH``) until a signal.

    Args:
        settings: The loaded settings (address, port, engine type, shutdown timeout).
        workers: How many worker processes (≥ 2; one process needs no supervisor).
        worker_argv: The command that starts one worker, without the worker arguments.
    """

    def __init__(self, settings: Settings, workers: int, worker_argv: list[str]) -> None:
        self.settings = settings
        self.workers = workers
        self.worker_argv = worker_argv
        self._stopping = asyncio.Event()
        self._procs: dict[int, asyncio.subprocess.Process] = {}

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        http = self.settings.http_server
        host = http.address or "0.0.0.0"
        try:
            holder = listening_socket(host, http.port)
        except OSError as exc:
            log.error("cannot bind %s:%s: %s", host, http.port, exc)
            return 1
        port = int(holder.getsockname()[1])
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        for stale in remove_stale_workdirs():
            log.info("removed %s, left by a supervisor that did not stop cleanly", stale)
        workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))  # mode 0700: this user only
        try:
            (workdir / PID_FILE).write_text(f"{os.getpid()}\n")
            extra: list[str] = ["--port", str(port)]
            server: BrokerServer | None = None
            if self.settings.engine.type == "memory":
                server = BrokerServer(
                    workdir / BROKER_SOCKET_NAME,
                    presence_ttl_seconds=self.settings.engine.redis.presence_ttl,
                )
                extra += ["--engine-socket", str(server.path)]
            async with asyncio.TaskGroup() as tg:
                serving = None
                if server is not None:
                    serving = tg.create_task(server.run())
                    await server.ready.wait()
                log.info(
                    "supervisor %d: %d workers on %s:%d (engine %s)",
                    os.getpid(),
                    self.workers,
                    host,
                    port,
                    self.settings.engine.type,
                )
                keepers = [tg.create_task(self._keep(index, extra)) for index in range(self.workers)]
                await self._stopping.wait()
                log.info("supervisor: stopping %d workers", len(self._procs))
                await self._stop_all()
                for keeper in keepers:
                    keeper.cancel()
                if serving is not None:
                    serving.cancel()
        finally:
            holder.close()
            shutil.rmtree(workdir, ignore_errors=True)
        return 0

    async def _keep(self, index: int, extra: list[str]) -> None:
        """Run worker ``index`` and restart it whenever it exits, until stopping."""
        pause = 0.0
        while not self._stopping.is_set():
            argv = [
                *self.worker_argv,
                "--worker-index",
                str(index),
                "--supervisor-pid",
                str(os.getpid()),
                *extra,
            ]
            started = time.monotonic()
            # A session of its own: a terminal's Ctrl-C reaches only the supervisor, which then
            # stops each worker once (a second signal would make uvicorn skip its graceful shutdown).
            proc = await asyncio.create_subprocess_exec(*argv, start_new_session=True)
            self._procs[index] = proc
            log.info("worker %d started (pid %d)", index, proc.pid)
            code = await proc.wait()
            self._procs.pop(index, None)
            if self._stopping.is_set():
                return
            if time.monotonic() - started < QUICK_EXIT_SECONDS:
                low, high = RESTART_PAUSE_SECONDS
                pause = min(high, max(low, pause * 2))
            else:
                pause = 0.0
            log.warning(
                "worker %d (pid %d) exited with %s; restarting in %.1f s", index, proc.pid, code, pause
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._stopping.wait()

    async def _stop_all(self) -> None:
        procs = list(self._procs.values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        grace = self.settings.shutdown.timeout + STOP_MARGIN_SECONDS
        waits = [asyncio.create_task(proc.wait()) for proc in procs]
        if waits:
            _, late = await asyncio.wait(waits, timeout=grace)
            for proc in procs:
                if proc.returncode is None:
                    log.warning("worker pid %d still running after %.0f s: killing it", proc.pid, grace)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            if late:
                await asyncio.wait(late)


__all__ = [
    "BROKER_SOCKET_NAME",
    "Supervisor",
    "die_with_parent",
    "listening_socket",
    "remove_stale_workdirs",
]
