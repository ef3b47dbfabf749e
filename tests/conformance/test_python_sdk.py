"""centrifuge-python 0.7 (and cent's AsyncClient for the server API) against a real gateway, over
JSON and over Protobuf (``use_protobuf=True``, the ``py_wire`` parameter).

SDK callbacks only record events (never await SDK calls inside them); tests wait on recorded
events with :func:`tests.support.wait_until` (bounds scaled by ``TASKCAST_TEST_TIME_SCALE``).
Over Protobuf the SDK publishes and receives bytes: ``Harness.encode`` / ``Harness.decode``
turn them into the JSON values the assertions compare.
"""

from __future__ import annotations

import asyncio
import base64
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from cent import AsyncClient, BroadcastRequest, DisconnectRequest, PublishRequest
from cent.dto import Disconnect
from centrifuge import (
    Client,
    ClientEventHandler,
    ClientState,
    ConnectedContext,
    ConnectingContext,
    DisconnectedContext,
    ErrorContext,
    JoinContext,
    LeaveContext,
    PublicationContext,
    ServerJoinContext,
    ServerPublicationContext,
    ServerSubscribedContext,
    SubscribedContext,
    SubscriptionErrorContext,
    SubscriptionEventHandler,
    UnsubscribedContext,
)

from tests.conformance.conftest import SECRET, GatewayFactory, Wire, standard_config
from tests.support import GatewayProcess, WaitTimeout, mint_token, scaled, wait_until

WAIT_SECONDS = 5.0


def uid() -> str:
    return uuid.uuid4().hex[:10]


@dataclass
class Event:
    name: str
    channel: str = ""
    ctx: Any = None


@dataclass
class Recorder:
    """Collects SDK events; ``wait`` returns the first event matching a predicate."""

    events: list[Event] = field(default_factory=list)
    on_connecting_hook: Callable[[ConnectingContext], Any] | None = None

    def add(self, name: str, channel: str = "", ctx: Any = None) -> None:
        self.events.append(Event(name, channel, ctx))

    def of(self, name: str, channel: str | None = None) -> list[Event]:
        return [e for e in self.events if e.name == name and (channel is None or e.channel == channel)]

    async def wait(self, pred: Callable[[Recorder], Any], within: float = WAIT_SECONDS) -> Any:
        """The first truthy ``pred(self)``; :class:`WaitTimeout` after ``scaled(within)``."""
        return await wait_until(lambda: pred(self), within, "SDK events", every=0.01)

    async def wait_for(self, name: str, channel: str | None = None, n: int = 1) -> list[Event]:
        return await self.wait(lambda r: len(r.of(name, channel)) >= n and r.of(name, channel))


class ClientEvents(ClientEventHandler):
    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    async def on_connecting(self, ctx: ConnectingContext) -> None:
        self.rec.add("connecting", ctx=ctx)
        if self.rec.on_connecting_hook is not None:
            await self.rec.on_connecting_hook(ctx)

    async def on_connected(self, ctx: ConnectedContext) -> None:
        self.rec.add("connected", ctx=ctx)

    async def on_disconnected(self, ctx: DisconnectedContext) -> None:
        self.rec.add("disconnected", ctx=ctx)

    async def on_error(self, ctx: ErrorContext) -> None:
        self.rec.add("error", ctx=ctx)

    async def on_subscribed(self, ctx: ServerSubscribedContext) -> None:
        self.rec.add("server_subscribed", ctx.channel, ctx)

    async def on_publication(self, ctx: ServerPublicationContext) -> None:
        self.rec.add("server_publication", ctx.channel, ctx)

    async def on_join(self, ctx: ServerJoinContext) -> None:
        self.rec.add("server_join", ctx.channel, ctx)


class SubEvents(SubscriptionEventHandler):
    def __init__(self, rec: Recorder, channel: str) -> None:
        self.rec = rec
        self.channel = channel

    async def on_subscribed(self, ctx: SubscribedContext) -> None:
        self.rec.add("subscribed", self.channel, ctx)

    async def on_unsubscribed(self, ctx: UnsubscribedContext) -> None:
        self.rec.add("unsubscribed", self.channel, ctx)

    async def on_publication(self, ctx: PublicationContext) -> None:
        self.rec.add("publication", self.channel, ctx)

    async def on_error(self, ctx: SubscriptionErrorContext) -> None:
        self.rec.add("sub_error", self.channel, ctx)

    async def on_join(self, ctx: JoinContext) -> None:
        self.rec.add("join", self.channel, ctx)

    async def on_leave(self, ctx: LeaveContext) -> None:
        self.rec.add("leave", self.channel, ctx)


class Harness:
    """SDK clients of one scenario on ``gw`` over ``wire``, recording into one :class:`Recorder`."""

    def __init__(self, gw: GatewayProcess, wire: Wire) -> None:
        self.gw = gw
        self.wire = wire
        self.rec = Recorder()
        self.clients: list[Client] = []

    def encode(self, value: Any) -> Any:
        return self.wire.encode(value)

    def decode(self, data: Any) -> Any:
        return self.wire.decode(data)

    def client(self, token: str = "", **kwargs: Any) -> Client:
        c = Client(
            self.gw.ws_url,
            events=ClientEvents(self.rec),
            token=token,
            proxy=None,
            timeout=scaled(WAIT_SECONDS),
            use_protobuf=self.wire.protobuf,
            **kwargs,
        )
        self.clients.append(c)
        return c

    def subscribe(self, c: Client, channel: str, **kwargs: Any) -> Any:
        return c.new_subscription(channel, events=SubEvents(self.rec, channel), **kwargs)

    async def close(self) -> None:
        for c in self.clients:
            await c.disconnect()
        # The SDK closes its WebSocket in background tasks: let them finish before the loop ends.
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=scaled(WAIT_SECONDS))


@pytest.fixture
async def api(gateway: GatewayProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(gateway.api_url, gateway.api_key) as client:
        yield client


@pytest.fixture
async def harness(gateway: GatewayProcess, py_wire: Wire) -> AsyncIterator[Harness]:
    h = Harness(gateway, py_wire)
    yield h
    await h.close()


async def test_py_connect_server_side_channel_subscription_token_publish(harness: Harness, api: AsyncClient):
    plain, private, feed = f"py-{uid()}", f"private:{uid()}", f"feed:{uid()}"
    requested: list[str] = []

    async def sub_token(channel: str) -> str:
        requested.append(channel)
        return mint_token(SECRET, "42", channel=channel)

    c = harness.client(mint_token(SECRET, "42", channels=[feed], info={"name": "bob"}))
    s_plain = harness.subscribe(c, plain)
    s_priv = harness.subscribe(c, private, get_token=sub_token)
    await c.connect()
    await c.ready(scaled(WAIT_SECONDS))
    await s_plain.subscribe()
    await s_priv.subscribe()
    await s_plain.ready(scaled(WAIT_SECONDS))
    await s_priv.ready(scaled(WAIT_SECONDS))
    rec = harness.rec
    (server_sub,) = await rec.wait_for("server_subscribed", feed)
    assert server_sub.ctx.recoverable is True
    assert requested == [private]
    (sub,) = rec.of("subscribed", plain)
    assert sub.ctx.recoverable is True and sub.ctx.stream_position.offset == 0

    await s_plain.publish(harness.encode({"n": 1}))
    result = await api.publish(PublishRequest(channel=plain, data={"n": 2}))
    assert result.offset == 2 and result.epoch == sub.ctx.stream_position.epoch
    await api.publish(PublishRequest(channel=feed, data={"n": 1}))
    broadcast = await api.broadcast(BroadcastRequest(channels=[plain, private], data={"n": 3}))
    assert [r.result.offset for r in broadcast.responses] == [3, 1]

    pubs = await rec.wait_for("publication", plain, n=3)
    decode = harness.decode
    assert [(decode(e.ctx.pub.data), e.ctx.pub.offset) for e in pubs] == [
        ({"n": 1}, 1),
        ({"n": 2}, 2),
        ({"n": 3}, 3),
    ]
    assert pubs[0].ctx.pub.info.user == "42" and decode(pubs[0].ctx.pub.info.conn_info) == {"name": "bob"}
    (priv_pub,) = await rec.wait_for("publication", private)
    assert decode(priv_pub.ctx.pub.data) == {"n": 3}
    (server_pub,) = await rec.wait_for("server_publication", feed)
    assert decode(server_pub.ctx.pub.data) == {"n": 1} and server_pub.ctx.pub.offset == 1

    history = await s_plain.history(limit=10)
    assert [p.offset for p in history.publications] == [1, 2, 3] and history.offset == 3
    assert [decode(p.data) for p in history.publications] == [{"n": 1}, {"n": 2}, {"n": 3}]
    presence = await s_plain.presence()
    assert [info.user for info in presence.clients.values()] == ["42"]


async def test_py_refusals_quota_and_foreign_subscription_token(harness: Harness):
    c = harness.client(mint_token(SECRET, "42"))
    await c.connect()
    await c.ready(scaled(WAIT_SECONDS))
    rec = harness.rec

    async def outcome(channel: str, **kwargs: Any) -> Event:
        s = harness.subscribe(c, channel, **kwargs)
        await s.subscribe()
        return await rec.wait(
            lambda r: next(
                iter(r.of("subscribed", channel) + r.of("unsubscribed", channel) + r.of("disconnected")), None
            )
        )

    denied = await outcome(f"private:{uid()}")
    assert denied.name == "unsubscribed" and denied.ctx.code == 103
    unknown = await outcome(f"nope:{uid()}")
    assert unknown.name == "unsubscribed" and unknown.ctx.code == 102
    assert (await outcome(f"detail:{uid()}")).name == "subscribed"
    assert (await outcome(f"detail:{uid()}")).name == "subscribed"
    quota = await outcome(f"detail:{uid()}")
    assert quota.name == "unsubscribed" and (quota.ctx.code, quota.ctx.reason) == (
        106,
        "DETAIL_SUBSCRIPTION_LIMIT",
    )
    foreign = f"private:{uid()}"
    gone = await outcome(foreign, token=mint_token(SECRET, "43", channel=foreign))
    assert gone.name == "disconnected" and gone.ctx.code == 3500
    assert [e.ctx.code for e in rec.of("connecting")] == [0]  # connect() only: 3500 is terminal
    assert c.state == ClientState.DISCONNECTED


async def test_py_channel_limit_counts_server_side_subscriptions(
    gateway_factory: GatewayFactory, py_wire: Wire
):
    config = standard_config()
    config["client"] = {**config["client"], "channel_limit": 2}
    h = Harness(gateway_factory(config), py_wire)
    try:
        c = h.client(mint_token(SECRET, "42", channels=[f"feed:{uid()}"]))
        await c.connect()
        await c.ready(scaled(WAIT_SECONDS))
        first, second = f"py-{uid()}", f"py-{uid()}"
        await h.subscribe(c, first).subscribe()
        await h.rec.wait_for("subscribed", first)
        await h.subscribe(c, second).subscribe()
        (refused,) = await h.rec.wait_for("unsubscribed", second)
        assert refused.ctx.code == 106
    finally:
        await h.close()


@pytest.mark.parametrize(
    ("namespace", "recovered"), [("", True), ("small:", False)], ids=["recovered", "more-than-history-size"]
)
async def test_py_reconnect_recovers_missed_publications(
    harness: Harness, api: AsyncClient, namespace: str, recovered: bool
):
    channel = f"{namespace}rec-{uid()}"
    rec = harness.rec
    away_offsets: list[int] = []
    states: list[ClientState] = []

    async def publish_while_away(ctx: ConnectingContext) -> None:
        # The SDK awaits this handler before it schedules the reconnect: the transport is closed.
        if ctx.code != 3011:
            return
        states.append(c.state)
        for n in (3, 4, 5):
            away_offsets.append((await api.publish(PublishRequest(channel=channel, data={"n": n}))).offset)

    rec.on_connecting_hook = publish_while_away
    c = harness.client(mint_token(SECRET, "42"))
    sub = harness.subscribe(c, channel)
    await c.connect()
    (connected,) = await rec.wait_for("connected")
    await sub.subscribe()
    await rec.wait_for("subscribed", channel)
    for n in (1, 2):
        await api.publish(PublishRequest(channel=channel, data={"n": n}))
    await rec.wait_for("publication", channel, n=2)

    await api.disconnect(
        DisconnectRequest(
            user="42", client=connected.ctx.client, disconnect=Disconnect(code=3011, reason="reconnect")
        )
    )
    _, second = await rec.wait_for("subscribed", channel, n=2)
    assert states == [ClientState.CONNECTING] and away_offsets == [3, 4, 5]
    assert second.ctx.was_recovering is True and second.ctx.recovered is recovered
    if recovered:
        pubs = await rec.wait_for("publication", channel, n=5)
        assert [(harness.decode(e.ctx.pub.data)["n"], e.ctx.pub.offset) for e in pubs] == [
            (i, i) for i in range(1, 6)
        ]
    else:
        assert second.ctx.stream_position.offset == 5
        assert [e.ctx.pub.offset for e in rec.of("publication", channel)] == [1, 2]


async def test_py_expired_token_refreshed_through_get_token(harness: Harness, api: AsyncClient):
    channel = f"py-{uid()}"
    calls: list[int] = []
    # Minted when asked for, so that a loaded machine can't expire the short one early:
    # expired (109, the SDK asks again), then ~3 s (refreshed at ttl), then long-lived.
    expiries = [-10, 3, 120]

    async def get_token() -> str:
        calls.append(len(calls))
        harness.rec.add("get_token")
        return mint_token(SECRET, "42", exp_in=expiries[min(len(calls), len(expiries)) - 1])

    c = harness.client("", get_token=get_token)
    sub = harness.subscribe(c, channel)
    await c.connect()
    await harness.rec.wait_for("connected")
    await sub.subscribe()
    await harness.rec.wait_for("subscribed", channel)
    await harness.rec.wait(lambda r: len(r.of("get_token")) >= 3, within=10)
    # Commands are answered in order: the publish reply follows the refresh reply.
    await sub.publish(harness.encode({"after": "refresh"}))
    await api.publish(PublishRequest(channel=channel, data={"after": "api"}))
    pubs = await harness.rec.wait_for("publication", channel, n=2)
    assert [harness.decode(e.ctx.pub.data)["after"] for e in pubs] == ["refresh", "api"]
    assert len(harness.rec.of("connected")) == 1 and not harness.rec.of("disconnected")
    (error,) = harness.rec.of("error")  # the connect error for the expired token
    assert error.ctx.code == 13 and error.ctx.error.code == 109
    assert c.state == ClientState.CONNECTED


async def test_py_wrong_signature_disconnects_3500_without_reconnect(harness: Harness):
    c = harness.client(mint_token("not-the-secret-0123456789abcdefghijkl", "42"), min_reconnect_delay=0.05)
    await c.connect()
    (gone,) = await harness.rec.wait_for("disconnected")
    assert gone.ctx.code == 3500
    # Absence check over a short bounded window: a reconnect loop would emit connecting events.
    with pytest.raises(WaitTimeout):
        await harness.rec.wait(lambda r: len(r.of("connecting")) > 1 or r.of("connected"), within=1.5)
    assert [e.ctx.code for e in harness.rec.of("connecting")] == [0]
    assert c.state == ClientState.DISCONNECTED


async def test_py_graceful_shutdown_sends_3001_and_exits(gateway_factory: GatewayFactory, py_wire: Wire):
    config = standard_config()
    config["shutdown"] = {"timeout": "3s"}
    gw = gateway_factory(config)
    h = Harness(gw, py_wire)
    try:
        c = h.client(mint_token(SECRET, "42"), min_reconnect_delay=5.0, max_reconnect_delay=10.0)
        await c.connect()
        await h.rec.wait_for("connected")
        started = time.monotonic()
        gw.send_sigterm()
        _, connecting = await h.rec.wait_for("connecting", n=2)
        assert connecting.ctx.code == 3001
        returncode = await asyncio.to_thread(gw.wait, 5.0)
        # An upper bound: shutdown.timeout plus process exit (scaled like every bound).
        assert time.monotonic() - started < 3.0 + scaled(0.5)
        assert returncode in (0, -signal.SIGTERM)
    finally:
        await h.close()
    assert "Traceback" not in gw.log_text()


async def test_py_subscription_token_refreshed_through_get_token(harness: Harness, api: AsyncClient):
    channel = f"private:{uid()}"
    expiries = [3, 120]  # the first sub token expires soon: the SDK sends sub_refresh at ttl

    async def sub_token(ch: str) -> str:
        harness.rec.add("get_sub_token", ch)
        return mint_token(
            SECRET, "42", channel=ch, exp_in=expiries[min(len(harness.rec.of("get_sub_token")), 2) - 1]
        )

    c = harness.client(mint_token(SECRET, "42"))
    sub = harness.subscribe(c, channel, get_token=sub_token)
    await c.connect()
    await sub.subscribe()
    await harness.rec.wait_for("subscribed", channel)
    await harness.rec.wait_for("get_sub_token", channel, n=2)
    await sub.publish(harness.encode({"after": "sub_refresh"}))  # answered after the sub_refresh reply
    await api.publish(PublishRequest(channel=channel, data={"after": "api"}))
    pubs = await harness.rec.wait_for("publication", channel, n=2)
    assert [harness.decode(e.ctx.pub.data)["after"] for e in pubs] == ["sub_refresh", "api"]
    assert len(harness.rec.of("subscribed", channel)) == 1 and not harness.rec.of("unsubscribed", channel)


async def test_py_channel_max_length_is_107(harness: Harness):
    c = harness.client(mint_token(SECRET, "42"))
    await c.connect()
    channel = "py-" + "x" * 300  # channel.max_length defaults to 255
    await harness.subscribe(c, channel).subscribe()
    (refused,) = await harness.rec.wait_for("unsubscribed", channel)
    assert refused.ctx.code == 107


async def test_py_user_connection_limit_3504(gateway_factory: GatewayFactory, py_wire: Wire):
    config = standard_config()
    config["client"] = {**config["client"], "user_connection_limit": 1}
    gateway = gateway_factory(config)
    if gateway.workers > 1:
        # Counted per node, as Centrifugo does, and each worker is a node (docs/scaling.md): two
        # connections on two workers are both within the limit.
        pytest.skip("user_connection_limit is per node; each of --workers N is a node")
    h = Harness(gateway, py_wire)
    try:
        first = h.client(mint_token(SECRET, "42"))
        await first.connect()
        await h.rec.wait_for("connected")
        second = h.client(mint_token(SECRET, "42"))
        await second.connect()
        (gone,) = await h.rec.wait_for("disconnected")
        assert gone.ctx.code == 3504 and second.state == ClientState.DISCONNECTED
        assert first.state == ClientState.CONNECTED
    finally:
        await h.close()


async def test_py_join_leave_and_presence(harness: Harness):
    channel = f"joinleave:{uid()}"
    rec = harness.rec
    watcher = harness.client(mint_token(SECRET, "42", info={"name": "alice"}))
    watched = harness.subscribe(watcher, channel, join_leave=True)
    await watcher.connect()
    await watched.subscribe()
    await rec.wait_for("subscribed", channel)
    other = harness.client(mint_token(SECRET, "43", info={"name": "bob"}))
    other_sub = other.new_subscription(channel)
    await other.connect()
    await other_sub.subscribe()
    await other_sub.ready(scaled(WAIT_SECONDS))

    (join,) = await rec.wait(lambda r: [e for e in r.of("join", channel) if e.ctx.info.user == "43"])
    assert harness.decode(join.ctx.info.conn_info) == {"name": "bob"}
    presence = await watched.presence()
    assert sorted(info.user for info in presence.clients.values()) == ["42", "43"]
    stats = await watched.presence_stats()
    assert (stats.num_clients, stats.num_users) == (2, 2)

    await other_sub.unsubscribe()
    (leave,) = await rec.wait(lambda r: [e for e in r.of("leave", channel) if e.ctx.info.user == "43"])
    assert leave.ctx.info.client == join.ctx.info.client


async def test_py_protobuf_binary_payloads_round_trip(harness: Harness, api: AsyncClient):
    """Over Protobuf payloads are opaque bytes: what an SDK client publishes (not JSON at all) and
    what the server API publishes with ``b64data`` arrive byte for byte, live and from history."""
    if not harness.wire.protobuf:
        pytest.skip("binary payloads need the Protobuf protocol (JSON SDKs refuse bytes)")
    channel = f"py-{uid()}"
    from_client, from_api = bytes(range(256)), b"\x00\xff\xfe not json \x80"
    c = harness.client(mint_token(SECRET, "42"))
    sub = harness.subscribe(c, channel)
    await c.connect()
    await sub.subscribe()
    await sub.ready(scaled(WAIT_SECONDS))
    await sub.publish(from_client)
    await api.publish(PublishRequest(channel=channel, data=None, b64data=base64.b64encode(from_api).decode()))
    pubs = await harness.rec.wait_for("publication", channel, n=2)
    assert [(e.ctx.pub.data, e.ctx.pub.offset) for e in pubs] == [(from_client, 1), (from_api, 2)]
    history = await sub.history(limit=10)
    assert [p.data for p in history.publications] == [from_client, from_api]
