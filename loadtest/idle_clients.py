"""Idle WebSocket clients for loadtest/bench_idle.py: C epoll client processes
(loadtest/fanout_client.c ``--tokens``), each holding up to ``per_process`` connections that
connect with a token of their own and then only answer the server's pings.

Why C and not the asyncio ``fleet.WSConn``: at 100,000 connections and 25 s pings the clients
answer 4,000 pings/s beside the gateway on the same two cores; the C client does it in 9 % of a
core and 2.9 KiB per connection (measured at 100,000), with no interpreter, event loop or
collector of its own competing with the gateway's. Several processes because one
process holds at most its RLIMIT_NOFILE of sockets (20,000 on the reference machine, a hard
limit that cannot be raised there).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def build(tmp: Path) -> Path:
    """Compile loadtest/fanout_client.c into ``tmp`` (gcc -O2); the executable's path."""
    exe = tmp / "fanout_client"
    subprocess.run(
        ["gcc", "-O2", "-o", str(exe), str(HERE / "fanout_client.c"), "-lz"], check=True, timeout=120
    )
    return exe


@dataclass
class ClientProc:
    """One C client process and what it reported."""

    proc: subprocess.Popen[str]
    first: int
    """Index of its first connection (its tokens are for ``u<first>``…)."""
    n: int
    ready: int = 0
    failed: int = 0
    connect_s: float = 0.0
    last: dict[str, Any] = field(default_factory=dict)

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()

    def read_json(self) -> dict[str, Any]:
        """The next JSON line (bounded by the client: handshakes give up after 30 s per batch,
        a window ends at its deadline)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"idle client exited ({self.proc.poll()})")
        data: dict[str, Any] = json.loads(line)
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.send("QUIT")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start(
    exe: Path,
    port: int,
    tokens: list[str],
    first: int,
    workdir: Path,
    *,
    concurrency: int,
    source_addresses: int,
) -> ClientProc:
    """Start one client process for ``tokens`` (connections ``first``…); it connects at once and
    prints its ready line (read it with :func:`wait_ready`)."""
    token_file = workdir / f"tokens-{first}.txt"
    token_file.write_text("\n".join(tokens) + "\n")
    argv = [
        str(exe),
        "--port",
        str(port),
        "--tokens",
        str(token_file),
        "--concurrency",
        str(max(1, concurrency)),
        "--source-addresses",
        str(source_addresses),
        "--first",
        str(first),
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    return ClientProc(proc, first, len(tokens))


def wait_ready(clients: list[ClientProc]) -> None:
    """Read every client's ready line (they connect in parallel: this returns after the last)."""
    for c in clients:
        r = c.read_json()
        c.ready, c.failed, c.connect_s = int(r["ready"]), int(r["failed"]), float(r["connect_s"])


def window(clients: list[ClientProc], seconds: float) -> list[dict[str, Any]]:
    """Ask every client to count the pings it receives over the next ``seconds``; their results
    (``open``: connections still open, ``pings``: pings received in the window)."""
    t0 = time.monotonic_ns()  # CLOCK_MONOTONIC, the client's clock
    for c in clients:
        c.send(f"GO {t0} 0 {seconds:.3f} 0")
    out = []
    for c in clients:
        c.last = c.read_json()["result"]
        out.append(c.last)
    return out
