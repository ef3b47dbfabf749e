"""Fixtures of the security / bad-input fault suite (issue 10): real gateway processes on loopback
with the deploy config's namespaces (tests/faults/security/*), a ``Secrets`` book of every
token and key the tests used (grepped out of the gateway's log at teardown), a control client
that must receive every publication of its channel while an abuser misbehaves, and /metrics and
/proc readers for the churn and slowloris checks."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.helpers.raw_client import Raw
from tests.support import GatewayProcess, mint_token, scaled, wait_until

SECRET = "security-suite-hmac-secret-0123456789abcdef"
API_KEY = "security-suite-api-key-0123456789abcdef"
ALLOWED_ORIGIN = "http://board.example"
HISTORY = {"history_size": 1000, "history_ttl": "300s", "force_recovery": True}
TIMEOUT = 10.0
"""Bound on a step of a security test (a handshake, a close, a publication); scaled where used."""

# The namespaces of deploy/gateway.json (no allow_subscribe_for_client on tenant channels), plus
# `ctl` for the control client and limits small enough to reach quickly.
SECURITY_CONFIG: dict[str, Any] = {
    "http_api": {"key": API_KEY},
    "log": {"level": "debug"},
    "prometheus": {"enabled": True},
    "client": {
        "token": {"hmac_secret_key": SECRET},
        "allowed_origins": [ALLOWED_ORIGIN],
        "channel_limit": 8,
        "user_connection_limit": 2,
        # Not a test of the stale timer (test_half_open.py runs its own): a client starved of CPU
        # on a loaded machine must not be closed 3502 between its upgrade and its connect (a
        # 2 s delay closed test_command_flood_closes_3013's burst with 3502 at load 10-20).
        "stale_close_delay": f"{scaled(60):g}s",
    },
    "websocket": {"message_size_limit": 4096},
    "sse": {"enabled": True},
    "http_stream": {"enabled": True},
    "uni_sse": {"enabled": True},
    "channel": {
        "namespaces": [
            {"name": "task_user", **HISTORY},
            {"name": "task_detail", **HISTORY, "subscription_limit_per_connection": 2},
            {"name": "task_project", **HISTORY},
            {"name": "task_system", **HISTORY, "allow_subscribe_for_client": True},
            {"name": "ctl", **HISTORY, "allow_subscribe_for_client": True},
        ]
    },
}


def security_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """SECURITY_CONFIG with top-level sections merged one level deep."""
    config = copy.deepcopy(SECURITY_CONFIG)
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def uid() -> str:
    return uuid.uuid4().hex[:10]


@dataclass
class Secrets:
    """Every token, key and secret a test put on the wire; none may appear in a log."""

    values: set[str] = field(default_factory=lambda: {SECRET, API_KEY}, repr=False)

    def token(self, secret: str = SECRET, sub: str = "u", **claims: Any) -> str:
        token = mint_token(secret, sub, **claims)
        self.values.add(token)
        return token

    def add(self, value: str) -> str:
        self.values.add(value)
        return value

    def assert_not_in(self, text: str, where: str) -> None:
        leaked = sorted(v[:12] + "…" for v in self.values if v and v in text)
        assert not leaked, f"secrets found in {where}: {leaked}"
        # A JWT-shaped string in a log is a leak even if this book missed it.
        assert not re.search(r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{16,}", text), f"a JWT in {where}"


@pytest.fixture(scope="session")
def secrets() -> Secrets:
    return Secrets()


GatewayFactory = Callable[..., GatewayProcess]


@pytest.fixture(scope="module")
def security_gateway(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[GatewayProcess]:
    """One gateway per module with SECURITY_CONFIG; its log must hold no secret at the end."""
    gw = GatewayProcess(security_config(), tmp_path_factory.mktemp("security-gw")).start()
    yield gw
    gw.terminate()
    secrets.assert_not_in(gw.log_text(), f"gateway log {gw.log_path}")


@pytest.fixture
def gateway_factory(tmp_path: Path, secrets: Secrets) -> Iterator[GatewayFactory]:
    """``gateway_factory(config)`` starts a gateway; all stop at teardown and their logs are
    checked for secrets."""
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any] | None = None) -> GatewayProcess:
        gw = GatewayProcess(config if config is not None else security_config(), tmp_path / "gw").start()
        secrets.add(gw.api_key)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.terminate()
        secrets.assert_not_in(gw.log_text(), f"gateway log {gw.log_path}")


class Session:
    """A Raw protocol client with its pump task; ``close()`` is idempotent."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.raw = Raw(ws)
        self.task = asyncio.create_task(self.raw.pump())

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.raw.call(method, params)

    async def close(self) -> None:
        await self.ws.close()
        self.task.cancel()


@contextlib.asynccontextmanager
async def ws_session(
    gw: GatewayProcess, token: str | None = None, **connect_params: Any
) -> AsyncIterator[Session]:
    """An open WebSocket with a pumping Raw client; connected with ``token`` when given."""
    ws = await connect(gw.ws_url, open_timeout=scaled(TIMEOUT), max_size=None)
    session = Session(ws)
    try:
        if token is not None:
            reply = await session.call("connect", {"token": token, **connect_params})
            assert "connect" in reply, reply
        yield session
    finally:
        await session.close()


async def api(gw: GatewayProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=scaled(TIMEOUT), headers={"X-API-Key": gw.api_key}) as http:
        r = await http.post(f"{gw.api_url}/{method}", json=params)
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body


async def metrics(gw: GatewayProcess) -> dict[str, float]:
    """Unlabelled samples of /metrics (gauges such as centrifugo_node_num_clients)."""
    async with httpx.AsyncClient(timeout=scaled(TIMEOUT)) as http:
        text = (await http.get(gw.url + "/metrics")).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


def proc_stats(gw: GatewayProcess) -> tuple[int, int]:
    """(open fds, RSS in KiB) of the gateway process from /proc."""
    assert gw.proc is not None
    pid = gw.proc.pid
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return fds, rss


class Control:
    """A control client subscribed to a fresh ``ctl:`` channel while a publisher publishes into
    it; ``finish()`` stops the publisher and asserts every publication arrived, in order."""

    def __init__(self, gw: GatewayProcess, secrets: Secrets) -> None:
        self.gw = gw
        self.secrets = secrets
        self.channel = f"ctl:{uid()}"
        self.published = 0
        self.received: list[int] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._cm: Any = None

    async def start(self, minimum: int = 50) -> None:
        self._cm = ws_session(self.gw, self.secrets.token(sub=f"control-{uid()}"))
        session: Session = await self._cm.__aenter__()
        reply = await session.call("subscribe", {"channel": self.channel})
        assert "subscribe" in reply, reply
        self.session = session
        self.minimum = minimum
        self._tasks = [asyncio.create_task(self._publish()), asyncio.create_task(self._receive())]

    async def _publish(self) -> None:
        async with httpx.AsyncClient(timeout=scaled(TIMEOUT), headers={"X-API-Key": self.gw.api_key}) as http:
            while not self._stop.is_set() or self.published < self.minimum:
                r = await http.post(
                    f"{self.gw.api_url}/publish",
                    json={"channel": self.channel, "data": {"n": self.published}},
                )
                assert "result" in r.json(), r.text
                self.published += 1

    async def _receive(self) -> None:
        while True:
            msg = await self.session.raw.messages.get()  # Raw answers the server's pings itself
            pub = msg.get("push", {}).get("pub")
            if pub is not None:
                self.received.append(pub["data"]["n"])

    async def close(self) -> None:
        """Teardown for a test that failed before ``finish``."""
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        if self._cm is not None:
            cm, self._cm = self._cm, None
            await cm.__aexit__(None, None, None)

    async def finish(self) -> None:
        self._stop.set()
        publisher = self._tasks[0]
        async with asyncio.timeout(scaled(TIMEOUT * 3)):
            await publisher
        try:
            await wait_until(lambda: len(self.received) >= self.published, TIMEOUT, "control publications")
            assert not self.session.raw.closed.done(), "control client was disconnected"
        finally:
            await self.close()
        assert self.received == list(range(self.published)), "control client missed or reordered"


@pytest.fixture
async def control(security_gateway: GatewayProcess, secrets: Secrets) -> AsyncIterator[Control]:
    ctl = Control(security_gateway, secrets)
    await ctl.start()
    yield ctl
    await ctl.close()


def frame_lines(frame: str | bytes) -> list[dict[str, Any]]:
    text = frame.decode() if isinstance(frame, bytes) else frame
    return [json.loads(line) for line in text.split("\n") if line.strip()]


# --- a raw WebSocket over asyncio streams: exact bytes on the wire, no client-side checks -------

HANDSHAKE = (
    "GET /connection/websocket HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
MASK = b"\x01\x02\x03\x04"


def ws_frame(payload: bytes, opcode: int = 1, *, fin: bool = True) -> bytes:
    """One masked client frame (RFC 6455 §5.2); ``fin=False`` for all but the last fragment of a
    message, whose later fragments have opcode 0 (continuation, §5.4)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    masked = bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))
    return head + MASK + masked


async def raw_ws_open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """TCP connection with a finished upgrade (101 read)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HANDSHAKE.format(port=port).encode())
    async with asyncio.timeout(scaled(TIMEOUT)):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head[:60]
    return reader, writer


async def read_ws_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(opcode, payload) of the next server frame (servers never mask)."""
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(await reader.readexactly(2), "big")
    elif n == 127:
        n = int.from_bytes(await reader.readexactly(8), "big")
    return b0 & 0x0F, await reader.readexactly(n)


async def read_until_close(reader: asyncio.StreamReader, within: float = TIMEOUT) -> int | None:
    """Read frames until the server's close frame; its code (None if the TCP closed first)."""
    try:
        async with asyncio.timeout(scaled(within)):
            while True:
                opcode, payload = await read_ws_frame(reader)
                if opcode == 8:
                    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return None
