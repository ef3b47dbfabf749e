"""The official centrifuge-python SDK through every proxy of a real gateway process, against the
real HTTP and gRPC backends (tests/gateway/proxy/backend.py): no token anywhere, the session
cookie authenticates, the backend authorises and modifies."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from centrifuge import (
    Client,
    ClientEventHandler,
    ConnectedContext,
    ConnectingContext,
    DisconnectedContext,
    PublicationContext,
    SubscribedContext,
    SubscriptionEventHandler,
)

from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.support.procs import merge
from tests.support.waiting import scaled, wait_until

PROTOCOLS = ["http", "grpc"]


class Events(ClientEventHandler, SubscriptionEventHandler):
    def __init__(self) -> None:
        self.connected: list[ConnectedContext] = []
        self.disconnected: list[DisconnectedContext] = []
        self.connecting: list[int] = []
        self.subscribed: list[SubscribedContext] = []
        self.pubs: list[Any] = []

    async def on_connected(self, ctx: ConnectedContext) -> None:
        self.connected.append(ctx)

    async def on_disconnected(self, ctx: DisconnectedContext) -> None:
        self.disconnected.append(ctx)

    async def on_connecting(self, ctx: ConnectingContext) -> None:
        self.connecting.append(ctx.code)

    async def on_subscribed(self, ctx: SubscribedContext) -> None:
        self.subscribed.append(ctx)

    async def on_publication(self, ctx: PublicationContext) -> None:
        self.pubs.append(ctx.pub.data)


async def _client(url: str, user: str) -> tuple[Client, Events]:
    events = Events()
    client = Client(url, events=events, headers={"Cookie": f"session={user}"}, timeout=scaled(30))
    await client.connect()
    await client.ready(timeout=scaled(30))
    return client, events


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    made: list[Client] = []
    yield made
    for c in made:
        await c.disconnect()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_sdk_through_every_proxy(
    protocol: str,
    served: Served,
    start_gateway: GatewayStarter,
    engine: dict[str, Any],
    clients: list[Client],
) -> None:
    gw = start_gateway(merge(proxy_config(lambda k: served.endpoint(protocol, k)), engine))
    client, events = await _client(gw.ws_url, "alice")
    clients.append(client)
    assert events.connected[0].data == {"welcome": "alice"}  # connect result data reaches the SDK
    connect_call = served.backend.of("connect")[0]
    assert connect_call.headers["cookie"] == "session=alice"
    assert connect_call.body["transport"] == "websocket" and connect_call.body["encoding"] == "json"

    channel = f"px:{uuid.uuid4().hex[:8]}"
    sub = client.new_subscription(channel, events=events)
    await sub.subscribe()
    await sub.ready(timeout=scaled(30))
    assert events.subscribed[0].data == {"subscribed": channel}
    assert served.backend.of("subscribe")[0].body["user"] == "alice"

    await sub.publish({"text": "hi"})
    await wait_until(lambda: events.pubs, what="publication")
    assert events.pubs == [{"modified": True, "original": {"text": "hi"}}]
    publish_call = served.backend.of("publish")[0]
    assert publish_call.body["meta"] == {"tenant": "t1"}  # include_connection_meta

    result = await client.rpc("echo", {"x": 1}, timeout=scaled(30))
    assert result.data == {"method": "echo", "echo": {"x": 1}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_connect_without_cookie_is_refused_by_the_backend(
    protocol: str, served: Served, start_gateway: GatewayStarter, clients: list[Client]
) -> None:
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k)))
    events = Events()
    client = Client(gw.ws_url, events=events, timeout=scaled(30))
    clients.append(client)
    await client.connect()
    await wait_until(lambda: events.disconnected, what="disconnected")
    assert (events.disconnected[0].code, events.disconnected[0].reason) == (4501, "unauthorized")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_refresh_proxy_extends_then_expires(
    protocol: str, served: Served, start_gateway: GatewayStarter, clients: list[Client]
) -> None:
    served.backend.connect_ttl = 1  # expires almost at once: the server asks the refresh proxy
    served.backend.refresh_ttl = 1
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k), refresh=True))
    client, events = await _client(gw.ws_url, "bob")
    clients.append(client)
    await wait_until(lambda: len(served.backend.of("refresh")) >= 2, within=20, what="two refreshes")
    assert 3005 not in events.connecting  # extended each time
    assert served.backend.of("refresh")[0].body["user"] == "bob"
    served.backend.expire = True
    # 3005 is a reconnect code: the SDK reports it while it reconnects.
    await wait_until(lambda: 3005 in events.connecting, within=20, what="expired")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_sub_refresh_proxy_extends_then_expires(
    protocol: str, served: Served, start_gateway: GatewayStarter, clients: list[Client]
) -> None:
    """A subscription the subscribe proxy granted until ``expire_at`` is extended server-side by
    the sub_refresh proxy; ``expired`` unsubscribes it (2501) and the SDK resubscribes."""
    served.backend.sub_ttl = 1
    served.backend.refresh_ttl = 1
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k)))
    client, events = await _client(gw.ws_url, "erin")
    clients.append(client)
    channel = f"px:{uuid.uuid4().hex[:8]}"
    sub = client.new_subscription(channel, events=events)
    await sub.subscribe()
    await sub.ready(timeout=scaled(30))
    await wait_until(lambda: len(served.backend.of("sub_refresh")) >= 2, within=20, what="two sub refreshes")
    assert len(served.backend.of("subscribe")) == 1  # extended, never dropped
    assert served.backend.of("sub_refresh")[0].body == {
        "client": served.backend.of("sub_refresh")[0].body["client"],
        "transport": "websocket",
        "protocol": "json",
        "encoding": "json",
        "user": "erin",
        "channel": channel,
    }
    served.backend.expire = True
    await wait_until(lambda: len(served.backend.of("subscribe")) >= 2, within=20, what="resubscribe")


@pytest.mark.redis
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_two_nodes_on_redis(
    protocol: str, served: Served, start_gateway: GatewayStarter, redis_url: str, clients: list[Client]
) -> None:
    engine = {
        "engine": {"type": "redis", "redis": {"address": redis_url, "prefix": f"px-{uuid.uuid4().hex[:8]}"}}
    }
    config = merge(proxy_config(lambda k: served.endpoint(protocol, k)), engine)
    gw1, gw2 = start_gateway(config), start_gateway(config)
    reader, reader_events = await _client(gw1.ws_url, "carol")
    writer, _ = await _client(gw2.ws_url, "dave")
    clients.extend([reader, writer])
    channel = f"px:{uuid.uuid4().hex[:8]}"
    sub = reader.new_subscription(channel, events=reader_events)
    await sub.subscribe()
    await sub.ready(timeout=scaled(30))
    wsub = writer.new_subscription(channel)
    await wsub.subscribe()
    await wsub.ready(timeout=scaled(30))
    await wsub.publish({"n": 1})
    await wait_until(lambda: reader_events.pubs, what="publication across nodes")
    assert reader_events.pubs == [{"modified": True, "original": {"n": 1}}]
    assert {c.body["user"] for c in served.backend.of("publish")} == {"dave"}
