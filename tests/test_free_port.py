"""``taskcast.dev.procs.free_port``: listening ports for the topology and the suite's services come
from a range below the kernel's ephemeral one (an outgoing connection's source port can never take
one between the pick and the service's bind), never twice, never a bound one; each xdist worker has
a range of its own."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from taskcast.dev import procs


def _ephemeral() -> tuple[int, int]:
    lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(lo), int(hi)


def _unused_block(size: int) -> int:
    """The first of ``size`` consecutive ports below every worker's range that are free now."""
    for first in range(6000, procs.PORT_RANGE[0] - size, size):
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
