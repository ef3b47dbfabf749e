"""The connection driver in-process: a real Node on the memory engine, recording transports,
no sockets. Covers the hot-path properties (encode once per publication, one write per
connection per tick, one shared joined frame), the subscribe race (defect 1), server-side
actions through the hub's Connection protocol, and closing."""

from __future__ import annotations

import asyncio
import itertools

import orjson

from gateway.engine.base import EngineError
from gateway.engine.memory import MemoryBroker
from gateway.hub import Connection
from gateway.protocol import codes
from gateway.protocol.codec import JsonCodec
from gateway.protocol.messages import ClientInfo, Publication, SubscribeRecovery
from gateway.protocol.policy import ServerSub
from tests.gateway.recording import INSECURE, WAIT_SECONDS, Harness, RecordingTransport, until


class GatedBroker(MemoryBroker):
    """A memory broker whose channel subscriptions wait for ``gate`` and then fail when
    ``fail`` is set: a slow, then failing, PUB/SUB link."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.fail = False
        self.subscribe_calls = 0

    async def subscribe(self, channel: str) -> None:
        self.subscribe_calls += 1
        await self.gate.wait()
        if self.fail:
            raise EngineError("pubsub down")
        await super().subscribe(channel)


class CountingCodec(JsonCodec):
    def __init__(self) -> None:
        self.publications = 0

    def encode_publication(self, channel: str, pub: Publication) -> bytes:
        self.publications += 1
        return super().encode_publication(channel, pub)


async def test_connect_subscribe_publish_in_order():
    h = Harness()
    client, transport = h.connect()
    client.feed(b'{"id":1,"connect":{}}\n{"id":2,"subscribe":{"channel":"news"}}')
    connect = await transport.reply(1)
    assert connect["connect"]["client"] == client.client_id
    assert connect["connect"]["ping"] == 25 and connect["connect"]["pong"] is True
    await transport.reply(2)
    opts = h.settings.channel_options("news")
    assert opts is not None
    await h.node.publish("news", opts, b'{"n":1}')
    pub = await transport.push("pub")
    assert pub == {"channel": "news", "pub": {"data": {"n": 1}, "offset": 1}}


async def test_publication_is_encoded_once_and_written_once_per_connection_per_tick():
    codec = CountingCodec()
    h = Harness(codec=codec)
    conns = [await h.subscribed("hot") for _ in range(5)]
    for _, transport in conns:
        transport.clear()
    # Two publications in the same loop tick.
    h.node.on_publication("hot", Publication(b"1"), None)
    h.node.on_publication("hot", Publication(b"2"), None)
    assert codec.publications == 2  # once per publication, not per subscriber
    await until(lambda: all(t.writes for _, t in conns))
    shared = {id(t.writes[0][1]) for _, t in conns}
    for _, transport in conns:
        assert len(transport.writes) == 1  # one write per connection per tick
        payloads, joined = transport.writes[0]
        assert joined is not None and joined.payload == b"\n".join(payloads)
    assert len(shared) == 1  # connections that queued the same pushes share one joined frame


async def test_a_reply_in_the_tick_unshares_the_frame_of_that_connection_only():
    h = Harness()
    (a, ta), (_, tb) = [await h.subscribed("hot") for _ in range(2)]
    ta.clear()
    tb.clear()
    a.feed(b'{"id":9,"presence_stats":{"channel":"hot"}}')
    await ta.reply(9)
    ta.clear()
    h.node.on_publication("hot", Publication(b"1"), None)
    a.send(b'{"id":10}')
    await until(lambda: bool(ta.writes and tb.writes))
    assert ta.writes[0][1] is None and tb.writes[0][1] is not None


async def test_concurrent_subscribers_share_one_broker_subscription_and_its_failure():
    """Defect 1: the second subscriber of a channel joined while the first one's broker
    subscription was in flight; that subscription then failed. Both must get the error (the
    second used to get a success reply and stay deaf), and nobody stays registered."""
    broker = GatedBroker()
    h = Harness(broker=broker)
    (a, ta), (b, tb) = await h.connected(), await h.connected()
    a.feed(b'{"id":2,"subscribe":{"channel":"c"}}')
    await until(lambda: broker.subscribe_calls == 1)
    b.feed(b'{"id":2,"subscribe":{"channel":"c"}}')
    await until(lambda: len(h.node.hub.channels.get("c", {})) == 2)
    assert tb.messages()[-1:] != [{"id": 2, "subscribe": {}}], "joined before the broker subscribed"
    broker.fail = True
    broker.gate.set()
    for transport in (ta, tb):
        reply = await transport.reply(2)
        assert reply["error"]["code"] == codes.ERROR_INTERNAL.code, reply
    assert broker.subscribe_calls == 1  # one in-flight subscription shared by both joiners
    assert "c" not in h.node.hub.channels
    assert "c" not in a.session.subscriptions and "c" not in b.session.subscriptions
    # A later subscriber starts a fresh broker subscription and is delivered to.
    broker.fail = False
    b.feed(b'{"id":3,"subscribe":{"channel":"c"}}')
    assert "subscribe" in await tb.reply(3)
    opts = h.settings.channel_options("c")
    assert opts is not None
    await h.node.publish("c", opts, b"7")
    assert (await tb.push("pub"))["pub"]["data"] == 7
    await h.node.drain()


async def test_joiners_of_a_slow_broker_subscription_all_wait_for_it():
    broker = GatedBroker()
    h = Harness(broker=broker)
    (a, ta), (b, tb) = await h.connected(), await h.connected()
    a.feed(b'{"id":2,"subscribe":{"channel":"c"}}')
    b.feed(b'{"id":2,"subscribe":{"channel":"c"}}')
    await until(lambda: len(h.node.hub.channels.get("c", {})) == 2)
    await asyncio.sleep(0)
    assert not [m for m in ta.messages() + tb.messages() if m.get("id") == 2]
    broker.gate.set()
    assert "subscribe" in await ta.reply(2)
    assert "subscribe" in await tb.reply(2)
    assert broker.subscribe_calls == 1


async def test_unsubscribe_of_a_subscription_in_flight_is_ordered_after_it():
    broker = GatedBroker()
    h = Harness(broker=broker)
    a, _ = await h.connected()
    a.feed(b'{"id":2,"subscribe":{"channel":"c"}}')
    await until(lambda: broker.subscribe_calls == 1)
    a.connection_lost()  # the only subscriber leaves while the broker subscribe is in flight
    b, tb = await h.connected()
    b.feed(b'{"id":2,"subscribe":{"channel":"c"}}')
    broker.gate.set()
    assert "subscribe" in await tb.reply(2)
    await h.node.drain()
    assert "c" in broker._subscribed  # the leaver's unsubscribe did not undo the new link


async def test_server_side_actions_through_the_hub_connection_protocol():
    h = Harness()
    client, transport = await h.connected()
    (conn,) = h.node.hub.select(client=client.client_id)
    target: Connection = conn
    target.subscribe_server_side("srv", ServerSub(data=b'{"hello":1}'), None)
    push = await transport.push("subscribe")
    assert push == {"channel": "srv", "subscribe": {"data": {"hello": 1}}}
    target.subscribe_server_side("srv", ServerSub(), SubscribeRecovery())  # already subscribed: no-op
    target.unsubscribe_server_side("srv")
    unsub = await transport.push("unsubscribe")
    assert unsub["unsubscribe"] == {"code": 2000, "reason": "server unsubscribe"}
    target.refresh_server_side(expired=True, expire_at=None)
    assert await transport.closed_with() == codes.DISCONNECT_EXPIRED
    assert not h.node.hub.clients


async def test_emulation_commands_reach_a_session_through_the_hub():
    h = Harness()
    client, transport = h.connect(RecordingTransport("sse", emulation=True))
    client.feed(b'{"id":1,"connect":{}}')
    reply = (await transport.reply(1))["connect"]
    assert reply["session"] == client.session_id and reply["node"] == h.node.uid
    conn = h.node.hub.session(client.session_id)
    assert conn is not None
    conn.feed('{"id":2,"rpc":{"method":"x"}}')
    assert (await transport.reply(2))["error"]["code"] == codes.ERROR_NOT_AVAILABLE.code


async def test_unidirectional_connect_result_has_no_pong_and_errors_become_disconnects():
    h = Harness({"TASKCAST_CLIENT_TOKEN_HMAC_SECRET_KEY": "s"})
    client, transport = h.connect(RecordingTransport("uni_sse", unidirectional=True))
    client.feed(b'{"id":1,"connect":{"token":"not-a-jwt"}}')
    assert await transport.closed_with() == codes.DISCONNECT_INVALID_TOKEN
    h2 = Harness()
    client, transport = h2.connect(RecordingTransport("uni_sse", unidirectional=True))
    client.feed(b'{"id":1,"connect":{}}')
    reply = (await transport.reply(1))["connect"]
    assert reply["ping"] == 25 and "pong" not in reply


async def test_bad_frame_disconnects_3501_without_raising():
    h = Harness()
    client, transport = h.connect()
    client.feed(b"{not json")
    assert transport.closed == codes.DISCONNECT_BAD_REQUEST
    client.feed(b'{"id":1,"connect":{}}')  # ignored once closed
    assert transport.closed == codes.DISCONNECT_BAD_REQUEST


async def test_queue_bound_disconnects_slow_client_3008():
    h = Harness({**INSECURE, "TASKCAST_CLIENT_QUEUE_MAX_SIZE": "1000"})
    client, transport = await h.subscribed("hot")
    transport.buffered = 990  # the socket is not draining
    h.node.on_publication("hot", Publication(orjson.dumps("x" * 50)), None)
    assert transport.closed == codes.DISCONNECT_SLOW
    assert client.closed


async def test_join_leave_pushes_go_to_subscribers_that_asked():
    h = Harness({**INSECURE, "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_JOIN_LEAVE": "true"})
    _, ta = await h.subscribed("room", join_leave=True)
    _, tb = await h.subscribed("room")
    h.node.on_join("room", ClientInfo("u", "c1"))
    joined = await ta.next(lambda m: m.get("push", {}).get("join", {}).get("info", {}).get("client") == "c1")
    assert joined["push"]["join"] == {"info": {"user": "u", "client": "c1"}}
    await asyncio.sleep(0)
    assert not [m for m in tb.messages() if "join" in m.get("push", {})]


async def test_connection_lost_releases_hub_and_broker_state():
    h = Harness()
    client, _ = await h.subscribed("c")
    assert "c" in h.node.hub.channels
    client.connection_lost()
    client.connection_lost()  # idempotent
    await h.node.drain()
    assert not h.node.hub.channels and not h.node.hub.clients
    assert "c" not in h.broker._subscribed  # type: ignore[attr-defined]


class SlowHistoryBroker(MemoryBroker):
    """History reads return what was stored when they started, but only after ``gate``: live
    publications published meanwhile reach subscribers first (the §3.3 step 6 window)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def history(self, channel, history, *, since=None, limit=0, reverse=False):  # type: ignore[no-untyped-def]
        result = await super().history(channel, history, since=since, limit=limit, reverse=reverse)
        if self.gate is not None and limit != 0:
            self.reading.set()
            await self.gate.wait()
        return result


async def test_recovery_merges_publications_that_arrive_during_the_history_read():
    broker = SlowHistoryBroker()
    h = Harness(broker=broker)
    opts = h.settings.channel_options("r")
    assert opts is not None
    first = await h.node.publish("r", opts, b"1")
    for n in (2, 3):
        await h.node.publish("r", opts, str(n).encode())
    client, transport = await h.connected()
    broker.gate = asyncio.Event()
    sub = {"channel": "r", "recover": True, "recoverable": True, "offset": 1, "epoch": first.position.epoch}
    client.feed(orjson.dumps({"id": 2, "subscribe": sub}))
    await broker.reading.wait()
    await h.node.publish("r", opts, b"4")  # live, while the history read is in flight
    broker.gate.set()
    reply = (await transport.reply(2))["subscribe"]
    assert reply["recovered"] is True and reply["was_recovering"] is True
    assert [p["offset"] for p in reply["publications"]] == [2, 3, 4]
    await h.node.publish("r", opts, b"5")
    pub = await transport.push("pub")
    assert pub["pub"]["offset"] == 5  # 4 was not sent twice


async def test_reject_unrecovered_flag_answers_112():
    h = Harness()
    client, transport = await h.connected()
    sub = {"channel": "r", "recover": True, "recoverable": True, "offset": 7, "epoch": "gone", "flag": 2}
    client.feed(orjson.dumps({"id": 2, "subscribe": sub}))
    assert (await transport.reply(2))["error"]["code"] == codes.ERROR_UNRECOVERABLE_POSITION.code
    assert "r" not in client.session.subscriptions and "r" not in h.node.hub.channels


async def test_a_large_batch_of_commands_lets_the_loop_serve_others():
    """Issue 28: commands that complete without suspending (presence_stats on the memory engine)
    run at most ``YIELD_EVERY`` between two turns of a probe task that takes every turn of the
    loop; without the command task's periodic yield a frame's 1,000 commands run in one turn."""
    from gateway.connection.command_queue import YIELD_EVERY

    h = Harness()
    client, transport = await h.connected()
    frame = b"\n".join(b'{"id":%d,"presence_stats":{"channel":"c"}}' % (i + 2) for i in range(1000))
    samples = [0]  # nothing ran before the frame

    def ran() -> int:
        return 1000 - len(client.commands)

    async def probe() -> None:
        while ran() < 1000 or client.commands.running:
            samples.append(ran())
            await asyncio.sleep(0)
        samples.append(ran())

    client.feed(frame)  # queues the commands and starts the command task
    await asyncio.wait_for(probe(), timeout=WAIT_SECONDS)
    most = max(b - a for a, b in itertools.pairwise(samples))
    assert 0 < most <= YIELD_EVERY, most
    assert (await transport.reply(1001))["id"] == 1001  # every command was answered
