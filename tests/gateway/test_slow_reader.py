"""Overload that keeps the truth, end to end on a real gateway process (seed §13.3): a
WebSocket client that stops reading while a progress stream for many tasks flows is neither
disconnected nor buffered without bound; once it reads again it gets the final state of every
task and every notice (the relay's tags: ``task=<id>``, ``conflate=never`` for terminal states
and notices). The reader is a raw socket with a small receive buffer driven by websockets'
sans-I/O client, so "stops reading" is literal."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

from tests.support import GatewayProcess, WaitTimeout, mint_token, scaled, wait_until

SECRET = "slow-reader-secret-0123456789abcdefghij"
CHANNEL = "task_user:t/u1"
TASKS = 20
ROUNDS = 400
PAD = "x" * 2000
"""~2 KB per publication: 400 rounds x 20 tasks is ~16 MB, far past the socket buffers."""
QUEUE_MAX = 1 << 20
CONFLATE_AT = 64 << 10


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    config: dict[str, Any] = {
        "client": {
            "token": {"hmac_secret_key": SECRET},
            "queue_max_size": QUEUE_MAX,
            "queue_conflate_size": CONFLATE_AT,
            # The stalled reader cannot answer a ping while it stalls, and a loaded machine
            # stretches the stall past ping + pong timeout (3012): no ping within the test's bound.
            "ping_interval": f"{scaled(600):g}s",
        },
        "prometheus": {"enabled": True},
        "channel": {
            "namespaces": [
                {
                    "name": "task_user",
                    "history_size": 100,
                    "history_ttl": "300s",
                    "allow_subscribe_for_client": True,
                    "conflation_tag": "task",
                }
            ]
        },
    }
    gw = GatewayProcess(config, tmp_path / "gw").start()
    try:
        yield gw
    finally:
        gw.terminate()


class StalledReader:
    """A WebSocket client over a raw socket that reads only when told to."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, proto: ClientProtocol
    ) -> None:
        self.reader, self.writer, self.proto = reader, writer, proto
        self.messages: list[dict[str, Any]] = []
        self.close_code: int | None = None

    @classmethod
    async def open(cls, gw: GatewayProcess) -> StalledReader:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", gw.port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
        proto = ClientProtocol(parse_uri(gw.ws_url))
        proto.send_request(proto.connect())
        self = cls(reader, writer, proto)
        await self._send()
        await self._read_until(lambda: proto.handshake_exc is not None or proto.state.name == "OPEN")
        assert proto.handshake_exc is None
        return self

    async def _send(self) -> None:
        for chunk in self.proto.data_to_send():
            if chunk:
                self.writer.write(chunk)
        await self.writer.drain()

    async def command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.proto.send_text(json.dumps(cmd).encode())
        await self._send()
        await self._read_until(lambda: any(m.get("id") == cmd["id"] for m in self.messages))
        return next(m for m in self.messages if m.get("id") == cmd["id"])

    async def _read_until(self, done: Any, within: float = 30) -> None:
        async with asyncio.timeout(scaled(within)):
            while not done():
                data = await self.reader.read(65536)
                if not data:
                    self.proto.receive_eof()
                else:
                    self.proto.receive_data(data)
                for event in self.proto.events_received():
                    if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                        for line in bytes(event.data).split(b"\n"):
                            if line.strip():
                                self.messages.append(json.loads(line))
                    elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                        self.close_code = int.from_bytes(bytes(event.data)[:2], "big")
                await self._send()
                if not data:
                    return

    async def read_until(self, done: Any, within: float = 60) -> None:
        await self._read_until(done, within)

    def close(self) -> None:
        self.writer.transport.abort()


def _pub(task: int, version: int, *, final: bool = False) -> dict[str, Any]:
    tags = {"task": f"t{task}"}
    if final:
        tags["conflate"] = "never"
    data = {"task": f"t{task}", "version": version, "final": final, "pad": PAD}
    return {"publish": {"channel": CHANNEL, "data": data, "tags": tags}}


def _notice(n: int) -> dict[str, Any]:
    data = {"notice": n, "pad": PAD}
    return {"publish": {"channel": CHANNEL, "data": data, "tags": {"conflate": "never"}}}


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_a_stalled_reader_gets_every_final_state_and_notice_and_stays_bounded(
    gateway: GatewayProcess,
) -> None:
    slow = await StalledReader.open(gateway)
    try:
        assert "connect" in await slow.command({"id": 1, "connect": {"token": mint_token(SECRET, "u1")}})
        assert "subscribe" in await slow.command({"id": 2, "subscribe": {"channel": CHANNEL}})
        held_samples: list[float] = []
        async with httpx.AsyncClient(headers={"X-API-Key": gateway.api_key}, timeout=scaled(30)) as http:
            commands = []
            for version in range(1, ROUNDS + 1):
                commands += [_pub(task, version) for task in range(TASKS)]
                if version % 40 == 0:
                    commands.append(_notice(version // 40))
            commands += [_pub(task, ROUNDS + 1, final=True) for task in range(TASKS)]
            for start in range(0, len(commands), 100):
                reply = await http.post(
                    f"{gateway.api_url}/batch", json={"commands": commands[start : start + 100]}
                )
                assert reply.status_code == 200 and "error" not in reply.text, reply.text[:300]
                metrics = (await http.get(f"{gateway.url}/metrics")).text
                held_samples.append(_metric(metrics, "taskcast_gateway_client_held_bytes"))

            async def conflated() -> float:
                text = (await http.get(f"{gateway.url}/metrics")).text
                return _metric(text, "taskcast_gateway_client_conflated_publications_total")

            assert await wait_until(conflated, 30, "publications conflated for the stalled reader")
        assert max(held_samples) < QUEUE_MAX  # bounded: ~one state per task plus the notices

        def finished() -> bool:
            finals = {
                m["push"]["pub"]["data"]["task"]
                for m in _pushes(slow)
                if m["push"]["pub"]["data"].get("final")
            }
            return len(finals) == TASKS or slow.close_code is not None

        await slow.read_until(finished)
        assert slow.close_code is None  # never disconnected (no 3008)
        data = [m["push"]["pub"]["data"] for m in _pushes(slow)]
        notices = [d["notice"] for d in data if "notice" in d]
        assert notices == list(range(1, ROUNDS // 40 + 1))  # every notice, in order
        for task in range(TASKS):
            versions = [d["version"] for d in data if d.get("task") == f"t{task}"]
            assert versions == sorted(versions) and versions[-1] == ROUNDS + 1  # newest last, final kept
        assert len(data) < TASKS * ROUNDS  # and the progress in between was conflated
        await _held_gauges_return_to_zero(gateway)
    finally:
        slow.close()


async def _held_gauges_return_to_zero(gw: GatewayProcess) -> None:
    """Once the reader has read everything, /metrics shows no held connection and no held byte:
    releasing a held queue takes its bytes off the node's figure (it once kept them for ever)."""

    async with httpx.AsyncClient(timeout=scaled(30)) as http:

        async def held() -> tuple[float, float]:
            text = (await http.get(f"{gw.url}/metrics")).text
            return (
                _metric(text, "taskcast_gateway_client_held_connections"),
                _metric(text, "taskcast_gateway_client_held_bytes"),
            )

        async def released() -> bool:
            return await held() == (0.0, 0.0)

        try:
            await wait_until(released, 30, "held gauges back to zero after the reader read")
        except WaitTimeout:
            raise AssertionError(f"held (connections, bytes) after the reader read: {await held()}") from None


def _pushes(reader: StalledReader) -> list[dict[str, Any]]:
    return [m for m in reader.messages if "pub" in m.get("push", {})]
