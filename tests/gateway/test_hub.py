"""The hub in-process, with plain recording connections: registry lookups (no downcasts), the
fan-out snapshot, and frames built once per shared push (gateway/transports/framing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.hub import Connection, Hub, SharedPush
from gateway.protocol import codes
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition, SubscribeRecovery
from gateway.protocol.policy import ServerSub
from gateway.transports import framing


@dataclass
class Recorder:
    """A minimal ``Connection``: records what the hub hands it."""

    client_id: str
    user: str = ""
    session_id: str = ""
    pushes: list[tuple[str, SharedPush]] = field(default_factory=list)

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        self.pushes.append((channel, push))

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None:
        self.pushes.append((key, push))

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
