"""The hub in-process, with plain recording connections: registry lookups (no downcasts), the
fan-out snapshot, and frames built once per shared push (gateway/transports/framing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.hub import Connection, Hub, SharedPush
from gateway.protocol import codes
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition, SubscribeRecovery
from gateway.protocol.policy import ServerSub
from gateway.transports import framing


@dataclass
class Recorder:
    """A minimal ``Connection``: records what the hub hands it."""

    client_id: str
    user: str = ""
    session_id: str = ""
    codec: Codec = JSON
    pushes: list[tuple[str, SharedPush]] = field(default_factory=list)

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        self.pushes.append((channel, push))

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None:
        self.pushes.append((key, push))

    def direct_target(self, channel: str) -> None:
        return None

    def check_position(self, channel: str, top: StreamPosition) -> None: ...
    def feed(self, frame: bytes | str) -> None: ...
    def disconnect(self, disconnect: codes.Disconnect) -> None: ...
    def subscribe_server_side(
        self, channel: str, sub: ServerSub, recovery: SubscribeRecovery | None
    ) -> None: ...
    def unsubscribe_server_side(self, channel: str) -> None: ...
    def refresh_server_side(
        self, *, expired: bool, expire_at: int | None, info: bytes | None = None
    ) -> None: ...
    def presence_tick(self) -> None: ...


def test_select_by_user_client_and_session():
    hub = Hub()
    a: Connection = Recorder("a", "alice")
    b: Connection = Recorder("b", "alice", "s1")
    c: Connection = Recorder("c", "bob")
    for conn in (a, b, c):
        hub.add_client(conn)
    assert {x.client_id for x in hub.select(user="alice")} == {"a", "b"}
    assert hub.select(client="c") == [c]
    assert hub.select(client="c", user="alice") == []
    assert hub.select(session="s1") == [b] and hub.session("s1") is b
    assert hub.user_connections("alice") == 2
    hub.remove_client(b)
    assert hub.session("s1") is None and hub.user_connections("alice") == 1


def test_one_publication_one_encoded_push_for_every_subscriber():
    hub = Hub()
    subs = [Recorder(str(i)) for i in range(3)]
    for sub in subs:
        assert hub.add_subscriber("ch", sub) is (sub is subs[0])
    assert hub.broadcast_publication("ch", Publication(b'{"x":1}', offset=4), "e") == 3
    pushes = {id(push) for sub in subs for _, push in sub.pushes}
    assert len(pushes) == 1
    assert subs[0].pushes[0][1].payload == b'{"push":{"channel":"ch","pub":{"data":{"x":1},"offset":4}}}'


def test_fanout_snapshot_follows_subscription_changes():
    hub = Hub()
    a, b = Recorder("a"), Recorder("b")
    hub.add_subscriber("ch", a)
    hub.broadcast_publication("ch", Publication(b"1"), "")
    hub.add_subscriber("ch", b)
    hub.broadcast_publication("ch", Publication(b"2"), "")
    assert hub.remove_subscriber("ch", a) is False
    hub.broadcast_publication("ch", Publication(b"3"), "")
    assert (len(a.pushes), len(b.pushes)) == (2, 2)
    assert hub.remove_subscriber("ch", b) is True and "ch" not in hub.channels
    assert hub.num_subscriptions == 0


def test_join_leave_push():
    hub = Hub()
    a = Recorder("a")
    hub.add_subscriber("ch", a)
    hub.broadcast_join_leave("ch", "leave", ClientInfo("u", "c"))
    assert a.pushes[0][1].payload == b'{"push":{"channel":"ch","leave":{"info":{"user":"u","client":"c"}}}}'


def test_ws_frames_are_built_once_per_shared_push():
    push = SharedPush(b"x" * 200)
    frame = framing.ws_frame([push.payload], push)
    assert frame[:4] == bytes((0x81, 126, 0, 200)) and frame[4:] == push.payload
    assert framing.ws_frame([push.payload], push) is frame  # cached on the push
    assert framing.ws_frame([b"a", b"b"], None) == bytes((0x81, 3)) + b"a\nb"
    big = framing.ws_text_frame(b"y" * 70000)
    assert big[:2] == bytes((0x81, 127)) and int.from_bytes(big[2:10], "big") == 70000


def test_mixed_protocols_one_encoded_push_per_codec_in_subscription_order():
    from gateway.protocol.protobuf.codec import PROTOBUF

    hub = Hub()
    clients = [Recorder(str(i), codec=PROTOBUF if i % 2 else JSON) for i in range(6)]
    for c in clients:
        hub.add_subscriber("ch", c)
    assert hub.broadcast_publication("ch", Publication(b'{"n":1}', 1), "e") == 6
    json_pushes = {id(c.pushes[0][1]) for c in clients if c.codec is JSON}
    pb_pushes = {id(c.pushes[0][1]) for c in clients if c.codec is PROTOBUF}
    assert len(json_pushes) == 1 and len(pb_pushes) == 1 and json_pushes != pb_pushes
    assert clients[0].pushes[0][1].payload == JSON.encode_publication("ch", Publication(b'{"n":1}', 1))
    assert clients[1].pushes[0][1].payload == PROTOBUF.encode_publication("ch", Publication(b'{"n":1}', 1))
    hub.broadcast_join_leave("ch", "join", ClientInfo("u", "c"))
    assert len({id(c.pushes[1][1]) for c in clients}) == 2


async def test_per_tick_join_and_frames_per_protocol():
    """Outboxes of both protocols flushed in one tick: each protocol's pushes are joined with its
    separator, once per identical sequence, and framed as text (JSON) or binary (Protobuf)."""
    from gateway.connection.sendqueue import Flusher, SendQueue
    from gateway.protocol.protobuf.codec import PROTOBUF

    class Wire:
        name, emulation, unidirectional = "websocket", False, False

        def __init__(self, codec: Codec) -> None:
            self.codec, self.frames, self.shared = codec, [], []

        def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
            self.shared.append(shared)
            self.frames.append(
                framing.ws_frame(payloads, shared, binary=self.codec.binary, separator=self.codec.separator)
            )

        def buffered_bytes(self) -> int:
            return 0

        def close(self, disconnect: codes.Disconnect) -> None: ...

    flusher = Flusher()
    pubs = [Publication(b'{"n":1}', 1), Publication(b'{"n":2}', 2)]
    pushes = {c.name: [SharedPush(c.encode_publication("ch", p)) for p in pubs] for c in (JSON, PROTOBUF)}
    wires = [Wire(c) for c in (JSON, PROTOBUF, JSON, PROTOBUF)]
    for wire in wires:
        send_queue = SendQueue(
            wire, flusher, limit_bytes=0, on_failure=lambda d: None, separator=wire.codec.separator
        )
        for push in pushes[wire.codec.name]:
            send_queue.put(push.payload, push)
    flusher._flush()
    json_a, pb_a, json_b, pb_b = wires
    assert json_a.shared[0] is json_b.shared[0] and pb_a.shared[0] is pb_b.shared[0]
    assert json_a.shared[0] is not pb_a.shared[0]
    assert json_a.shared[0].payload == b"\n".join(p.payload for p in pushes["json"])
    assert pb_a.shared[0].payload == b"".join(p.payload for p in pushes["protobuf"])
    assert json_a.frames[0][0] == 0x81 and pb_a.frames[0][0] == 0x82
    assert json_a.frames[0] is json_b.frames[0]  # one frame built per protocol
