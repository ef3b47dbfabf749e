"""client-js through its own npm scripts: node:test unit + integration suites (they start a real
gateway, the Status API and the outbox relay themselves), the index.d.ts type check, the bundle
byte budget, and the browser tests in headless Debian chromium (playwright-core).

Everything runs in a subprocess with a timeout (scaled by TASKCAST_TEST_TIME_SCALE, which the npm
scripts' own waits read too: client-js/test/support/services.js ``ms()``); a failure prints the
script's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import scaled

pytestmark = pytest.mark.node

CLIENT_JS = Path(__file__).resolve().parents[2] / "client-js"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def npm(*args: str, timeout: float) -> None:
    if shutil.which("npm") is None or not (CLIENT_JS / "node_modules" / "esbuild").is_dir():
        pytest.fail("npm or client-js/node_modules missing: run `bash scripts/bootstrap.sh`")
    env = {**os.environ, "TASKCAST_PYTHON": sys.executable}
    proc = subprocess.run(
        ["npm", "run", "--silent", *args],
        cwd=CLIENT_JS,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-8000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"npm run {' '.join(args)}\n{output}"


@pytest.mark.timeout(480)
def test_node_suites_store_properties_and_client_against_real_gateway() -> None:
    npm("test", timeout=scaled(460))


@pytest.mark.timeout(120)
def test_typecheck_build_and_byte_budget() -> None:
    npm("typecheck", timeout=scaled(100))
    npm("build", timeout=scaled(60))
    npm("size", timeout=scaled(30))


@pytest.mark.timeout(1500)
def test_board_in_headless_chromium() -> None:
    """Board, outage (gateway down at cold start, Status API down during a gateway restart, detail
    after STALE: each waits out the feed's 10 s STALE timer or its 30 s batchGet check), SSE."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: run `bash scripts/bootstrap.sh` (installs Debian chromium)")
    npm("test:browser", timeout=scaled(1480))
