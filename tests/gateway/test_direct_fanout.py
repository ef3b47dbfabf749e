"""The hub's direct fan-out (gateway/hub.py ``Connection.direct_target``) in-process: a live
subscription without position, delta or tags filter is queued to by the hub itself, and the
direct path keeps every guarantee of ``on_publication``: an unsubscribed (or replaced)
subscription gets nothing even before the hub forgets it, a closed connection gets nothing, a
subscriber that goes live after the snapshot was taken is queued directly from then on, and
positioned subscriptions keep their position checks. A real Node on the memory engine,
recording transports."""

from __future__ import annotations

from gateway.hub import DirectTarget, Hub, SharedPush
from gateway.protocol.messages import Publication
from tests.gateway.recording import INSECURE, Harness, until
from tests.gateway.test_hub import Recorder


def _direct(h: Harness, channel: str) -> int:
    """How many subscribers the current fan-out snapshot of ``channel`` queues to directly."""
    groups = h.node.hub._fanout.get(channel, ())
    return sum(len(direct) for _, direct, _ in groups)


async def test_plain_live_subscribers_are_queued_directly_and_in_order() -> None:
    h = Harness()
    conns = [await h.subscribed("hot") for _ in range(3)]
    for _, t in conns:
        t.clear()
    for n in range(3):
        h.node.on_publication("hot", Publication(b"%d" % n), None)
    assert _direct(h, "hot") == 3
    await until(lambda: all(len(t.messages()) == 3 for _, t in conns))
    for _, t in conns:
        assert [m["push"]["pub"]["data"] for m in t.messages()] == [0, 1, 2]
        assert len(t.writes) == 1  # one write per connection per tick


async def test_an_unsubscribed_subscription_gets_nothing_before_the_hub_forgets_it() -> None:
    h = Harness()
    (a, ta), (_, tb) = await h.subscribed("hot"), await h.subscribed("hot")
    h.node.on_publication("hot", Publication(b"1"), None)  # builds the snapshot: both direct
    await until(lambda: bool(ta.messages()[-1:]) and "push" in ta.messages()[-1])
    ta.clear()
    tb.clear()
    # The session dropped the subscription (unsubscribe) while its release (which removes it
    # from the hub) has not run yet: the snapshot still lists it.
    assert a.session.remove_subscription("hot") is not None
    assert _direct(h, "hot") == 2
    h.node.on_publication("hot", Publication(b"2"), None)
    await until(lambda: bool(tb.messages()))
    assert ta.messages() == []


async def test_a_closed_connection_gets_nothing_from_the_direct_path() -> None:
    h = Harness()
    (a, ta), (_, tb) = await h.subscribed("hot"), await h.subscribed("hot")
    h.node.on_publication("hot", Publication(b"1"), None)
    await until(lambda: bool(ta.messages()) and bool(tb.messages()))
    a.connection_lost()  # send queue closed; the hub entry goes with the async release
    ta.clear()
    tb.clear()
    h.node.on_publication("hot", Publication(b"2"), None)
    await until(lambda: bool(tb.messages()))
    assert ta.writes == []


class Late(Recorder):
    """A connection whose subscription goes live later: no direct target until ``live``."""

    def __init__(self) -> None:
        super().__init__("late")
        self.table: dict[str, object] = {"c": object()}
        self.queued: list[bytes] = []
        self.live = False

    def direct_target(self, channel: str) -> DirectTarget | None:  # type: ignore[override]
        return (self.table, self.table[channel], self) if self.live else None

    def put(self, payload: bytes, shared: SharedPush | None = None) -> None:
        self.queued.append(payload)

    def put_now(self, payload: bytes, shared: SharedPush) -> None:
        self.queued.append(payload)


def test_a_subscriber_that_goes_live_after_the_snapshot_is_queued_directly() -> None:
    hub = Hub()
    late = Late()
    hub.add_subscriber("c", late)
    hub.broadcast_publication("c", Publication(b"1"), "")  # snapshot: not live yet
    late.live = True
    hub.broadcast_publication("c", Publication(b"2"), "")
    assert len(late.pushes) == 2 and late.queued == []  # through on_publication
    hub.refresh_fanout("c")  # what the connection calls when it goes live
    hub.broadcast_publication("c", Publication(b"3"), "")
    assert len(late.pushes) == 2 and len(late.queued) == 1  # queued directly


async def test_positioned_subscriptions_keep_the_position_check() -> None:
    h = Harness(dict(INSECURE, TASKCAST_CHANNEL_WITHOUT_NAMESPACE_FORCE_POSITIONING="true"))
    _, t = await h.subscribed("hot")  # history on: positioned
    opts = h.settings.channel_options("hot")
    assert opts is not None
    await h.node.publish("hot", opts, b"1")
    assert _direct(h, "hot") == 0
    assert (await t.push("pub"))["pub"]["offset"] == 1
