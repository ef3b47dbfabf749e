"""A connection that closes while Redis is down releases every subscription it held: each
release step (hub removal and broker unsubscribe, presence removal, leave message) runs for
every subscription whatever the others did, and the failures are logged once, without a
traceback (gateway/cleanup.py). In process: a real Node on the Redis engine of a throwaway
redis-server, killed while the connection holds its subscriptions."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from gateway.config.loading import load_settings
from gateway.connection.factory import ClientFactory
from gateway.connection.tokens import TokenVerifier
from gateway.engine.map_memory import MemoryMapBroker
from gateway.engine.memory import MemoryBroker
from gateway.metrics import Metrics
from gateway.node import VERSION, Node
from tests.gateway.recording import RecordingTransport
from tests.helpers import redis_engine
from tests.helpers.redis_engine import RedisServer, running
from tests.support import mint_token, scaled

CHANNELS = [f"room{n}" for n in range(4)]
ENV = {
    "TASKCAST_CLIENT_INSECURE": "true",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_PRESENCE": "true",
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_JOIN_LEAVE": "true",
}


@pytest.fixture
async def node() -> AsyncIterator[tuple[Node, RedisServer]]:
    server = await RedisServer().start()
    config = redis_engine.settings(server.url, prefix=redis_engine.unique_prefix(), io_timeout=1.0)
    settings, _ = load_settings(None, ENV)
    presence = redis_engine.presence(config, time.time)
    try:
        async with running(redis_engine.broker(config)) as broker:
            yield Node(settings, broker, presence, Metrics(VERSION), name="test"), server
        await presence.close()
    finally:
        server.stop()


@pytest.mark.redis
async def test_a_connection_closed_while_redis_is_down_releases_every_subscription(
    node: tuple[Node, RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    n, server = node
    verifier = TokenVerifier(n.settings.client.token)
    client = ClientFactory(n, verifier=verifier, sub_verifier=verifier).connect(
        transport := RecordingTransport()
    )
    client.feed(b'{"id":1,"connect":{}}')
    assert "connect" in await transport.reply(1)
    for i, channel in enumerate(CHANNELS, start=2):
        client.feed(orjson.dumps({"id": i, "subscribe": {"channel": channel}}))
        assert "subscribe" in await transport.reply(i)
    assert all(list(n.hub.subscribers(channel)) for channel in CHANNELS)

    server.kill()
    with caplog.at_level(logging.INFO):
        client.connection_lost()
        async with asyncio.timeout(scaled(20.0)):
            await n.drain()

    assert {channel: list(n.hub.subscribers(channel)) for channel in CHANNELS} == {c: [] for c in CHANNELS}
    failures = [r for r in caplog.records if r.getMessage().startswith("cleanup: presence removal failed")]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]  # once per interval
    assert all(r.exc_info is None for r in caplog.records if r.name == "taskcast.gateway.cleanup")
    assert n.cleanup.failures >= len(CHANNELS)


SECRET = "release-secret-0123456789abcdefghijklmn"
SPLIT_CONFIG = {
    "client": {"token": {"hmac_secret_key": SECRET}},
    "channel": {
        "without_namespace": {"presence": True, "allow_subscribe_for_client": True},
        "namespaces": [{"name": "quiet"}, {"name": "seen", "presence": True}],
    },
}


@pytest.fixture
async def split_node(tmp_path: Path) -> AsyncIterator[tuple[Node, RedisServer]]:
    """A node whose broker's Redis is up and whose presence's Redis is the second server;
    namespace ``seen`` keeps presence, ``quiet`` does not."""
    broker_server, presence_server = await RedisServer().start(), await RedisServer().start()
    prefix = redis_engine.unique_prefix()
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps(SPLIT_CONFIG))
    settings, _ = load_settings(str(config), {})
    presence = redis_engine.presence(
        redis_engine.settings(presence_server.url, prefix=prefix, io_timeout=1.0), time.time
    )
    try:
        async with running(
            redis_engine.broker(redis_engine.settings(broker_server.url, prefix=prefix))
        ) as broker:
            yield Node(settings, broker, presence, Metrics(VERSION), name="test"), presence_server
        await presence.close()
    finally:
        broker_server.stop()
        presence_server.stop()


@pytest.mark.redis
async def test_a_subscribe_whose_presence_fails_leaves_nothing_subscribed(
    split_node: tuple[Node, RedisServer],
) -> None:
    """Error 100, and neither the table nor the hub keeps the channel: the client's retry is
    answered like the first attempt (not "already subscribed"), and succeeds once presence is
    back."""
    n, presence_server = split_node
    verifier = TokenVerifier(n.settings.client.token)
    factory = ClientFactory(n, verifier=verifier, sub_verifier=verifier)
    client = factory.connect(transport := RecordingTransport())
    client.feed(orjson.dumps({"id": 1, "connect": {"token": mint_token(SECRET)}}))
    assert "connect" in await transport.reply(1)
    presence_server.kill()

    for cmd_id in (2, 3):
        client.feed(orjson.dumps({"id": cmd_id, "subscribe": {"channel": "room"}}))
        assert (await transport.reply(cmd_id)).get("error", {}).get("code") == 100
        assert client.subscriptions.get("room") is None
        assert list(n.hub.subscribers("room")) == []

    presence_server.spawn()
    await presence_server.wait_up()
    client.feed(b'{"id":4,"subscribe":{"channel":"room"}}')
    async with asyncio.timeout(scaled(20.0)):
        while "subscribe" not in await transport.reply(4):  # a pool reconnects on use
            client.feed(b'{"id":4,"subscribe":{"channel":"room"}}')
    assert list(n.hub.subscribers("room")) == [client]
    client.connection_lost()
    async with asyncio.timeout(scaled(20.0)):
        await n.drain()


@pytest.mark.redis
async def test_a_connect_whose_server_side_subscription_fails_holds_no_subscription(
    split_node: tuple[Node, RedisServer],
) -> None:
    """The token's first channel (no presence) is established, the second fails at its presence
    add: the connect is answered with error 100 and the first one is undone, not left in the
    hub buffering publications until the connection goes."""
    n, presence_server = split_node
    verifier = TokenVerifier(n.settings.client.token)
    client = ClientFactory(n, verifier=verifier, sub_verifier=verifier).connect(
        transport := RecordingTransport()
    )
    presence_server.kill()
    token = mint_token(SECRET, channels=["quiet:a", "seen:b"])
    client.feed(orjson.dumps({"id": 1, "connect": {"token": token}}))

    assert (await transport.reply(1)).get("error", {}).get("code") == 100
    assert client.subscriptions.get("quiet:a") is None
    assert list(n.hub.subscribers("quiet:a")) == []
    client.connection_lost()


@pytest.mark.redis
async def test_a_map_subscribe_whose_presence_fails_leaves_nothing_subscribed() -> None:
    """The map flow's last step (live) on the memory engine and map engine, presence on a Redis
    that is gone: error 100, and neither the table nor the hub keeps the channel."""
    server = await RedisServer().start()
    namespaces = [
        {"name": "tasks", "presence": True, "subscription_type": "map", "map": {"mode": "persistent"}}
    ]
    settings, _ = load_settings(None, {**ENV, "TASKCAST_CHANNEL_NAMESPACES": json.dumps(namespaces)})
    config = redis_engine.settings(server.url, prefix=redis_engine.unique_prefix(), io_timeout=1.0)
    presence = redis_engine.presence(config, time.time)
    n = Node(settings, MemoryBroker(), presence, Metrics(VERSION), name="test")
    n.attach_maps(MemoryMapBroker())
    try:
        verifier = TokenVerifier(settings.client.token)
        client = ClientFactory(n, verifier=verifier, sub_verifier=verifier).connect(
            transport := RecordingTransport()
        )
        client.feed(b'{"id":1,"connect":{}}')
        assert "connect" in await transport.reply(1)
        server.kill()
        for cmd_id in (2, 3):
            client.feed(orjson.dumps({"id": cmd_id, "subscribe": {"channel": "tasks:x", "type": 1}}))
            assert (await transport.reply(cmd_id)).get("error", {}).get("code") == 100
            assert client.subscriptions.get("tasks:x") is None
            assert list(n.hub.subscribers("tasks:x")) == []
        client.connection_lost()
    finally:
        await presence.close()
        server.stop()
