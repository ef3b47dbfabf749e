"""``TASKCAST_TEST_LEAKS=1`` (tests/support/leaks.py) fails the test that leaked a socket, not a
later one: proved on a pytest run of its own over two tests, the first leaking a connected socket
inside a reference cycle (which only the cyclic collector finds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.suite import ROOT
from tests.support.waiting import scaled

CONFTEST = """
from tests.support import leaks


def pytest_configure(config):
    if leaks.enabled():
        config.pluginmanager.register(leaks.CollectAfterEachTest(), "taskcast-leaks")
"""

LEAKY = """
import gc
import socket


class Holder:
    pass


def test_leaks_a_socket_in_a_cycle():
    gc.disable()  # no automatic collection: only the plugin's may find the cycle
    server = socket.create_server(("127.0.0.1", 0))
    holder = Holder()
    holder.sock = socket.create_connection(server.getsockname())
    holder.me = holder
    server.close()


def test_innocent():
    assert True
"""


def _run(tmp_path: Path, leaks: str) -> str:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    env = {
        **os.environ,
        "TASKCAST_TEST_LEAKS": leaks,
        "PYTHONPATH": str(ROOT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-rA",
        "-W",
        "error",
        "-p",
        "no:cacheprovider",
    ]  # the suite's "error"
    argv += ["--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(120))
    return done.stdout + done.stderr


def test_a_leaked_socket_fails_the_test_that_leaked_it(tmp_path: Path) -> None:
    out = _run(tmp_path, "1")
    assert "ERROR at teardown of test_leaks_a_socket_in_a_cycle" in out, out
    assert "ResourceWarning: unclosed <socket.socket" in out, out
    assert "PASSED test_leaky.py::test_innocent" in out, out
