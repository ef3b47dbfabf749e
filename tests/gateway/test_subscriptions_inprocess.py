"""gateway/connection/subscriptions.py against its contract, without the connection driver: a recording
``Driver`` (what the module may ask of gateway/connection/client.py, and nothing more), a real Node on the
memory engine, a real SendQueue over a recording transport. Jobs the module ``spawn``s and the
callbacks it asks to run ``after_reply`` are run by the test, so every step is explicit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest

from gateway.connection.authorization import Caller
from gateway.connection.refresh import ServerRefresher
from gateway.connection.sendqueue import Flusher, SendQueue
from gateway.connection.server_subscriptions import ServerSubscriptions
from gateway.connection.subscriptions import Driver
from gateway.errors import CommandError, DisconnectError
from gateway.hub import SharedPush
from gateway.protocol import codes, policy
from gateway.protocol.codec import JSON
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition, SubscribeRequest
from gateway.protocol.session import Session, SessionConfig, State
from gateway.protocol.subscription import Subscription, SubState
from tests.gateway.recording import INSECURE, Harness, RecordingTransport, until


class RecordingDriver:
    """A ``gateway.connection.subscriptions.Driver`` that records what it is asked to do."""

    def __init__(self, h: Harness, transport: RecordingTransport, *, user: str = "") -> None:
        self.client_id = "c1"
        self.user = user
        self.session_id = ""
        self.codec = JSON
        self.name = "probe"
        self.authorizer = h.factory.authorizer
        self.conn_info: bytes | None = None
        self.conn_meta: bytes | None = None
        self.closed = False
        self.jobs: list[Callable[[], Awaitable[object]]] = []
        self.after: list[Callable[[], None]] = []
        self.disconnects: list[codes.Disconnect] = []
        self.session = Session(JSON, SessionConfig(channel_limit=h.settings.client.channel_limit))
        self.session.connected()
        loop = asyncio.get_running_loop()
        self.send_queue = SendQueue(transport, Flusher(), limit_bytes=0, on_failure=self.disconnect)
        self.subs = ServerSubscriptions(
            self,
            h.node,
            self.session,
            self.send_queue,
            authorizer=self.authorizer,
            refresher=ServerRefresher(self, loop, lambda: 0.0),
            clock=lambda: 0.0,
        )
        fanout = self.subs.fanout
        self.on_publication, self.on_join_leave = fanout.on_publication, fanout.on_join_leave
        self.check_position, self.presence_tick = fanout.check_position, self.subs.presence_tick
        self.direct_target = fanout.direct_target
        self.subscribe_server_side = self.subs.subscribe_server_side
        self.unsubscribe_server_side = self.subs.unsubscribe_server_side

    # Driver
    def who(self) -> policy.Who:
        return policy.Who(self.user, self.client_id, True)

    def caller(self) -> Caller:
        return Caller(self.who(), "websocket", "json")

    def client_info(self, sub: Subscription | None = None) -> ClientInfo:
        return ClientInfo(self.user, self.client_id, None, sub.chan_info if sub else None)

    def send(self, payload: bytes) -> None:
        self.send_queue.put(payload)

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None:
        self.jobs.append(job)

    def after_reply(self, callback: Callable[[], None]) -> None:
        self.after.append(callback)

    def disconnect(self, disconnect: codes.Disconnect) -> None:
        self.disconnects.append(disconnect)

    def feed(self, frame: bytes | str) -> None:
        raise AssertionError("the subscriptions never feed the driver")

    def refresh_server_side(self, *, expired: bool, expire_at: int | None, info: bytes | None = None) -> None:
        raise AssertionError("connection-level: not the subscriptions' business")

    # gateway.connection.refresh.Conn
    def subscription(self, channel: str) -> Subscription | None:
        return self.subs.get(channel)

    def update_channel_info(self, sub: Subscription, info: bytes) -> None:
        self.session.update_channel_info(sub, info)

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None:
        await self.subs.unsubscribe(channel, push)

    async def run_jobs(self) -> None:
        while self.jobs:
            await self.jobs.pop(0)()

    def replied(self) -> None:
        after, self.after = self.after, []
        for callback in after:
            callback()


def _as_driver(d: RecordingDriver) -> Driver:
    return d  # mypy: the recording driver is a Driver (what Subscriptions may use, and no more)


def _push(channel: str, data: int, offset: int = 0, epoch: str = "") -> tuple[Publication, SharedPush]:
    pub = Publication(orjson.dumps(data), offset=offset)
    return pub, SharedPush(JSON.encode_publication(channel, pub), channel, epoch)


def _pubs(transport: RecordingTransport) -> list[int]:
    return [m["push"]["pub"]["data"] for m in transport.messages() if "pub" in m.get("push", {})]


BASE = {**INSECURE, "TASKCAST_CLIENT_CHANNEL_LIMIT": "3"}
POSITIONED = {**BASE, "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_FORCE_POSITIONING": "true"}


async def test_a_subscription_buffers_until_its_reply_is_queued_then_goes_live_in_order():
    h = Harness(BASE)
    transport = RecordingTransport()
    d = RecordingDriver(h, transport)
    await d.subs.subscribe(SubscribeRequest("news"))
    sub = d.subs.get("news")
    assert sub is not None and sub.state is SubState.SUBSCRIBING and len(d.after) == 1
    assert h.node.hub.channels["news"] == {d.client_id: d}  # in the hub before the reply
    for n in (1, 2):
        pub, push = _push("news", n)
        d.on_publication("news", pub, "", push)
    assert len(sub.buffer) == 2 and transport.writes == []  # nothing before the reply
    d.replied()
    assert (sub.state, sub.buffer) == (SubState.SUBSCRIBED, [])
    live, push = _push("news", 3)
    d.on_publication("news", live, "", push)
    d.send_queue.flush()
    assert len(transport.writes) == 1 and _pubs(transport) == [1, 2, 3]  # in order, one write


async def test_the_common_delivery_queues_the_shared_push_itself():
    h = Harness()
    transport = RecordingTransport()
    d = RecordingDriver(h, transport)
    await d.subs.subscribe(SubscribeRequest("news"))
    d.replied()
    pub, push = _push("news", 0)
    d.on_publication("news", pub, "", push)
    d.send_queue.flush()
    assert transport.writes == [([push.payload], transport.writes[0][1])]
    assert transport.writes[0][1] is push  # no per-connection copy on the hot path


async def test_a_refused_subscribe_leaves_nothing_and_asks_for_no_go_live():
    h = Harness(BASE)
    d = RecordingDriver(h, RecordingTransport())
    with pytest.raises(CommandError) as err:
        await d.subs.subscribe(SubscribeRequest("nope:x"))
    assert err.value.error == codes.ERROR_UNKNOWN_CHANNEL
    with pytest.raises(DisconnectError):
        await d.subs.subscribe(SubscribeRequest(""))
    for ch in ("a", "b", "c"):
        await d.subs.subscribe(SubscribeRequest(ch))
    with pytest.raises(CommandError) as err:
        await d.subs.subscribe(SubscribeRequest("d"))  # channel_limit=3
    assert err.value.error == codes.ERROR_LIMIT_EXCEEDED
    assert "d" not in d.subs and "d" not in h.node.hub.channels and len(d.after) == 3


async def test_lost_messages_unsubscribe_a_client_side_subscription_in_command_order():
    h = Harness(POSITIONED)
    transport = RecordingTransport()
    d = RecordingDriver(h, transport)
    await d.subs.subscribe(SubscribeRequest("p"))
    d.replied()
    sub = d.subs.get("p")
    assert sub is not None and sub.positioned
    d.check_position("p", StreamPosition(sub.offset + 1, sub.epoch))
    assert len(d.jobs) == 1 and d.disconnects == []
    await d.run_jobs()
    d.send_queue.flush()
    (msg,) = [m for m in transport.messages() if "unsubscribe" in m.get("push", {})]
    assert msg["push"] == {"channel": "p", "unsubscribe": {"code": 2500, "reason": "insufficient state"}}
    assert "p" not in d.subs and "p" not in h.node.hub.channels


async def test_lost_messages_on_a_server_side_subscription_disconnect_3010():
    h = Harness(POSITIONED)
    d = RecordingDriver(h, RecordingTransport())
    results = await d.subs.subscribe_at_connect({"srv": policy.ServerSub()}, {})
    assert results["srv"].positioned
    d.replied()  # the connect reply: server-side subscriptions go live
    sub = d.subs.get("srv")
    assert sub is not None and sub.state is SubState.SUBSCRIBED
    pub, push = _push("srv", 9, sub.offset + 2, sub.epoch)  # a gap
    d.on_publication("srv", pub, sub.epoch, push)
    assert d.disconnects == [codes.DISCONNECT_INSUFFICIENT_STATE]


async def test_server_api_subscribe_pushes_subscribe_then_delivers():
    h = Harness()
    transport = RecordingTransport()
    d = RecordingDriver(h, transport)
    d.subscribe_server_side("srv", policy.ServerSub(data=b'{"hi":1}'), None)
    d.subscribe_server_side("srv", policy.ServerSub(), None)
    assert len(d.jobs) == 2
    await d.run_jobs()  # the second finds the channel subscribed: nothing
    pub, push = _push("srv", 0)
    d.on_publication("srv", pub, "", push)
    d.send_queue.flush()
    msgs = transport.messages()
    assert msgs[0]["push"] == {"channel": "srv", "subscribe": {"data": {"hi": 1}}}
    assert _pubs(transport) == [0] and len(msgs) == 2
    d.unsubscribe_server_side("srv")
    await d.run_jobs()
    d.send_queue.flush()
    assert transport.messages()[-1]["push"]["unsubscribe"]["code"] == codes.UNSUBSCRIBE_SERVER.code


async def test_connect_channels_add_the_personal_channel_and_enforce_channel_limit():
    env = {**BASE, "TASKCAST_CLIENT_SUBSCRIBE_TO_USER_PERSONAL_CHANNEL_ENABLED": "true"}
    h = Harness(env)
    d = RecordingDriver(h, RecordingTransport(), user="42")
    assert set(await d.subs.connect_channels({"a": policy.ServerSub()})) == {"a", "#42"}
    many = {ch: policy.ServerSub() for ch in ("a", "b", "c")}
    with pytest.raises(DisconnectError) as err:
        await d.subs.connect_channels(many)  # + the personal channel: 4 > channel_limit 3
    assert err.value.disconnect == codes.DISCONNECT_CHANNEL_LIMIT
    assert d.session.state is State.CONNECTED and not d.subs.get("a")


async def test_close_stops_delivery_and_releases_in_the_background():
    h = Harness()
    transport = RecordingTransport()
    d = RecordingDriver(h, transport)
    await d.subs.subscribe(SubscribeRequest("news"))
    d.replied()
    d.subs.close()
    d.subs.close()  # idempotent
    pub, push = _push("news", 0)
    d.on_publication("news", pub, "", push)
    d.presence_tick()
    assert transport.writes == [] and d.jobs == [] and "news" not in d.subs
    await until(lambda: "news" not in h.node.hub.channels)
    await h.node.drain()
