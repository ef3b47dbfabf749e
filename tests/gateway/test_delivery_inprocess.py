"""Per-subscription delivery in-process (gateway/connection/delivery.py): the tags filter and fossil delta
compression on a real Node (memory engine) with recording transports."""

from __future__ import annotations

import orjson
import pytest

from gateway.protocol import codes, fossil
from tests.gateway.recording import INSECURE, Harness, until

FILTERED = {**INSECURE, "TASKCAST_CHANNEL_NAMESPACES": '[{"name": "ff", "allow_tags_filter": true}]'}
DELTA = {
    **INSECURE,
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_ALLOWED_DELTA_TYPES": '["fossil"]',
    "TASKCAST_CHANNEL_WITHOUT_NAMESPACE_DELTA_PUBLISH": "true",
}
GOALS = {"key": "type", "cmp": "eq", "val": "goal"}


def pubs_of(transport) -> list[dict[str, object]]:
    return [m["push"]["pub"] for m in transport.messages() if "pub" in m.get("push", {})]


def subscribe_reply(transport) -> dict[str, object]:
    (reply,) = [m["subscribe"] for m in transport.messages() if m.get("id") == 2]
    return reply


async def publish(h: Harness, channel: str, data: object, tags: dict[str, str] | None = None) -> None:
    opts = h.settings.channel_options(channel)
    assert opts is not None
    await h.node.publish(channel, opts, orjson.dumps(data), tags=tags)


async def test_tags_filter_delivers_only_matching_publications():
    h = Harness(FILTERED)
    _client, transport = await h.subscribed("ff:match", tf=GOALS)
    await publish(h, "ff:match", {"n": 1}, {"type": "foul"})
    await publish(h, "ff:match", {"n": 2}, {"type": "goal"})
    await publish(h, "ff:match", {"n": 3})
    await publish(h, "ff:match", {"n": 4}, {"type": "goal"})
    await publish(h, "ff:match", {"n": 5}, {"type": "goal"})
    await until(lambda: len(pubs_of(transport)) >= 3)
    assert [p["data"] for p in pubs_of(transport)] == [{"n": 2}, {"n": 4}, {"n": 5}]


async def test_tags_filter_needs_allow_tags_filter_and_a_valid_tree():
    h = Harness(FILTERED)
    client, transport = await h.connected()
    client.feed(orjson.dumps({"id": 2, "subscribe": {"channel": "plain", "tf": GOALS}}))
    assert (await transport.reply(2))["error"]["code"] == codes.ERROR_BAD_REQUEST.code
    client.feed(orjson.dumps({"id": 3, "subscribe": {"channel": "ff:x", "tf": {"key": "a", "cmp": "zz"}}}))
    assert (await transport.reply(3))["error"]["code"] == codes.ERROR_BAD_REQUEST.code


async def test_tags_filter_applies_to_recovered_publications():
    env = {
        **INSECURE,
        "TASKCAST_CHANNEL_NAMESPACES": (
            '[{"name": "ff", "allow_tags_filter": true, "history_size": 10, "history_ttl": "60s",'
            ' "force_recovery": true}]'
        ),
    }
    h = Harness(env)
    _client, transport = await h.subscribed("ff:r")
    epoch = subscribe_reply(transport)["epoch"]
    for n, kind in enumerate(["goal", "foul", "goal"]):
        await publish(h, "ff:r", {"n": n}, {"type": kind})
    other, t2 = await h.connected()
    other.feed(
        orjson.dumps(
            {
                "id": 2,
                "subscribe": {"channel": "ff:r", "recover": True, "epoch": epoch, "offset": 0, "tf": GOALS},
            }
        )
    )
    reply = (await t2.reply(2))["subscribe"]
    assert reply["recovered"] is True
    assert [p["data"] for p in reply["publications"]] == [{"n": 0}, {"n": 2}]


async def test_delta_negotiated_first_full_then_deltas_reconstruct_exactly():
    h = Harness(DELTA)
    _client, transport = await h.subscribed("progress", delta="fossil")
    assert subscribe_reply(transport)["delta"] is True
    _plain_client, plain = await h.subscribed("progress")
    state = {"task": "t", "steps": [{"name": f"step {i}", "progress": 0} for i in range(40)]}
    sent = []
    for n in range(5):
        state["steps"][n]["progress"] = 100
        sent.append(orjson.dumps(state))
        await h.node.publish("progress", h.settings.channel_options("progress"), sent[-1])
    await until(lambda: len(pubs_of(transport)) == 5 and len(pubs_of(plain)) == 5)
    got = pubs_of(transport)
    assert "delta" not in got[0]  # the first publication after subscribe is full
    assert all(p.get("delta") is True for p in got[1:])
    value = b""
    for pub, expected in zip(got, sent, strict=True):
        wire = str(pub["data"]).encode()
        value = fossil.apply(value, wire) if pub.get("delta") else wire
        assert value == expected
    assert sum(len(str(p["data"])) for p in got[1:]) < len(sent[1]) // 4
    # A subscriber that did not ask for delta gets plain JSON data.
    assert [orjson.dumps(p["data"]) for p in pubs_of(plain)] == sent


async def test_publications_above_the_delta_size_go_in_full():
    h = Harness(DELTA)
    _client, transport = await h.subscribed("progress", delta="fossil")
    opts = h.settings.channel_options("progress")
    small = b'{"s":"' + b"x" * 1000 + b'"}'
    big = b'{"s":"' + b"x" * fossil.MAX_SIZE + b'"}'
    for data in (small, small.replace(b"x", b"y", 1), big, big.replace(b"x", b"y", 1)):
        await h.node.publish("progress", opts, data)
    await until(lambda: len(pubs_of(transport)) == 4)
    assert [p.get("delta", False) for p in pubs_of(transport)] == [False, True, False, False]


async def test_delta_is_computed_once_per_publication():
    h = Harness(DELTA)
    conns = [await h.subscribed("p", delta="fossil") for _ in range(3)]
    for n in range(3):
        await h.node.publish("p", h.settings.channel_options("p"), orjson.dumps({"n": n, "pad": "x" * 200}))
    await until(lambda: all(len(pubs_of(t)) == 3 for _, t in conns))
    frames = [[id(w) for payloads, _ in t.writes for w in payloads] for _, t in conns]
    # The same delta push object (bytes) is queued to every delta subscriber.
    shared = set(frames[0][-2:]) & set(frames[1][-2:]) & set(frames[2][-2:])
    assert len(shared) == 2


async def test_delta_not_negotiated_when_not_allowed_and_unknown_type_disconnects():
    h = Harness(INSECURE)
    _client, transport = await h.subscribed("p", delta="fossil")
    assert "delta" not in subscribe_reply(transport)
    other, t2 = await h.connected()
    other.feed(orjson.dumps({"id": 2, "subscribe": {"channel": "p", "delta": "xdelta"}}))
    assert await t2.closed_with() == codes.DISCONNECT_BAD_REQUEST


@pytest.mark.parametrize(
    "data", [b'{"a":"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9x"}']
)
async def test_delta_falls_back_to_full_when_not_worth_it(data):
    h = Harness(DELTA)
    _client, transport = await h.subscribed("p", delta="fossil")
    await h.node.publish("p", h.settings.channel_options("p"), b'{"z":1}')
    await h.node.publish("p", h.settings.channel_options("p"), data)
    await until(lambda: len(pubs_of(transport)) == 2)
    last = pubs_of(transport)[-1]
    assert "delta" not in last and str(last["data"]).encode() == data


@pytest.mark.parametrize("binary", [False, True], ids=["json", "protobuf"])
def test_delta_forms_are_never_conflated(binary: bool) -> None:
    """A delta subscription's pushes carry no conflation key: a backed-up connection that dropped
    one for a newer publication of the same key would leave the client applying the next delta
    to the wrong base."""
    from gateway.connection.delivery import delta_push
    from gateway.hub import SharedPush
    from gateway.protocol.codec import JSON
    from gateway.protocol.messages import Publication
    from gateway.protocol.protobuf.codec import PROTOBUF
    from gateway.protocol.subscription import Subscription

    wire = PROTOBUF if binary else JSON
    sub = Subscription("progress", "", delta=True)
    first = Publication(b'{"pct": 10, "label": "parsing page 1 of 40"}', 1, delta=True)
    second = Publication(b'{"pct": 20, "label": "parsing page 2 of 40"}', 2, delta=True)
    sent = []
    for pub, prev in ((first, None), (second, (1, "e", first.data))):
        push = SharedPush(
            wire.encode_publication("progress", pub), "progress", "e", prev, conflation="task-1"
        )
        sent.append(delta_push(sub, pub, push, wire))
    assert [p.conflation for p in sent] == [None, None]
    assert sent[1].payload != sent[0].payload  # the second went as a delta against the first
