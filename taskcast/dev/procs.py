"""Child processes for the developer tools, the benchmarks and the tests: ONE free-port helper, ONE
readiness probe and ONE managed-process type (:class:`Proc`), plus the argv of every Taskcast
service (:func:`service_argv`) so nothing spells ``python -m taskcast ...`` by hand.

Contracts: a :class:`Proc` writes its output to its own log file, is only ever signalled by its
owner (``stop``/``kill`` act on this one child), and ``wait_ready`` fails fast with the log when
the child exits before it is ready.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 30.0
READY_POLL_SECONDS = 0.05


PORT_RANGE_ENV = "TASKCAST_DEV_PORT_RANGE"
"""``LO-HI``: the ports ``free_port`` hands out (default ``10000-20000``, below the kernel's
ephemeral range). A test run gives each of its worker processes a range of its own."""
PORT_RANGE = (10000, 20000)
_handed_out: set[int] = set()
_next_port: dict[tuple[int, int], int] = {}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_range() -> tuple[int, int]:
    lo, _, hi = os.environ.get(PORT_RANGE_ENV, "").partition("-")
    if lo.isdigit() and hi.isdigit() and 1024 <= int(lo) < int(hi) <= 65536:
        return int(lo), int(hi)
    return PORT_RANGE


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now that an outgoing connection cannot take before the service
    binds it: outside the kernel's ephemeral range (``TASKCAST_DEV_PORT_RANGE``, default
    10000-20000), never the same one twice in this process, the next after the last one handed out
    (from a random start). Falls back to a kernel-picked port when the range overlaps the ephemeral
    range or has no free port left."""
    lo, hi = _port_range()
    if hi <= _ephemeral_low():
        start = _next_port.get((lo, hi), random.randrange(lo, hi))
        for i in range(hi - lo):
            port = lo + (start - lo + i) % (hi - lo)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            _next_port[(lo, hi)] = port + 1
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """True when ``GET url`` answers 200 within ``timeout``; any failure is False."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as err:  # a non-2xx answer (e.g. 503 while starting) holds the socket
        err.close()
        return False
    except (urllib.error.URLError, OSError):
        return False


def service_argv(*args: str) -> list[str]:
    """``[python, -m, taskcast, *args]``, e.g. ``service_argv("relay", "run", "--config", path)``."""
    return [sys.executable, "-m", "taskcast", *args]


def start_services(state_dir: Path) -> tuple[str, str]:
    """Start a throwaway Redis + MariaDB (``scripts/services.sh start``) keeping their state in
    ``state_dir``; returns ``(redis_url, mysql_url)``. Stop with ``scripts/services.sh stop``."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/services.sh"), "start", str(state_dir)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    urls = dict(line.removeprefix("export ").partition("=")[::2] for line in out.splitlines())
    return urls.get("TASKCAST_TEST_REDIS_URL", ""), urls.get("TASKCAST_TEST_MYSQL_URL", "")


@dataclass
class Proc:
    """One managed child process with its log file; ready when ``health_url`` answers 200 (or at
    once without one)."""

    name: str
    argv: list[str]
    env: dict[str, str] | None
    log_path: Path
    health_url: str = ""
    cwd: Path = ROOT
    popen: subprocess.Popen[bytes] | None = None
    #: Start the child in a session of its own: a terminal's Ctrl-C then reaches only the owner,
    #: which stops its children in order (``make topology``).
    new_session: bool = False

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.new_session,
            )
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Poll ``health_url`` until 200; RuntimeError if the child exits, TimeoutError after ``timeout``."""
        assert self.popen is not None, f"{self.name} was never started"
        deadline = time.monotonic() + timeout
        while True:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log_text()}")
            if not self.health_url or http_ok(self.health_url):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready within {timeout}s:\n{self.log_text()}")
            time.sleep(READY_POLL_SECONDS)  # polling interval of a bounded wait

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to this child if it is still running."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default) and, for SIGKILL, reap the child."""
        self.send_signal(sig)
        if sig == signal.SIGKILL and self.popen is not None:
            self.popen.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        """Wait for the exit; raises ``subprocess.TimeoutExpired`` after ``timeout``."""
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.wait(timeout=timeout)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        return self.popen.returncode
