"""Map subscriptions at the wire, in-process (a real Node on the memory engine with its map
engine, recording transports): a state read in pages stays consistent with the stream position
of its first page while changes land between pages, fossil delta is negotiated as Centrifugo
does (namespace ``allowed_delta_types``, no tags filter) and sends per-key deltas, and
malformed or out-of-place map commands get Centrifugo's codes, retain nothing and leave the node
serving others."""

from __future__ import annotations

import json
from typing import Any

import orjson

from gateway.engine.map_memory import MemoryMapBroker
from gateway.maps.options import resolve
from gateway.maps.state import MapChange
from gateway.protocol import fossil
from tests.gateway.recording import INSECURE, Harness, RecordingTransport
from tests.support import mint_token

PAGES = {
    "default_page_size": 2,
    "min_page_size": 1,
    "max_page_size": 10,
    "live_transition_max_publication_limit": 3,
}
ENV = {
    **INSECURE,
    "TASKCAST_CHANNEL_NAMESPACES": json.dumps(
        [
            {
                "name": "tasks",
                "subscription_type": "map",
                "map": {"mode": "persistent", "stream_size": 4, **PAGES},
            },
            {
                "name": "board",
                "subscription_type": "map",
                "map": {"mode": "ephemeral", "key_ttl": "60s", **PAGES},
            },
            {
                "name": "deltas",
                "subscription_type": "map",
                "allowed_delta_types": ["fossil"],
                "allow_tags_filter": True,
                "map": {"mode": "persistent", "stream_size": 10, **PAGES},
            },
            {"name": "plain"},
        ]
    ),
}


def harness() -> Harness:
    h = Harness(ENV)
    h.node.attach_maps(MemoryMapBroker())
    return h


async def write(h: Harness, channel: str, key: str, n: int, *, delta: bool = False) -> None:
    """``{"n": n}``; with ``delta`` (a write allowing delta), padded so a delta is smaller."""
    opts = h.settings.channel_options(channel)
    assert opts is not None and h.node.maps is not None
    data = b'{"n":%d,"pad":"%s"}' % (n, b"x" * 60) if delta else b'{"n":%d}' % n
    await h.node.maps.publish(channel, MapChange(key, data, delta=delta), resolve(opts.map))


class Conn:
    def __init__(self, client: Any, transport: RecordingTransport) -> None:
        self.client, self.transport, self.next_id = client, transport, 10

    async def sub(self, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.client.feed(orjson.dumps({"id": self.next_id, "subscribe": {"type": 1, **params}}))
        return await self.transport.reply(self.next_id)


async def connected(h: Harness) -> Conn:
    client, transport = await h.connected()
    return Conn(client, transport)


def keys(entries: list[dict[str, Any]] | None) -> list[str]:
    return [e["key"] for e in entries or []]


async def test_pages_are_consistent_with_the_position_of_the_first_page() -> None:
    h = harness()
    ch = "tasks:p"
    for i, key in enumerate(["a", "b", "c", "d"], 1):
        await write(h, ch, key, i)
    conn = await connected(h)
    first = (await conn.sub(channel=ch, phase=2, limit=2))["subscribe"]
    assert first["type"] == 1 and first["phase"] == 2 and first["offset"] == 4 and first["cursor"] == "b"
    assert keys(first["state"]) == ["a", "b"]
    epoch = first["epoch"]
    await write(h, ch, "a", 10)  # already paged: its change comes through the stream
    await write(h, ch, "d", 11)  # not yet paged: left out of the page, from the stream
    second = (await conn.sub(channel=ch, phase=2, limit=2, cursor="b", offset=4, epoch=epoch))["subscribe"]
    # The last page: the stream moved by 2 <= a page since the first page, so it goes live.
    assert second.get("phase", 0) == 0 and second["epoch"] == epoch and second["offset"] == 6
    assert keys(second["state"]) == ["c"]
    assert [(p["key"], p["offset"], p["data"]) for p in second["publications"]] == [
        ("a", 5, {"n": 10}),
        ("d", 6, {"n": 11}),
    ]
    assert conn.client.maps._pending == {}
    await write(h, ch, "e", 12)
    pub = await conn.transport.push("pub")
    assert pub["pub"] == {"data": {"n": 12}, "offset": 7, "key": "e"}
    await h.node.maps.remove(ch, "e", resolve(h.settings.channel_options(ch).map))  # type: ignore[union-attr]
    removal = await conn.transport.push("pub")
    assert removal["pub"] == {"offset": 8, "key": "e", "removed": True}


async def test_stream_pages_then_live_and_a_recovery_from_a_stored_position() -> None:
    h = harness()
    ch = "tasks:s"
    await write(h, ch, "a", 1)
    conn = await connected(h)
    first = (await conn.sub(channel=ch, phase=2, limit=5))["subscribe"]  # one page: live at once
    assert first.get("phase", 0) == 0 and keys(first["state"]) == ["a"] and first["recoverable"] is True
    epoch = first["epoch"]
    other = await connected(h)
    for i in range(2, 5):
        await write(h, ch, "a", i)
    # A client that stored offset 1 recovers: the stream (3 changes) is within the replay limit.
    rec = (await other.sub(channel=ch, phase=1, recover=True, offset=1, epoch=epoch, limit=1))["subscribe"]
    assert rec["phase"] == 1 and rec["offset"] == 2  # one stream page (limit 1): 1 + 1 < top 4
    live = (await other.sub(channel=ch, phase=1, recover=True, offset=2, epoch=epoch, limit=1))["subscribe"]
    assert live.get("phase", 0) == 1 or live.get("phase", 0) == 0
    while live.get("phase", 0) == 1:
        live = (
            await other.sub(channel=ch, phase=1, recover=True, offset=live["offset"], epoch=epoch, limit=1)
        )["subscribe"]
    assert live["recovered"] is True and live["offset"] == 4


async def test_bad_map_commands_get_centrifugo_codes_and_retain_nothing() -> None:
    h = harness()
    await write(h, "tasks:x", "a", 1)
    for i in range(6):
        await write(h, "tasks:lost", f"k{i}", i)  # the stream keeps 4: offsets 1, 2 are gone
    conn = await connected(h)

    async def code(**params: Any) -> int:
        reply = await conn.sub(**params)
        assert "error" in reply, reply
        assert conn.client.maps._pending == {} and "tasks:x" not in conn.client.session.subscriptions
        return int(reply["error"]["code"])

    assert await code(channel="plain:x", phase=2) == 107  # not a map namespace
    assert await code(channel="tasks:x", type=0) == 107  # a stream subscribe to a map
    assert await code(channel="tasks:x", phase=2, cursor="a") == 103  # a continuation without a flow
    assert await code(channel="tasks:x", phase=1) == 103  # a stream page without a flow, not recovering
    assert await code(channel="tasks:x", phase=7) == 107  # no such phase
    assert await code(channel="board:x", phase=1, recover=True) == 107  # an ephemeral map has no stream
    assert await code(channel="tasks:x", phase=2, offset=1, epoch="another") == 112  # another epoch
    assert await code(channel="tasks:x", phase=1, recover=True, offset=1, epoch="another") == 112
    lost = (await conn.sub(channel="tasks:lost", phase=2, limit=1))["subscribe"]
    assert await code(channel="tasks:lost", phase=1, recover=True, offset=1, epoch=lost["epoch"]) == 112
    assert (
        await code(channel="tasks:x", phase=2, tf={"key": "k", "cmp": "eq", "val": "v"}) == 107
    )  # not allowed
    conn.client.feed(b'{"id":98,"publish":{"channel":"tasks:x","data":{}}}')
    assert (await conn.transport.reply(98))["error"]["code"] == 103  # a map takes map writes (type 1)
    conn.client.feed(b'{"id":99,"publish":{"channel":"plain:x","data":{},"type":1,"key":"k"}}')
    assert (await conn.transport.reply(99))["error"]["code"] == 107  # a map write to a stream channel
    # The connection and the node still serve: a full subscribe goes live.
    ok = (await conn.sub(channel="tasks:x", phase=2))["subscribe"]
    assert ok.get("phase", 0) == 0 and keys(ok["state"]) == ["a"]
    assert (await conn.sub(channel="tasks:x", phase=2)).get("error", {}).get("code") == 105


async def test_a_malformed_map_command_closes_the_connection_with_3501() -> None:
    h = harness()
    conn = await connected(h)
    conn.client.feed(b'{"id":5,"subscribe":{"channel":"tasks:x","type":1,"phase":2,"cursor":5}}')
    assert (await conn.transport.closed_with()).code == 3501
    other = await connected(h)
    assert (await other.sub(channel="tasks:x", phase=2))["subscribe"]["type"] == 1


async def test_a_change_lost_on_the_way_is_detected_by_the_position_check() -> None:
    h = harness()
    conn = await connected(h)
    assert (await conn.sub(channel="tasks:c", phase=2))["subscribe"]["type"] == 1
    maps = h.node.maps
    assert isinstance(maps, MemoryMapBroker)
    maps.set_handler(None)  # type: ignore[arg-type]  # the delivery is lost (a PUB/SUB outage)
    await write(h, "tasks:c", "a", 1)
    maps.set_handler(h.node)
    assert await h.node.positions.check(idle_for=0.0) == 1
    push = await conn.transport.push("unsubscribe")
    assert push == {"channel": "tasks:c", "unsubscribe": {"code": 2500, "reason": "insufficient state"}}


async def test_a_flow_past_its_catch_up_timeout_is_disconnected_and_abandoned_flows_are_dropped() -> None:
    h = harness()
    for key in ("a", "b", "c"):
        await write(h, "tasks:t", key, 1)
        await write(h, "tasks:u", key, 1)
    conn = await connected(h)
    first = (await conn.sub(channel="tasks:t", phase=2, limit=1))["subscribe"]
    assert first["phase"] == 2 and set(conn.client.maps._pending) == {"tasks:t"}
    (await conn.sub(channel="tasks:u", phase=2, limit=1))["subscribe"]
    conn.client.maps._pending["tasks:u"].started_at -= 31  # abandoned past the 30 s default
    (await conn.sub(channel="tasks:v", phase=2, limit=1))  # a new flow sweeps it
    assert set(conn.client.maps._pending) == {"tasks:t"}
    conn.client.maps._pending["tasks:t"].started_at -= 31
    page = {"type": 1, "channel": "tasks:t", "phase": 2, "cursor": first["cursor"], "limit": 1}
    conn.client.feed(orjson.dumps({"id": 50, "subscribe": page}))
    assert (await conn.transport.closed_with()).code == 3008


async def test_a_server_side_subscription_to_a_map_channel_is_a_stream_subscription() -> None:
    """As in Centrifugo (connect token ``channels`` and the server API ``subscribe`` go through
    centrifuge's stream subscribe, with no map type): the subscriber gets no state, and each
    change as a publication with its ``key`` (``removed`` for a removal)."""
    secret = "map-server-side-secret-of-32-bytes-or-more"
    h = Harness({**ENV, "TASKCAST_CLIENT_TOKEN_HMAC_SECRET_KEY": secret})
    h.node.attach_maps(MemoryMapBroker())
    ch = "tasks:srv"
    await write(h, ch, "before", 1)
    token = mint_token(secret, "u1", channels=[ch])
    _, transport = await h.connected(orjson.dumps({"id": 1, "connect": {"token": token}}))
    reply = transport.messages()[0]["connect"]
    assert list(reply["subs"]) == [ch] and "state" not in reply["subs"][ch]
    await write(h, ch, "k", 2)
    opts = h.settings.channel_options(ch)
    assert opts is not None and h.node.maps is not None
    await h.node.maps.remove(ch, "k", resolve(opts.map))
    pubs = [await transport.push("pub") for _ in range(2)]
    assert [(p["channel"], p["pub"].get("key"), p["pub"].get("removed", False)) for p in pubs] == [
        (ch, "k", False),
        (ch, "k", True),
    ]
    assert json.loads(orjson.dumps(pubs[0]["pub"]["data"])) == {"n": 2}


async def test_fossil_delta_is_negotiated_by_the_namespace_and_sent_per_key() -> None:
    h = harness()
    for ch in ("tasks:d", "deltas:d"):
        await write(h, ch, "a", 1, delta=True)
        await write(h, ch, "b", 2, delta=True)
    conn = await connected(h)
    plain = (await conn.sub(channel="tasks:d", phase=2, limit=5, delta="fossil"))["subscribe"]
    assert "delta" not in plain and plain["state"][0]["data"]["n"] == 1  # not allowed: as it is
    filtered = await conn.sub(
        channel="deltas:d", phase=2, limit=5, delta="fossil", tf={"key": "t", "cmp": "eq", "val": "x"}
    )
    assert "delta" not in filtered["subscribe"]  # with a tags filter: none (keys may be hidden)
    other = await connected(h)
    assert "delta" not in (await other.sub(channel="deltas:d", phase=2, limit=5, delta="xdelta"))["subscribe"]
    client = await connected(h)
    live = (await client.sub(channel="deltas:d", phase=2, limit=5, delta="fossil"))["subscribe"]
    assert live["delta"] is True
    held = {e["key"]: e["data"].encode() for e in live["state"]}  # JSON strings: the exact bytes
    assert orjson.loads(held["a"])["n"] == 1
    await write(h, "deltas:d", "a", 3, delta=True)  # against a's value, not b's
    await write(h, "deltas:d", "c", 4, delta=True)  # a new key: whole
    await write(h, "deltas:d", "b", 5)  # a write without delta: whole
    pubs = [(await client.transport.push("pub"))["pub"] for _ in range(3)]
    assert [(p["key"], p.get("delta", False)) for p in pubs] == [("a", True), ("c", False), ("b", False)]
    assert orjson.loads(fossil.apply(held["a"], pubs[0]["data"].encode()))["n"] == 3
    assert orjson.loads(pubs[1]["data"])["n"] == 4 and orjson.loads(pubs[2]["data"])["n"] == 5
    await h.node.maps.remove("deltas:d", "c", resolve(h.settings.channel_options("deltas:d").map))  # type: ignore[union-attr]
    assert (await client.transport.push("pub"))["pub"] == {
        "offset": 6,
        "key": "c",
        "removed": True,
        "data": "",
    }
    epoch = live["epoch"]
    late = await connected(h)
    page = await late.sub(
        channel="deltas:d", phase=1, recover=True, offset=1, epoch=epoch, limit=1, delta="fossil"
    )
    assert page["subscribe"]["phase"] == 1  # a stream page: values as JSON strings too
    assert orjson.loads(page["subscribe"]["publications"][0]["data"])["n"] == 2
