"""Lost deliveries are detected: after a broker reconnect, and by the periodic position check.

In-process: a real Runtime on the memory engine and a recording transport."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.app import Runtime
from gateway.config.loading import load_settings
from gateway.hub import SharedPush
from gateway.protocol import codes
from gateway.protocol.policy import ServerSub
from tests.support import scaled

ENV = {
    "TASKCAST_CLIENT_INSECURE": "true",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_SIZE": "10",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_TTL": "60s",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_FORCE_RECOVERY": "true",
}


class Recorder:
    name = "websocket"
    emulation = False
    unidirectional = False

    def __init__(self) -> None:
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed: codes.Disconnect | None = None

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        for payload in payloads:
            self.messages.put_nowait(orjson.loads(payload))

    def buffered_bytes(self) -> int:
        return 0

    def close(self, disconnect: codes.Disconnect) -> None:
        self.closed = disconnect

    async def next(self, key: str) -> dict[str, Any]:
        async with asyncio.timeout(scaled(30)):
            while True:
                msg = await self.messages.get()
                if key in msg or key in msg.get("push", {}):
                    return msg


async def _subscribed(runtime: Runtime, channel: str) -> Recorder:
    rec = Recorder()
    client = runtime.clients.connect(rec)
    client.feed(b'{"id":1,"connect":{}}\n{"id":2,"subscribe":{"channel":"%s"}}' % channel.encode())
    await rec.next("connect")
    reply = await rec.next("subscribe")
    assert reply["subscribe"]["recoverable"] is True
    return rec


async def test_broker_reconnect_detects_lost_publications():
    settings, _ = load_settings(None, ENV)
    runtime = Runtime(settings)
    node = runtime.node
    rec = await _subscribed(runtime, "lossy")
    opts = settings.channel_options("lossy")
    assert opts is not None
    await node.broker.unsubscribe("lossy")  # the PUB/SUB link drops ...
    await node.publish("lossy", opts, b'{"lost":1}')  # ... a publication is missed ...
    await node.broker.subscribe("lossy")
    node.on_broker_reconnect()  # ... and the engine reports the reconnect
    push = await rec.next("unsubscribe")
    assert push["push"]["unsubscribe"]["code"] == codes.UNSUBSCRIBE_INSUFFICIENT_STATE.code
    await node.drain()


async def test_periodic_check_leaves_healthy_subscriptions_alone_and_catches_gaps():
    settings, _ = load_settings(None, ENV)
    runtime = Runtime(settings)
    node = runtime.node
    rec = await _subscribed(runtime, "quiet")
    opts = settings.channel_options("quiet")
    assert opts is not None
    await node.publish("quiet", opts, b'{"n":1}')
    assert (await rec.next("pub"))["push"]["pub"]["offset"] == 1
    assert await node.positions.check(idle_for=0.0) == 1
    assert rec.messages.empty()
    await node.broker.unsubscribe("quiet")
    await node.publish("quiet", opts, b'{"n":2}')
    await node.broker.subscribe("quiet")
    await node.positions.check(idle_for=0.0)
    push = await rec.next("unsubscribe")
    assert push["push"]["unsubscribe"]["code"] == 2500
    await node.drain()


async def test_server_side_subscription_gap_disconnects_3010():
    settings, _ = load_settings(None, ENV)
    runtime = Runtime(settings)
    node = runtime.node
    rec = Recorder()
    client = runtime.clients.connect(rec)
    client.feed(b'{"id":1,"connect":{}}')
    await rec.next("connect")
    client.subscribe_server_side("srv", ServerSub(), None)
    await rec.next("subscribe")
    opts = settings.channel_options("srv")
    assert opts is not None
    await node.broker.unsubscribe("srv")
    await node.publish("srv", opts, b"1")
    await node.broker.subscribe("srv")
    await node.positions.check(idle_for=0.0)
    assert rec.closed == codes.DISCONNECT_INSUFFICIENT_STATE
    await node.drain()
