"""The relay's database waits are bounded like the Status API's (issue 14): pointed at a server that
accepts TCP and never answers, a claim fails with the driver's timeout instead of waiting forever,
and the operator CLI exits 1 with a one-line error. No services needed: the "server" is a listening
socket that never accepts (the kernel completes the TCP handshake from the backlog).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay import cli
from relay.claim import OutboxLeases
from status_api.storage import database
from status_api.storage.database import create_engine
from tests.support import scaled

#: The driver's bounds for these tests: the production values with time compressed (the read
#: timeout stays above the 5 s lock wait the engine requires below it); the engine reads them when
#: it is created, so the tests prove they are what bounds the wait.
SHORT_CONNECT_SECONDS = 1.0
SHORT_READ_SECONDS = database.LOCK_WAIT_TIMEOUT_SECONDS + 1.0
#: Far above the bound (connect + one unanswered read); only reached if the wait is unbounded.
GUARD_SECONDS = 3 * (SHORT_CONNECT_SECONDS + SHORT_READ_SECONDS)


@pytest.fixture
def silent_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(database, "CONNECT_TIMEOUT_SECONDS", SHORT_CONNECT_SECONDS)
    monkeypatch.setattr(database, "READ_TIMEOUT_SECONDS", SHORT_READ_SECONDS)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)
        yield f"mysql+asyncmy://relay:pw@127.0.0.1:{srv.getsockname()[1]}/outbox"


async def test_claim_against_a_silent_server_fails_with_the_read_timeout(silent_url: str) -> None:
    engine = create_engine(silent_url, pool_size=1, max_overflow=0)
    leases = OutboxLeases(engine, "relay-silent", lease_seconds=30)
    try:
        with pytest.raises(sa.exc.OperationalError) as err:
            async with asyncio.timeout(scaled(GUARD_SECONDS)):
                await leases.claim(10)
        assert "timeout" in str(err.value).lower()
    finally:
        await engine.dispose()


def test_operator_cli_against_a_silent_server_exits_1_with_one_line(
    silent_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``relay dead list`` goes through the relay's own composition (cli -> shared engine)."""
    cfg = tmp_path / "relay.json"
    cfg.write_text(json.dumps({"database_url": silent_url, "gateway_api_url": "http://unused/api"}))
    assert cli.main(["dead", "list", "--config", str(cfg), "--json"]) == 1
    err = capsys.readouterr().err
    assert "database" in err and "Traceback" not in err and "pw" not in err
