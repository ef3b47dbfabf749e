"""``taskcast.dev.procs.free_port``: listening ports for the topology and the suite's services come
from a range below the kernel's ephemeral one (an outgoing connection's source port can never take
one between the pick and the service's bind), never twice, never a bound one; each xdist worker has
a range of its own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from taskcast.dev import procs
from tests.support import scaled


def _ephemeral() -> tuple[int, int]:
    lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(lo), int(hi)


def _unused_block(size: int, start: int = 6000) -> int:
    """The first of ``size`` consecutive ports from ``start``, below every worker's range, that
    are free now (tests handing ports out use different ``start``s: a port is handed out once)."""
    for first in range(start, procs.PORT_RANGE[0] - size, size):
        socks = [socket.socket() for _ in range(size)]
        try:
            for i, sock in enumerate(socks):
                sock.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise AssertionError("no free block of ports")


def test_ports_come_from_the_range_below_the_ephemeral_one_never_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lo = _unused_block(10)
    monkeypatch.setenv(procs.PORT_RANGE_ENV, f"{lo}-{lo + 10}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", lo + 3))
        taken.listen()
        ports = [procs.free_port() for _ in range(9)]
        # The range is used up: a kernel-picked port, in the ephemeral range.
        assert _ephemeral()[0] <= procs.free_port() <= _ephemeral()[1]
    assert sorted(ports) == [p for p in range(lo, lo + 10) if p != lo + 3]
    assert all(p < _ephemeral()[0] for p in ports)
    assert procs.free_port() == lo + 3  # free again, never handed out


def test_a_range_inside_the_ephemeral_one_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    lo, _ = _ephemeral()
    monkeypatch.setenv(procs.PORT_RANGE_ENV, f"{lo}-{lo + 5}")
    assert procs.free_port() >= lo


def test_each_xdist_worker_has_its_own_range() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("not under xdist")
    lo, hi = (int(x) for x in os.environ[procs.PORT_RANGE_ENV].split("-"))
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    assert hi - lo == (procs.PORT_RANGE[1] - procs.PORT_RANGE[0]) // count
    assert lo == procs.PORT_RANGE[0] + int(worker[2:]) * (hi - lo)


def test_a_port_another_process_picked_is_skipped_until_it_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs on one machine (other checkouts, other agents) walk the same range: a port one
    picked is locked for that process's life, so the other never picks it before the service
    binds it (the later service would fail to bind while the earlier one answered its probe)."""
    lo = _unused_block(2, start=8000)
    monkeypatch.setenv(procs.PORT_RANGE_ENV, f"{lo}-{lo + 2}")
    argv = [sys.executable, "-c", PICK_AND_HOLD, f"{lo}-{lo + 2}"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as picker:
        assert picker.stdout is not None and picker.stdin is not None
        theirs = int(picker.stdout.readline())
        mine = procs.free_port()
        picker.stdin.close()
        picker.wait(scaled(30))
    assert {theirs, mine} == {lo, lo + 1}


PICK_AND_HOLD = """
import os, sys
os.environ["TASKCAST_DEV_PORT_RANGE"] = sys.argv[1]
from taskcast.dev import procs
print(procs.free_port(), flush=True)
sys.stdin.read()
"""


def test_a_health_probe_answered_by_another_process_is_not_ready(tmp_path: Path) -> None:
    """The port's other holder answers ``/health`` with 200: the child is ready only once it
    listens itself, so here its failure to bind ends the wait (not a test against a stranger)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        server = threading.Thread(target=_answer_ok, args=(other,), daemon=True)
        server.start()
        bind = f"import socket, time; time.sleep(0.5); socket.socket().bind(('127.0.0.1', {port}))"
        child = procs.Proc("binder", [sys.executable, "-c", bind], None, tmp_path / "binder.log",
                           f"http://127.0.0.1:{port}/health").start()  # fmt: skip
        try:
            with pytest.raises(RuntimeError, match="Address already in use"):
                child.wait_ready(scaled(30))
        finally:
            child.stop(scaled(10))


def _answer_ok(sock: socket.socket) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return  # closed: the test is over
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
