"""Child processes for the developer tools, the benchmarks and the tests: ONE free-port helper, ONE
readiness probe and ONE managed-process type (:class:`Proc`), plus the argv of every Taskcast
service (:func:`service_argv`) so nothing spells ``python -m taskcast ...`` by hand.

Contracts: a :class:`Proc` writes its output to its own log file, is only ever signalled by its
owner (``stop``/``kill`` act on this one child), and ``wait_ready`` fails fast with the log when
the child exits before it is ready.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
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
PORT_LOCK_PATH = Path(tempfile.gettempdir()) / "taskcast-dev-ports.lock"
"""One byte per port, locked by the process ``free_port`` handed the port to, for its lifetime:
every run on the machine (other checkouts, other agents) skips a port another process picked,
between the pick and the service's bind and across a restart of the service on it."""
_port_lock_fd: int | None = None


def _reserve(port: int) -> bool:
    """Lock ``port``'s byte of :data:`PORT_LOCK_PATH` (released when this process exits); False
    when another process holds it. Without the shared file the bind check alone decides."""
    global _port_lock_fd
    if _port_lock_fd is None:
        try:
            _port_lock_fd = os.open(PORT_LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return True
    try:
        fcntl.lockf(_port_lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
    except OSError:
        return False
    return True


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
    range or has no free port left. A port is free when it binds now and no other process holds
    its lock (:data:`PORT_LOCK_PATH`): two runs on one machine never pick the same port, where the
    later service would fail to bind while the earlier one answered its readiness probe."""
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
            if not _reserve(port):
                continue
            _handed_out.add(port)
            _next_port[(lo, hi)] = port + 1
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (any address) in this network namespace."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rpartition(":")[2], 16) == port:  # 0A: LISTEN
                inodes.add(f[9])
    return inodes


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a service's worker processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            continue  # gone meanwhile
    return out


def listens_on(pid: int, port: int) -> bool | None:
    """Whether ``pid`` or a descendant holds a socket listening on ``port``; False when only other
    processes do; None when this cannot be told (no /proc, nothing listening)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for p in _tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False


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
        """Poll ``health_url`` until 200 from this child; RuntimeError if the child exits,
        TimeoutError after ``timeout``. A loopback ``health_url`` counts only once this child (or
        a worker of it) listens on its port: another process on that port answers too, and this
        child then fails to bind and exits."""
        assert self.popen is not None, f"{self.name} was never started"
        deadline = time.monotonic() + timeout
        foreign = False
        while True:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log_text()}")
            if not self.health_url:
                return
            if http_ok(self.health_url):
                foreign = self._answered_by_another_process()
                if not foreign:
                    return
            if time.monotonic() > deadline:
                why = " (its port is another process's)" if foreign else ""
                raise TimeoutError(f"{self.name} not ready within {timeout}s{why}:\n{self.log_text()}")
            time.sleep(READY_POLL_SECONDS)  # polling interval of a bounded wait

    def _answered_by_another_process(self) -> bool:
        url = urllib.parse.urlsplit(self.health_url)
        if self.popen is None or url.hostname not in ("127.0.0.1", "localhost") or url.port is None:
            return False
        return listens_on(self.popen.pid, url.port) is False

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
