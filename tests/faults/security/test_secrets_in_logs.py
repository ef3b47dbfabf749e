"""No token, key or secret in any captured log of the whole topology (reliability-notes S1).

One local production topology (taskcast/dev/topology.py: MariaDB, Redis, a gateway, the Status
API, the reconciler, a relay, nginx) with known secrets runs the demo workload (service JWTs,
execution tokens, outbox relay) plus the security probes of this suite in miniature: a forged user
JWT, a realtime session and a detail subscription token from the Status API, a forged gateway
token, a wrong server API key. Then every process is stopped and every log file is searched for
each secret, each token seen, the database password and any JWT-shaped string.

The gateway's own logs under every bad input are checked by the other modules of this package
(each gateway fixture greps its log at teardown, with ``log.level: debug``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import jwt
import pytest
from websockets.asyncio.client import connect

from taskcast.demo import run_demo
from taskcast.dev.topology import Topology
from tests.faults.security.conftest import Secrets
from tests.helpers.raw_client import Raw
from tests.support import mint_token, scaled

pytestmark = [pytest.mark.redis, pytest.mark.mysql, pytest.mark.timeout(60)]

USER = "seclog/alice"


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, redis_url: str, mysql_url: str) -> Iterator[Topology]:
    topo = Topology(
        tmp_path_factory.mktemp("seclog"),
        redis_url=redis_url,
        mysql_url=mysql_url,
        gateways=1,
        relays=1,
        heartbeat_timeout_seconds=2.0,
    )
    topo.start()
    yield topo
    topo.stop()


def _user_token(secret: str, user: str) -> str:
    tenant, name = user.split("/")
    return jwt.encode(
        {"sub": name, "tenant": tenant, "exp": int(time.time()) + 600}, secret, algorithm="HS256"
    )


async def test_no_secret_or_token_in_any_log_of_the_topology(topology: Topology):
    book = Secrets(values=set())
    for value in (
        topology.hmac_secret,
        topology.api_key,
        topology.service_secret,
        topology.execution_secret,
        topology.user_secret,
    ):
        book.add(value)
    # The dev server's password is a plain word ("taskcast" is everywhere in logs): look for it in
    # its DSN form, which is how a leak would look.
    dsn = urlsplit(topology.mysql_url)
    if dsn.password:
        book.add(f":{dsn.password}@")

    user_token = book.add(_user_token(topology.user_secret, USER))
    forged = book.add(_user_token("forged-user-secret-0123456789abcdef", USER))
    async with httpx.AsyncClient(base_url=topology.public_url, timeout=scaled(30)) as http:
        assert (
            await http.get("/api/realtime/session", headers={"Authorization": f"Bearer {forged}"})
        ).status_code == 401
        session = (
            await http.get("/api/realtime/session", headers={"Authorization": f"Bearer {user_token}"})
        ).json()
        book.add(session["token"])

        # The demo workload: coordinator (service JWT), workers (execution tokens), the relay.
        result = await run_demo(
            topology.internal_url,
            topology.service_secret,
            tasks=2,
            speed=20.0,
            stale_after=2.0,
            reconcile_interval=1.0,
            users=(USER,),
            interval=0.2,
        )
        assert not result.failures, result.failures
        task_id = result.outcomes[0][2]
        detail = await http.post(
            "/api/realtime/subscription-token",
            json={"taskId": task_id, "sessionId": session["sessionId"]},
            headers={"Authorization": f"Bearer {user_token}"},
        )
        assert detail.status_code == 200, detail.text
        detail_token = book.add(detail.json()["token"])
        detail_channel = detail.json()["channel"]

    async with connect(topology.public_ws_url, open_timeout=scaled(30)) as ws:
        raw = Raw(ws)
        pump = asyncio.create_task(raw.pump())
        reply = await raw.call("connect", {"token": session["token"]})
        assert f"task_user:{USER}" in reply["connect"]["subs"], reply
        reply = await raw.call("subscribe", {"channel": detail_channel, "token": detail_token})
        assert "subscribe" in reply, reply
        pump.cancel()
    async with connect(topology.public_ws_url, open_timeout=scaled(30)) as ws:
        raw = Raw(ws)
        pump = asyncio.create_task(raw.pump())
        bad = book.add(mint_token("forged-gateway-secret-0123456789abcdef", "alice"))
        await raw.send("connect", {"token": bad})
        assert await raw.close_code() == 3500
        pump.cancel()
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        wrong = book.add(topology.api_key[::-1])
        r = await http.post(f"{topology.internal_api_url}/info", json={}, headers={"X-API-Key": wrong})
        assert r.status_code == 401

    topology.stop()
    _check_logs(Path(topology.workdir), book)


def _check_logs(workdir: Path, book: Secrets) -> None:
    logs = [p for p in workdir.rglob("*.log") if p.is_file()]
    expected = {"gateway1", "status-api1", "status-api2", "reconciler", "relay1", "error"}
    assert {p.stem for p in logs} >= expected, logs
    for path in logs:
        book.assert_not_in(path.read_text(errors="replace"), str(path))
