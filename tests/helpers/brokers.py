"""Throwaway PostgreSQL and nats-server processes for the consumer tests (Debian's packages),
each on a free port with its state in a temp dir, started once per pytest session (per xdist
worker) and stopped after it. ``scripts/services.sh`` installs the packages; without a binary
a test is skipped, or fails under ``TASKCAST_TEST_REQUIRE_SERVICES=1`` (``make test``)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from taskcast.dev.procs import free_port
from tests.support.waiting import wait_until_blocking

READY_SECONDS = 30.0


def _missing(what: str) -> None:
    if os.environ.get("TASKCAST_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(
            f"{what} is not installed but TASKCAST_TEST_REQUIRE_SERVICES=1 (scripts/services.sh installs it)"
        )
    pytest.skip(f"{what} is not installed (scripts/services.sh installs it)")


def postgres_bin(name: str) -> str | None:
    """A PostgreSQL server binary: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL cluster (trust auth, fsync off); yields the DSN of its ``postgres`` database.
    As root the server runs as the ``postgres`` user (it refuses to run as root)."""
    initdb, server = postgres_bin("initdb"), postgres_bin("postgres")
    if initdb is None or server is None:
        _missing("PostgreSQL (initdb, postgres)")
    assert initdb is not None and server is not None
    state = Path(tempfile.mkdtemp(prefix="tc-pg-"))
    user: str | None = None
    if os.geteuid() == 0:
        user = "postgres"
        entry = pwd.getpwnam(user)
        os.chown(state, entry.pw_uid, entry.pw_gid)
    data, port = state / "data", free_port()
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            [initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            user=user,
            cwd=state,
        )
        with (state / "postgres.log").open("wb") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [
                    server, "-D", str(data), "-p", str(port), "-k", str(state),
                    "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                    "-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=16MB",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=user,
                cwd=state,
            )  # fmt: skip
        ready = postgres_bin("pg_isready")
        assert ready is not None

        def accepting() -> bool:
            check = [ready, "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
            return subprocess.run(check, check=False, capture_output=True).returncode == 0

        wait_until_blocking(
            lambda: proc is not None and (proc.poll() is not None or accepting()),
            READY_SECONDS,
            "PostgreSQL to accept connections (past its startup)",
            every=0.1,
        )
        assert proc.poll() is None, (state / "postgres.log").read_text(errors="replace")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if proc is not None:
            _stop(proc, signal.SIGINT)  # fast shutdown
        shutil.rmtree(state, ignore_errors=True)


@contextmanager
def nats_server() -> Iterator[str]:
    """A nats-server with JetStream (``-js``, its store in a temp dir); yields its URL."""
    binary = shutil.which("nats-server")
    if binary is None:
        _missing("nats-server")
    assert binary is not None
    state = Path(tempfile.mkdtemp(prefix="tc-nats-"))
    port = free_port()
    with (state / "nats.log").open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(state / "store")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_blocking(
            lambda: proc.poll() is not None or _accepts(port),
            READY_SECONDS,
            "nats-server to accept connections",
        )
        assert proc.poll() is None, (state / "nats.log").read_text(errors="replace")
        yield f"nats://127.0.0.1:{port}"
    finally:
        _stop(proc, signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)
