"""gateway/cluster.py in-process: two clusters on one loop-back control channel (the memory
engine delivers every control message to its handler), a real Hub, and recording connections.
Server API user ops reach the matching connections of every node, malformed control messages
are dropped whole, surveys collect every live node, and emulation commands reach their session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.api.requests import (
    DisconnectReason,
    DisconnectRequest,
    Position,
    RefreshRequest,
    SubscribeRequest,
    UnsubscribeRequest,
)
from gateway.cluster import Cluster, encode
from gateway.engine.memory import MemoryBroker
from gateway.hub import Hub
from gateway.protocol import codes, policy
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.messages import SubscribeRecovery
from tests.support import wait_until


@dataclass
class Recording:
    """A Connection that records what the cluster asked of it."""

    client_id: str
    user: str
    session_id: str = ""
    codec: Codec = JSON
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def on_publication(self, *args: Any) -> None: ...
    def on_join_leave(self, *args: Any) -> None: ...
    def direct_target(self, channel: str) -> None:
        return None

    def check_position(self, *args: Any) -> None: ...
    def presence_tick(self) -> None: ...

    def feed(self, frame: bytes | str) -> None:
        self.calls.append(("feed", frame))

    def disconnect(self, disconnect: codes.Disconnect) -> None:
        self.calls.append(("disconnect", disconnect))

    def subscribe_server_side(
        self, channel: str, sub: policy.ServerSub, recovery: SubscribeRecovery | None
    ) -> None:
        self.calls.append(("subscribe", channel, sub, recovery))

    def unsubscribe_server_side(self, channel: str) -> None:
        self.calls.append(("unsubscribe", channel))

    def refresh_server_side(self, *, expired: bool, expire_at: int | None, info: bytes | None = None) -> None:
        self.calls.append(("refresh", expired, expire_at))


class Fanout:
    """A broker handler that hands every control message to every cluster (a shared channel)."""

    def __init__(self) -> None:
        self.clusters: list[Cluster] = []

    def on_control(self, data: bytes) -> None:
        for cluster in self.clusters:
            cluster.on_control(data)

    def on_publication(self, *args: Any) -> None: ...
    def on_join(self, *args: Any) -> None: ...
    def on_leave(self, *args: Any) -> None: ...
    def on_broker_reconnect(self) -> None: ...


def _info(uid: str) -> Callable[[], dict[str, Any]]:
    return lambda: {"uid": uid}


def _last(conn: Recording) -> tuple[Any, ...]:
    return conn.calls[-1]


def _two_nodes() -> tuple[MemoryBroker, list[tuple[Cluster, Hub]]]:
    broker = MemoryBroker()
    fanout = Fanout()
    broker.set_handler(fanout)
    nodes = []
    for n in range(2):
        hub = Hub()
        uid = f"node{n}"
        cluster = Cluster(uid=uid, broker=broker, hub=hub, clock=lambda: 0.0, info=_info(uid))
        fanout.clusters.append(cluster)
        nodes.append((cluster, hub))
    return broker, nodes


async def test_user_ops_reach_matching_connections_on_every_node():
    _, [(a, hub_a), (b, hub_b)] = _two_nodes()
    alice_a, alice_b, bob = Recording("c1", "alice"), Recording("c2", "alice"), Recording("c3", "bob")
    hub_a.add_client(alice_a)
    hub_b.add_client(alice_b)
    hub_b.add_client(bob)
    await a.user_op(
        SubscribeRequest(
            user="alice", channel="news", info={"i": 1}, recover_since=Position(5, "e"), override=None
        )
    )
    for conn in (alice_a, alice_b):
        (call,) = conn.calls
        assert call == (
            "subscribe",
            "news",
            policy.ServerSub(info=b'{"i":1}'),
            SubscribeRecovery(True, 5, "e"),
        )
    assert bob.calls == []
    await b.user_op(UnsubscribeRequest(user="alice", channel="news"))
    assert _last(alice_a) == ("unsubscribe", "news") == _last(alice_b)
    await a.user_op(RefreshRequest(user="bob", expire_at=1234))
    assert bob.calls == [("refresh", False, 1234)]
    await a.user_op(
        DisconnectRequest(user="alice", whitelist=["c2"], disconnect=DisconnectReason(4001, "bye"))
    )
    assert _last(alice_a) == ("disconnect", codes.Disconnect(4001, "bye"))
    assert len(alice_b.calls) == 2  # whitelisted: no disconnect
    await a.user_op(DisconnectRequest(user="bob"))
    assert _last(bob) == ("disconnect", codes.DISCONNECT_FORCE_NO_RECONNECT)


async def test_malformed_control_messages_are_dropped_whole():
    _, [(a, hub_a), _] = _two_nodes()
    conn = Recording("c1", "alice")
    hub_a.add_client(conn)
    for message in (
        b"not json",
        b'{"no": "op"}',
        encode("user_op", "x", method="disconnect", params={"user": 5}),
        encode("user_op", "x", method="nope", params={}),
        encode("user_op", "x", method="subscribe", params={"user": "alice"}),  # no channel
        encode("emulation", "x", session=1, data="{}"),
    ):
        a.on_control(message)
    assert conn.calls == []


async def test_survey_collects_every_live_node_and_nodes_lists_them():
    broker, [(a, hub_a), (b, hub_b)] = _two_nodes()
    hub_a.add_client(conn := Recording("c1", "u"))
    hub_a.add_subscriber("x", conn)
    hub_b.add_client(other := Recording("c2", "u"))
    hub_b.add_subscriber("x", other)
    hub_b.add_subscriber("y", other)
    for uid in ("node0", "node1"):  # the heartbeats run() sends every 3 s
        await broker.publish_control(encode("node", uid, info={"uid": uid}))
    runs = [asyncio.create_task(cluster.run()) for cluster in (a, b)]  # they send the survey replies
    try:
        assert {n["uid"] for n in a.nodes()} == {"node0", "node1"}
        replies = await a.survey("channels", wait=10.0)
    finally:
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
    assert replies == {"node0": {"x": 1}, "node1": {"x": 1, "y": 1}}


async def test_emulation_reaches_the_session_or_reports_an_unknown_node():
    _, [(a, _), (b, hub_b)] = _two_nodes()
    conn = Recording("c1", "u", session_id="s1")
    hub_b.add_client(conn)
    assert await a.route_emulation("nowhere", "s1", "{}") is False
    b.registry.update({"uid": "node1"})
    a.registry.update({"uid": "node1"})
    assert await a.route_emulation("node1", "s1", '{"id":2,"ping":{}}') is True
    assert await b.route_emulation("node1", "missing", "{}") is True  # the session closed: dropped
    assert conn.calls == [("feed", '{"id":2,"ping":{}}')]
    assert orjson.loads(encode("emulation", "a", session="s", data="d"))["op"] == "emulation"
    # A Protobuf session's commands are bytes: they cross the control channel as base64.
    assert await a.route_emulation("node1", "s1", b"\x00\xff\n") is True
    assert conn.calls[-1] == ("feed", b"\x00\xff\n")


async def test_a_new_node_is_answered_with_a_heartbeat_so_both_know_each_other_at_once():
    # A node (or a restarted worker) that starts after the others must not wait for their next
    # heartbeat to see them in `info`: a heartbeat from an unknown node is answered at once.
    _, [(a, _), (b, _)] = _two_nodes()
    async with asyncio.TaskGroup() as tg:
        send_queue = tg.create_task(a._send_queued())  # a's control sender; no heartbeat loop runs
        await b.broker.publish_control(encode("node", b.uid, info=b.info()))  # b's first beat
        await wait_until(lambda: {n["uid"] for n in b.registry.live()} == {"node0", "node1"}, 10, "b knows a")
        assert {n["uid"] for n in a.registry.live()} == {"node0", "node1"}
        send_queue.cancel()
    # A known node's heartbeat is not answered (no ping-pong between nodes).
    a.on_control(encode("node", b.uid, info=b.info()))
    assert a._send_queue.empty()
