"""Map subscriptions (Centrifugo v6.8+ subscription type ``map``) with the official centrifuge-js
(>= 5.8 ``newMapSubscription``), over JSON and Protobuf, on both engines: state pages, live
updates and removals, positioned recovery after a reconnect, the full re-sync of a streamless
(``ephemeral``) map, the tags filter of the first subscribe, and fossil delta per key
(``delta: 'fossil'``). One gateway per engine serves the module (map namespaces need their own
config).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import SECRET, Wire, standard_config
from tests.conformance.test_js_sdk import of, run_script
from tests.support import GatewayProcess, mint_token

pytestmark = pytest.mark.node

PAGES = {"default_page_size": 2, "min_page_size": 1, "max_page_size": 50}
MAP_NAMESPACES = [
    {
        "name": "tasks",
        "subscription_type": "map",
        "allow_subscribe_for_client": True,
        "allow_tags_filter": True,
        "map": {"mode": "recoverable", "key_ttl": "300s", **PAGES},
    },
    {
        "name": "room",
        "allow_subscribe_for_client": True,
        "map_clients_presence_channel_prefix": "mapclients:",
        "map_users_presence_channel_prefix": "mapusers:",
    },
    {
        "name": "mapclients",
        "subscription_type": "map_clients",
        "allow_subscribe_for_client": True,
        "map": {"mode": "recoverable", "key_ttl": "60s", **PAGES},
    },
    {
        "name": "mapusers",
        "subscription_type": "map_users",
        "allow_subscribe_for_client": True,
        "map": {"mode": "ephemeral", "key_ttl": "60s", **PAGES},
    },
    {
        "name": "cursors",
        "subscription_type": "map",
        "allow_subscribe_for_client": True,
        "map": {
            "mode": "recoverable",
            "key_ttl": "60s",
            "client_key": "client_id",
            "allow_publish_for_subscriber": True,
            "allow_remove_for_subscriber": True,
            "remove_client_on_unsubscribe": True,
            **PAGES,
        },
    },
    {
        "name": "board",
        "subscription_type": "map",
        "allow_subscribe_for_client": True,
        "map": {"mode": "ephemeral", "key_ttl": "300s", **PAGES},
    },
    {
        "name": "deltas",
        "subscription_type": "map",
        "allow_subscribe_for_client": True,
        "allowed_delta_types": ["fossil"],
        "map": {"mode": "recoverable", "key_ttl": "300s", **PAGES},
    },
]

WIRES = [Wire("json"), Wire("protobuf")]


@pytest.fixture(scope="module")
def map_gateway(tmp_path_factory: pytest.TempPathFactory, engine: dict[str, Any]) -> Iterator[GatewayProcess]:
    config = standard_config()
    config["channel"]["namespaces"] = [*config["channel"]["namespaces"], *MAP_NAMESPACES]
    config.update(copy.deepcopy(engine))
    gw = GatewayProcess(config, Path(tmp_path_factory.mktemp("map-gw"))).start()
    yield gw
    gw.terminate()


@pytest.fixture(params=WIRES, ids=[w.id for w in WIRES])
def wire(request: pytest.FixtureRequest) -> Wire:
    value: Wire = request.param
    return value


def _run(
    node_bin: str, gw: GatewayProcess, wire: Wire, channel: str, script: str = "map.mjs", **args: Any
) -> list[dict[str, Any]]:
    user = f"u{uuid.uuid4().hex[:6]}"
    return run_script(
        node_bin, script, gw, wire, channel=channel, user=user, token=mint_token(SECRET, user), **args
    )


def test_map_pages_state_goes_live_and_recovers_after_reconnect(node_bin, map_gateway, wire):
    channel = f"tasks:{uuid.uuid4().hex[:8]}"
    events = _run(node_bin, map_gateway, wire, channel, initial=7, pageSize=2, away=3)
    syncs = of(events, "map_sync")
    assert len(syncs) == 1  # recovered: no second sync
    assert [e["key"] for e in syncs[0]["entries"]] == [f"k{i:03d}" for i in range(1, 8)]
    assert syncs[0]["entries"][1]["data"] == {"n": 2}
    updates = of(events, "map_update")
    keys = [(u["key"], u["removed"]) for u in updates]
    assert keys == [("k900", False), ("k002", False), ("k001", True), ("a1", False), ("a2", False),
                    ("a3", False), ("k902", False)]  # fmt: skip
    assert updates[1]["data"] == {"n": 2002}
    offsets = [u["offset"] for u in updates]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    resub = of(events, "subscribed")
    assert resub[0]["recovered"] is False and resub[1]["recovered"] is True


def test_ephemeral_map_resyncs_the_whole_state_after_reconnect(node_bin, map_gateway, wire):
    channel = f"board:{uuid.uuid4().hex[:8]}"
    events = _run(node_bin, map_gateway, wire, channel, initial=3, pageSize=2, away=2, expectResync=True)
    syncs = of(events, "map_sync")
    assert len(syncs) == 2
    assert sorted(e["key"] for e in syncs[1]["entries"]) == ["a1", "a2", "k002", "k003", "k900"]
    assert of(events, "subscribed")[1]["recoverable"] is False


def test_map_tags_filter_of_the_first_subscribe(node_bin, map_gateway, wire):
    channel = f"tasks:{uuid.uuid4().hex[:8]}"
    even = {"key": "parity", "cmp": "eq", "val": "even"}
    events = _run(node_bin, map_gateway, wire, channel, initial=6, pageSize=2, away=2, tagsFilter=even)
    assert [e["key"] for e in of(events, "map_sync")[0]["entries"]] == ["k002", "k004", "k006"]
    assert [u["key"] for u in of(events, "map_update")] == ["k900", "k002", "a2", "k902"]


def test_map_presence_of_clients_and_users(node_bin, map_gateway, wire):
    channel = f"room:{uuid.uuid4().hex[:8]}"
    events = run_script(
        node_bin,
        "map_presence.mjs",
        map_gateway,
        wire,
        channel=channel,
        clientsChannel=f"mapclients:{channel}",
        usersChannel=f"mapusers:{channel}",
        tokenA=mint_token(SECRET, "watcher"),
        tokenB=mint_token(SECRET, "bob"),
    )
    client = of(events, "b_connected")[0]["client"]
    clients = of(events, "presence_update", map="clients")
    assert [(u["key"], u["removed"]) for u in clients] == [(client, False), (client, True)]
    assert clients[0]["user"] == "bob" and clients[0]["client"] == client
    users = of(events, "presence_update", map="users")
    assert [(u["key"], u["removed"]) for u in users] == [("bob", False)]


def test_client_map_writes_by_permission(node_bin, map_gateway, wire):
    channel = f"cursors:{uuid.uuid4().hex[:8]}"
    events = run_script(
        node_bin,
        "map_write.mjs",
        map_gateway,
        wire,
        channel=channel,
        deniedChannel=f"tasks:{uuid.uuid4().hex[:8]}",
        tokenA=mint_token(SECRET, "watcher"),
        tokenB=mint_token(SECRET, "writer"),
    )
    client = of(events, "writer_connected")[0]["client"]
    updates = [(u["key"], u["removed"], u["data"]) for u in of(events, "map_update")]
    assert updates == [
        (client, False, {"x": 1}),
        (client, True, None),
        (client, False, {"x": 2}),
        (client, True, None),
    ]
    assert of(events, "map_update")[0]["user"] == "writer"
    assert of(events, "denied_write")[0]["code"] == 103


def test_map_fossil_delta_per_key(node_bin, map_gateway, wire):
    """``delta: 'fossil'``: the SDK rebuilds every value from per-key deltas (live, and in the
    recovered batch after a reconnect) and its stats count the deltas the wire carried: live
    k001 ×2, k002, the second k001 of the recovered batch (its first change goes whole), and
    k002 after the resubscribe. A removal goes whole (``data`` ""), a new key whole."""
    channel = f"deltas:{uuid.uuid4().hex[:8]}"
    events = _run(node_bin, map_gateway, wire, channel, "map_delta.mjs")
    state = {e["key"]: e["data"] for e in of(events, "map_sync")[0]["entries"]}
    assert sorted(state) == ["k001", "k002", "k003", "k004"]
    for update in of(events, "map_update"):
        if update["removed"]:
            del state[update["key"]]
        else:
            state[update["key"]] = update["data"]
    assert state == of(events, "written")[0]["values"]
    assert [u["data"]["n"] for u in of(events, "map_update", key="k001")] == [101, 201, 301, 401]
    assert of(events, "subscribed")[1]["recovered"] is True
    stats = of(events, "delta_stats")[0]
    assert stats["numDeltaPayloads"] == 5, stats
    assert stats["bytesDecoded"] - stats["bytesReceived"] > 5 * 250, stats  # ~360-byte values
