"""``taskcast status-api serve --workers N``: N Status API processes on ONE port.

Ingest is CPU-bound in Python (JSON Schema, JWT, the domain, SQL building): one process saturates
one core. The supervisor here (the process the operator starts):

1. validates the configuration and applies the schema and registry files ONCE (what
   ``database.auto_init`` would do in every worker, where N workers would race on it);
2. starts N worker processes — each is ``taskcast status-api serve`` of the same config with
   ``--reuse-port``: its own listening socket on the same host:port with ``SO_REUSEPORT``, so the
   kernel spreads incoming connections over the workers — with ``database.auto_init`` off;
3. forwards SIGTERM/SIGINT to every worker (each drains like a single server) and waits for them,
   killing any still running after ``http.shutdown_timeout_seconds`` + :data:`STOP_MARGIN_SECONDS`;
4. if a worker dies on its own, stops the others and exits 1: the orchestrator (compose, k8s,
   systemd) restarts the whole unit — no half-sized unit serving silently.

Each worker is a whole Status API: its own pool (``database.pool_size`` per worker), its own group
commit (``ingest.*``: batches form per process), its own wake-up hint sender, its own ``/metrics``
(a scrape sees one worker; see docs/status-api.md "Workers"). Linux/macOS only (``SO_REUSEPORT``).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
from types import FrameType

log = logging.getLogger("status_api.workers")

STOP_MARGIN_SECONDS = 5.0
"""How long past ``http.shutdown_timeout_seconds`` a worker may take to exit before it is killed
(a worker's own stop is bounded by the timeout plus about a second, httpwire/shutdown.py)."""
#: Environment of every worker: the supervisor already applied the schema.
WORKER_ENV = {"TASKCAST_STATUS_API_DATABASE__AUTO_INIT": "false"}


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` with ``SO_REUSEPORT`` (shared with sibling workers).

    Raises:
        OSError: the address is taken by a socket without ``SO_REUSEPORT`` (or another user).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: a worker gets SIGTERM if the supervisor dies (even by SIGKILL), so none is orphaned."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def worker_argv(config_path: str, host: str, port: int) -> list[str]:
    """The command line of one worker (the same entry point as ``taskcast status-api serve``)."""
    return [
        sys.executable,
        "-m",
        "taskcast",
        "status-api",
        "serve",
        "--config",
        config_path,
        "--host",
        host,
        "--port",
        str(port),
        "--reuse-port",
    ]


def supervise(config_path: str, workers: int, host: str, port: int, shutdown_timeout_seconds: float) -> int:
    """Run ``workers`` worker processes until SIGTERM/SIGINT or a worker's death; the exit code.
    Workers still running ``shutdown_timeout_seconds`` + ``STOP_MARGIN_SECONDS`` after they were
    told to stop are killed."""
    grace = math.ceil(shutdown_timeout_seconds + STOP_MARGIN_SECONDS)
    env = {**os.environ, **WORKER_ENV}
    procs = [
        subprocess.Popen(worker_argv(config_path, host, port), env=env, preexec_fn=_die_with_parent)
        for _ in range(workers)
    ]
    log.info("status-api supervisor %d: %d workers on %s:%d", os.getpid(), workers, host, port)
    stopping = threading.Event()

    def stop_all(sig: int = signal.SIGTERM) -> None:
        stopping.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if not stopping.is_set():
            log.info("status-api supervisor: signal %d, stopping %d workers", signum, len(procs))
            stop_all()
            signal.alarm(grace)  # a bound on the drain

    def on_alarm(_signum: int, _frame: FrameType | None) -> None:
        log.warning("status-api workers still running after %ds; killing", grace)
        stop_all(signal.SIGKILL)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    code = 0
    alive = {p.pid: p for p in procs}
    while alive:
        pid, status = os.waitpid(-1, 0)  # blocks; PEP 475 resumes it after a signal handler
        proc = alive.pop(pid, None)
        if proc is None:
            continue
        proc.returncode = os.waitstatus_to_exitcode(status)
        if not stopping.is_set():
            log.error("status-api worker %d exited (%s); stopping the others", pid, proc.returncode)
            code = 1
            stop_all()
            signal.alarm(grace)
    signal.alarm(0)
    return code
