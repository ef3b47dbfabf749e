"""``channel.proxy.subscribe_stream``: the official centrifuge-python SDK subscribes to a stream
namespace of a real gateway process; the real grpcio backend (tests/gateway/proxy/backend.py)
authorises with the stream's first message and then streams publications to that subscriber
only. Unidirectional and bidirectional, on both engines."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from centrifuge import (
    Client,
    ClientEventHandler,
    ConnectedContext,
    PublicationContext,
    SubscribedContext,
    SubscribingContext,
    SubscriptionErrorContext,
    SubscriptionEventHandler,
    UnsubscribedContext,
)

from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter
from tests.support.procs import GatewayProcess, merge
from tests.support.waiting import scaled, wait_until


class Events(ClientEventHandler, SubscriptionEventHandler):
    def __init__(self) -> None:
        self.connected: list[ConnectedContext] = []
        self.subscribed: list[SubscribedContext] = []
        self.unsubscribed: list[UnsubscribedContext] = []
        self.subscribing: list[int] = []
        self.errors: list[SubscriptionErrorContext] = []
        self.pubs: list[Any] = []
        self.tags: list[Any] = []

    async def on_connected(self, ctx: ConnectedContext) -> None:
        self.connected.append(ctx)

    async def on_subscribed(self, ctx: SubscribedContext) -> None:
        self.subscribed.append(ctx)

    async def on_unsubscribed(self, ctx: UnsubscribedContext) -> None:
        self.unsubscribed.append(ctx)

    async def on_subscribing(self, ctx: SubscribingContext) -> None:
        self.subscribing.append(ctx.code)

    async def on_error(self, ctx: SubscriptionErrorContext) -> None:
        self.errors.append(ctx)

    async def on_publication(self, ctx: PublicationContext) -> None:
        self.pubs.append(ctx.pub.data)
        self.tags.append(ctx.pub.tags)


def stream_config(served: Served, *, bidirectional: bool = False, timeout: str = "10s") -> dict[str, Any]:
    """``st:`` channels are stream subscriptions (anonymous connections allowed, no token)."""
    return {
        "prometheus": {"enabled": True},
        "client": {"allow_anonymous_connect_without_token": True},
        "channel": {
            "proxy": {
                "subscribe_stream": {
                    "endpoint": served.grpc_url,
                    "timeout": timeout,
                    "http_headers": ["Cookie"],
                }
            },
            "namespaces": [
                {
                    "name": "st",
                    "subscribe_stream_proxy_enabled": True,
                    "subscribe_stream_proxy_bidirectional": bidirectional,
                    "allow_publish_for_subscriber": True,
                    "history_size": 10,
                    "history_ttl": "300s",
                }
            ],
        },
    }


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    made: list[Client] = []
    yield made
    for c in made:
        await c.disconnect()


async def _connect(url: str, clients: list[Client], cookie: str = "session=sam") -> tuple[Client, Events]:
    events = Events()
    client = Client(url, events=events, headers={"Cookie": cookie}, timeout=scaled(30))
    clients.append(client)
    await client.connect()
    await client.ready(timeout=scaled(30))
    return client, events


def _metrics(gw: GatewayProcess) -> str:
    with urllib.request.urlopen(f"{gw.url}/metrics", timeout=scaled(30)) as response:
        return str(response.read().decode())


def _api(gw: GatewayProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{gw.api_url}/{method}",
        data=json.dumps(params).encode(),
        headers={"X-API-Key": gw.api_key, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=scaled(30)) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


@pytest.mark.parametrize("bidirectional", [False, True], ids=["unidirectional", "bidirectional"])
async def test_stream_subscription_delivers_to_that_subscriber_only(
    bidirectional: bool,
    served: Served,
    start_gateway: GatewayStarter,
    engine: dict[str, Any],
    clients: list[Client],
) -> None:
    gw = start_gateway(merge(stream_config(served, bidirectional=bidirectional), engine))
    channel = f"st:{uuid.uuid4().hex[:8]}"
    a, a_events = await _connect(gw.ws_url, clients)
    b, b_events = await _connect(gw.ws_url, clients, "session=kim")
    a_sub = a.new_subscription(channel, events=a_events)
    await a_sub.subscribe()
    await a_sub.ready(timeout=scaled(30))
    assert a_events.subscribed[0].data == {"stream": channel}  # the first message's result
    assert not a_events.subscribed[0].recoverable and not a_events.subscribed[0].positioned
    method, request, metadata = served.backend.stream_requests[0]
    assert method == ("bidirectional" if bidirectional else "unidirectional")
    assert request["channel"] == channel and request["transport"] == "websocket"
    assert metadata["cookie"] == "session=sam"  # the allow-listed header, as gRPC metadata

    b_sub = b.new_subscription(channel, events=b_events)
    await b_sub.subscribe()
    await b_sub.ready(timeout=scaled(30))
    await wait_until(lambda: len(served.backend.stream_requests) == 2, what="second stream")

    # Not through the hub/broker: a server API publish reaches neither stream subscriber.
    await asyncio.to_thread(_api, gw, "publish", {"channel": channel, "data": {"api": True}})
    served.backend.feed(channel).put_nowait(b'{"n":1}')  # a's stream
    await wait_until(lambda: a_events.pubs, what="stream publication")
    assert a_events.pubs == [{"n": 1}] and a_events.tags == [{"via": "stream"}]
    served.backend.feed(channel, "session=kim").put_nowait(b'{"n":2}')  # b's stream only
    await wait_until(lambda: b_events.pubs, what="second stream publication")
    assert b_events.pubs == [{"n": 2}] and a_events.pubs == [{"n": 1}]

    if bidirectional:
        await a_sub.publish({"hello": "stream"})
        await wait_until(lambda: len(a_events.pubs) == 2, what="echo through a's stream")
        assert a_events.pubs[1] == {"echo": {"hello": "stream"}} and b_events.pubs == [{"n": 2}]
        assert served.backend.stream_published == [(channel, {"hello": "stream"})]

    await a_sub.unsubscribe()  # cancels a's stream on the backend
    await wait_until(lambda: served.backend.streams_closed, what="stream cancelled")
    assert served.backend.streams_closed == [channel]
    await b.disconnect()  # and a disconnect cancels b's
    await wait_until(lambda: len(served.backend.streams_closed) == 2, what="stream cancelled at disconnect")
    assert {"api": True} not in a_events.pubs + b_events.pubs


async def test_backend_ending_the_stream_unsubscribes_with_centrifugo_codes(
    served: Served, start_gateway: GatewayStarter, clients: list[Client]
) -> None:
    gw = start_gateway(stream_config(served))
    client, events = await _connect(gw.ws_url, clients)
    clean, broken = f"st:{uuid.uuid4().hex[:8]}", f"st:{uuid.uuid4().hex[:8]}"
    for channel in (clean, broken):
        sub = client.new_subscription(channel, events=events)
        await sub.subscribe()
        await sub.ready(timeout=scaled(30))
    served.backend.feed(clean).put_nowait(None)  # a clean end: 2000 "server unsubscribe"
    await wait_until(lambda: events.unsubscribed, what="server unsubscribe")
    assert events.unsubscribed[0].code == 2000
    # A failed stream: 2500 "insufficient state", which the SDK answers by resubscribing.
    served.backend.feed(broken).put_nowait(b"abort")
    await wait_until(lambda: 2500 in events.subscribing, what="insufficient state")
    await wait_until(lambda: len(served.backend.stream_requests) == 3, what="resubscribed")
    assert "Traceback" not in gw.log_text()


@pytest.mark.parametrize(
    ("mode", "code"),
    [("error", 1000), ("disconnect", 4501), ("silent", 100)],
    ids=["error", "disconnect", "timeout"],
)
async def test_stream_first_message_failures(
    mode: str, code: int, served: Served, start_gateway: GatewayStarter, clients: list[Client]
) -> None:
    """The first message's ``error`` / ``disconnect`` reach the client as they are; a backend
    silent past ``timeout`` gives 100 (temporary), never a hang."""
    served.backend.stream_mode = mode
    gw = start_gateway(stream_config(served, timeout="1s"))
    events = Events()
    client = Client(gw.ws_url, events=events, headers={"Cookie": "session=sam"}, timeout=scaled(30))
    clients.append(client)
    disconnected: list[int] = []

    async def on_disconnected(ctx: Any) -> None:
        disconnected.append(ctx.code)

    events.on_disconnected = on_disconnected  # type: ignore[method-assign]
    await client.connect()
    await client.ready(timeout=scaled(30))
    sub = client.new_subscription(f"st:{uuid.uuid4().hex[:8]}", events=events)
    await sub.subscribe()
    if mode == "disconnect":
        await wait_until(lambda: disconnected, what="disconnect")
        assert disconnected[0] == code
    else:
        await wait_until(lambda: events.errors or events.unsubscribed, what="subscribe error")
        if events.errors:
            assert events.errors[0].error.code == code
        else:
            assert events.unsubscribed[0].code == code
    if mode == "silent":
        text = await asyncio.to_thread(_metrics, gw)
        assert any(
            line.startswith("centrifugo_proxy_errors") and 'type="subscribe_stream"' in line
            for line in text.splitlines()
        ), text


async def test_stream_request_carries_the_connect_proxy_user_and_meta(
    served: Served, start_gateway: GatewayStarter, clients: list[Client]
) -> None:
    """With a connect proxy in front, the stream's SubscribeRequest names the backend's user and
    (``include_connection_meta``) the connection meta, token and data included."""
    config = stream_config(served)
    config["client"] = {"proxy": {"connect": {"enabled": True, "endpoint": served.endpoint("http", "connect"),
                                              "http_headers": ["Cookie"]}}}  # fmt: skip
    config["channel"]["proxy"]["subscribe_stream"]["include_connection_meta"] = True
    gw = start_gateway(config)
    client, events = await _connect(gw.ws_url, clients)
    channel = f"st:{uuid.uuid4().hex[:8]}"
    sub = client.new_subscription(channel, events=events, data={"want": "all"})
    await sub.subscribe()
    await sub.ready(timeout=scaled(30))
    _, request, _ = served.backend.stream_requests[0]
    assert request["user"] == "sam" and request["meta"] == {"tenant": "t1"}
    assert request["data"] == {"want": "all"}
