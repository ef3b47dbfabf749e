"""A stream whose peer stopped reading cannot pin its socket: once closed (e.g. 3008), the
response gets a grace period for the final push and is then abandoned."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.protocol import codes
from gateway.transports import streaming
from gateway.transports.streaming import OpenStreams, StreamResponse, StreamTransport
from tests.support import scaled


class _Client:
    def __init__(self) -> None:
        self.lost = asyncio.Event()

    def connection_lost(self) -> None:
        self.lost.set()


async def test_a_stuck_write_is_abandoned_after_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "CLOSE_GRACE_SECONDS", 0.05)
    transport = StreamTransport("uni_http_stream", sse=False, unidirectional=True)
    client = _Client()
    response = StreamResponse(OpenStreams(), client, transport, {})  # type: ignore[arg-type]
    stuck = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("body"):
            stuck.set()
            await asyncio.Event().wait()  # a peer that never reads: this write never completes

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    task = asyncio.create_task(response({"type": "http"}, receive, send))  # type: ignore[arg-type]
    transport.write([b'{"push":{"channel":"c","pub":{"data":1}}}'], None)
    async with asyncio.timeout(scaled(30)):
        await stuck.wait()
    transport.close(codes.DISCONNECT_SLOW)
    async with asyncio.timeout(scaled(30)):
        await task  # returns instead of hanging on the stuck write
    assert client.lost.is_set()
    assert not task.cancelled()
