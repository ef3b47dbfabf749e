"""A connection that closes while one of its commands waits on an engine registers nothing,
even when the engine's client library swallows the command's cancellation (redis-py awaits
through Python 3.11's ``asyncio.wait_for``, which returns an operation's result when a cancel
arrives as it finishes). A leaked registration was a closed, severed connection left among a
channel's subscribers: every later publication on that channel failed on this node, for every
subscriber.

* The engine seam (real Redis): ``RedisShard.call`` cancelled at every point of a command
  never returns normally to a caller asked to stop during it.
* The connection (in process, a memory broker whose history reads swallow a cancel, as redis-py
  does): a connect closed while its server-side subscriptions are being positioned, and a
  client-side subscribe closed while it is being positioned, leave no hub subscriber, no hub
  client and no presence entry behind, and the channel keeps delivering.
"""

from __future__ import annotations

import asyncio
import random

import orjson
import pytest

from gateway.engine.base import HistoryOptions, HistoryResult
from gateway.engine.memory import MemoryBroker
from gateway.engine.redis import build_shards
from gateway.protocol.messages import StreamPosition
from tests.gateway.recording import WAIT_SECONDS, Harness, until
from tests.helpers.redis_engine import settings, unique_prefix
from tests.support import mint_token

SECRET = "swallowed-cancel-secret-of-at-least-32-bytes"
ENV = {
    "TASKCAST_CLIENT_TOKEN_HMAC_SECRET_KEY": SECRET,
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_SIZE": "10",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_HISTORY_TTL": "60s",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_FORCE_RECOVERY": "true",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_PRESENCE": "true",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_ALLOW_SUBSCRIBE_FOR_CLIENT": "true",
}


class SwallowingBroker(MemoryBroker):
    """A memory broker whose next history read (once ``hold`` is armed) waits for it and
    swallows a cancellation that arrives meanwhile, returning its result as if nothing
    happened once ``resume`` is set: what redis-py does on Python 3.11 when the cancel meets
    a finished reply (here after the closed connection's release has run)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: asyncio.Future[None] | None = None
        self.holding = asyncio.Event()
        self.resume = asyncio.Event()

    async def history(
        self,
        channel: str,
        history: HistoryOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult:
        hold, self.hold = self.hold, None
        if hold is not None:
            self.holding.set()
            try:
                await hold
            except asyncio.CancelledError:  # swallowed, on purpose: the library behaviour under test
                await self.resume.wait()
        return await super().history(channel, history, since=since, limit=limit, reverse=reverse)


async def _closed_while_held(h: Harness, broker: SwallowingBroker, frames: bytes) -> None:
    """Feed ``frames`` to a new connection, close it while the armed history read waits, and
    wait until the connection let go of everything (it drops its parts once released)."""
    broker.hold = asyncio.get_running_loop().create_future()
    client, _ = h.connect()
    client.feed(frames)
    async with asyncio.timeout(WAIT_SECONDS):
        await broker.holding.wait()
    client.connection_lost()
    await h.node.drain()  # the connection's release has run
    broker.resume.set()
    await until(lambda: not hasattr(client, "commands"))  # severed: command task ended, released
    await h.node.drain()


async def test_a_connect_closed_while_its_server_side_subscriptions_are_positioned_leaves_nothing() -> None:
    broker = SwallowingBroker()
    h = Harness(ENV, broker=broker)
    token = mint_token(SECRET, "u1", exp_in=600, channels=["a", "b"])
    await _closed_while_held(h, broker, orjson.dumps({"id": 1, "connect": {"token": token}}))

    hub = h.node.hub
    assert {ch: list(hub.subscribers(ch)) for ch in ("a", "b")} == {"a": [], "b": []}
    assert hub.clients == {} and hub.users == {}
    # the channel still delivers to a connection that subscribes now
    client, transport = h.connect()
    client.feed(orjson.dumps({"id": 1, "connect": {"token": token}}))
    assert "connect" in await transport.reply(1)
    opts = h.settings.channel_options("b")
    assert opts is not None
    await h.node.publish("b", opts, b'{"n":1}')
    assert (await transport.push("pub"))["pub"]["data"] == {"n": 1}


async def test_a_subscribe_closed_while_it_is_positioned_leaves_no_presence() -> None:
    broker = SwallowingBroker()
    h = Harness(ENV, broker=broker)
    token = mint_token(SECRET, "u2", exp_in=600)
    frames = b"\n".join(
        [
            orjson.dumps({"id": 1, "connect": {"token": token}}),
            orjson.dumps({"id": 2, "subscribe": {"channel": "c"}}),
        ]
    )
    await _closed_while_held(h, broker, frames)

    assert list(h.node.hub.subscribers("c")) == []
    assert await h.node.presence.presence("c") == {}


@pytest.mark.redis
async def test_a_redis_command_never_returns_to_a_caller_cancelled_during_it(redis_url: str) -> None:
    shard = build_shards(settings(redis_url, prefix=unique_prefix(), io_timeout=5.0))[0]
    rng = random.Random(7)
    returned_after_cancel = 0
    try:
        await shard.call(lambda client: client.ping())  # connected: the loop below hits replies
        for _ in range(300):
            task = asyncio.create_task(shard.call(lambda client: client.eval("return 1", 0)))
            for _ in range(rng.randint(0, 6)):  # cancel at every point of the round trip
                await asyncio.sleep(0)
            cancelled_during = task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                continue
            returned_after_cancel += cancelled_during
    finally:
        await shard.close()
    assert returned_after_cancel == 0
