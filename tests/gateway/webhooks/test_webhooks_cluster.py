"""Lifecycle webhooks end to end: three gateway processes on one Redis POST to a real HTTP
receiver (a stdlib server in this process) that checks every request's signature with the
verifier docs/webhooks.md prints. Channel occupancy is decided once across the nodes; a receiver
outage is retried and never slows a client, and its bounded queue drops (and counts) the
overflow; a node killed with -9 has its channel vacated by a surviving node.

The processes are shared by the module's tests (each uses channels of its own); the last two
stop node B gracefully and kill node C."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.gateway.webhooks.receiver import Receiver, serving
from tests.helpers.raw_client import Raw
from tests.helpers.redis_engine import unique_prefix
from tests.support import GatewayProcess, mint_token, scaled, wait_until

pytestmark = pytest.mark.redis

SECRET = "webhooks-token-secret-0123456789abcdef"
HOOK_SECRET = "webhooks-hmac-secret-fedcba9876543210"
GRACE_MS = 500


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with serving(HOOK_SECRET) as recv:
        yield recv


def _config(redis_url: str, prefix: str, receiver_url: str, name: str) -> dict[str, Any]:
    fast = {"retry_min_backoff": "50ms", "retry_max_backoff": "200ms"}
    return {
        "node": {"name": name},
        "client": {"token": {"hmac_secret_key": SECRET}},
        "prometheus": {"enabled": True},
        "engine": {"type": "redis", "redis": {"address": redis_url, "prefix": prefix, "io_timeout": "1s"}},
        "channel": {
            "without_namespace": {"presence": True, "allow_subscribe_for_client": True},
            "namespaces": [{"name": "outage", "allow_subscribe_for_client": True}],
        },
        "webhooks": [
            {
                "name": "main",
                "url": f"{receiver_url}/main",
                "secret": HOOK_SECRET,
                "namespaces": [""],
                **fast,
            },
            {
                "name": "flaky",
                "url": f"{receiver_url}/flaky",
                "secret": HOOK_SECRET,
                "events": ["subscribe"],
                "namespaces": ["outage"],
                "queue_size": 5,
                "max_batch_size": 2,
                "timeout": "500ms",
                **fast,
            },
        ],
        # node_ttl: long enough that a node starved by a loaded machine is not taken for dead.
        "occupancy": {
            "vacated_grace": f"{GRACE_MS}ms",
            "node_ttl": f"{scaled(3)}s",
            "sweep_interval": "200ms",
        },
    }


@dataclass
class Node:
    gw: GatewayProcess
    uid: str


@pytest.fixture(scope="module")
def nodes(
    redis_url: str, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Node]]:
    """Nodes A, B and C on one Redis prefix (C is killed by the last test)."""
    prefix = unique_prefix()
    workdir = tmp_path_factory.mktemp("webhooks")
    started: list[GatewayProcess] = []
    try:
        for name in ("a", "b", "c"):
            started.append(
                GatewayProcess(_config(redis_url, prefix, receiver.url, name), workdir / name).start()
            )
        yield [
            Node(gw, next(n["uid"] for n in gw.nodes() if n["name"] == name))
            for gw, name in zip(started, "abc", strict=True)
        ]
    finally:
        for gw in started:
            gw.terminate()


@asynccontextmanager
async def client(node: Node, user: str) -> AsyncIterator[Raw]:
    async with connect(node.gw.ws_url) as ws:
        raw = Raw(ws)
        task = asyncio.create_task(raw.pump())
        try:
            reply = await raw.call("connect", {"token": mint_token(SECRET, user)})
            assert "connect" in reply, reply
            yield raw
        finally:
            await ws.close()
            await task


async def subscribe(raw: Raw, channel: str) -> None:
    reply = await raw.call("subscribe", {"channel": channel})
    assert "subscribe" in reply, reply


async def arrived(
    receiver: Receiver, what: str, count: int = 1, path: str = "/main", **match: Any
) -> list[dict[str, Any]]:
    """Waits until ``count`` distinct events matching ``match`` were POSTed to ``path``."""
    return await wait_until(
        lambda: (found := receiver.events(path, **match)) and len(found) >= count and found, what=what
    )  # type: ignore[no-any-return]


async def metric(node: Node, name: str, webhook: str) -> float:
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        text = (await http.get(f"{node.gw.internal_url}/metrics")).text
    for line in text.splitlines():
        if line.startswith(f'{name}{{webhook="{webhook}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_channel_is_occupied_once_and_vacated_once_across_nodes(
    receiver: Receiver, nodes: list[Node]
) -> None:
    a, b, _ = nodes
    room, marker = "room-shared", "room-marker"
    async with client(a, "u1") as one:
        async with client(b, "u2") as two:
            await subscribe(one, room)
            await subscribe(two, room)
            await arrived(receiver, "both presence joins", 2, type="presence_join", channel=room)
            await one.call("unsubscribe", {"channel": room})
            await arrived(receiver, "u1's unsubscribe", type="unsubscribe", channel=room, user="u1")
        # u2 went away with its connection: its subscription is released, the last one.
        gone = await arrived(receiver, "u2's disconnect", type="disconnect", user="u2")
        vacated = (await arrived(receiver, "the vacate", type="channel_vacated", channel=room))[0]
        # A marker channel occupied and vacated after it: by then every node swept past the grace.
        await subscribe(one, marker)
        await one.call("unsubscribe", {"channel": marker})
        await arrived(receiver, "the marker's vacate", type="channel_vacated", channel=marker)

    occupied = receiver.events(type="channel_occupied", channel=room)
    assert len(occupied) == 1 and len(receiver.events(type="channel_vacated", channel=room)) == 1
    assert occupied[0]["node"] in {a.uid, b.uid}  # decided by a joining node
    assert vacated["node"] in {n.uid for n in nodes}  # by whichever node swept first
    last_leave = max(e["time"] for e in receiver.events(type="unsubscribe", channel=room))
    assert vacated["time"] - last_leave >= GRACE_MS - 50  # the grace is waited (node clocks agree here)
    assert gone[0]["code"] == 3000 and gone[0]["reason"] == "connection closed" and gone[0]["node"] == b.uid
    connects = receiver.events(type="connect", user="u1")
    assert connects and connects[0]["transport"] == "websocket" and connects[0]["node"] == a.uid
    assert {e["user"] for e in receiver.events(type="subscribe", channel=room)} == {"u1", "u2"}
    assert {e["user"] for e in receiver.events(type="presence_leave", channel=room)} == {"u1", "u2"}
    assert all(r.verified for r in receiver.requests), "a request failed signature verification"


async def test_a_receiver_outage_is_retried_and_never_slows_a_client(
    receiver: Receiver, nodes: list[Node]
) -> None:
    a = nodes[0]
    receiver.set_mode("/flaky", "hang")
    async with client(a, "u3") as raw:
        await subscribe(raw, "outage:1")
        await arrived(receiver, "the first batch held by the receiver", path="/flaky", channel="outage:1")
        # While the receiver holds that POST (timing out and retried), the client's subscribes
        # are answered: nothing on its path waits for the receiver.
        for n in range(2, 13):
            await subscribe(raw, f"outage:{n}")
        with receiver.changed:
            assert receiver.modes["/flaky"] == "hang"
        # One event in the held batch, five queued (queue_size), six dropped.
        assert await metric(a, "taskcast_gateway_webhook_events_dropped_total", "flaky") == 6
        # Down (503) instead of silent: still retried, nothing more is lost.
        held = len([r for r in receiver.requests if r.path == "/flaky"])
        receiver.set_mode("/flaky", "down")
        await wait_until(
            lambda: len([r for r in receiver.requests if r.path == "/flaky"]) > held, what="a 503"
        )
        receiver.set_mode("/flaky", "ok")
        delivered = await arrived(receiver, "the held and queued events", 6, path="/flaky")
    assert sorted(int(e["channel"].split(":")[1]) for e in delivered) == [1, 2, 3, 4, 5, 6]
    assert all(r.verified for r in receiver.requests if r.path == "/flaky")
    assert await metric(a, "taskcast_gateway_webhook_events_sent_total", "flaky") == 6
    # "main" selects channels without a namespace only; "flaky" selects subscribe events only.
    assert not [e for e in receiver.events("/main") if e.get("channel", "").startswith("outage:")]
    assert receiver.events("/main", type="connect", user="u3")
    assert {e["type"] for e in receiver.events("/flaky")} == {"subscribe"}


async def test_a_node_killed_with_sigkill_has_its_channels_vacated_by_a_survivor(
    receiver: Receiver, nodes: list[Node]
) -> None:
    a, b, c = nodes
    async with client(c, "u4") as raw:
        await subscribe(raw, "room-on-c")
        occupied = await arrived(receiver, "the occupy by C", type="channel_occupied", channel="room-on-c")
        assert occupied[0]["node"] == c.uid
        c.gw.kill()
        vacated = await arrived(
            receiver, "the vacate after C died", type="channel_vacated", channel="room-on-c"
        )
    assert vacated[0]["node"] in {a.uid, b.uid}
    assert not receiver.events(type="unsubscribe", channel="room-on-c")  # C never said goodbye


async def test_a_node_shutting_down_delivers_its_queue_and_releases_its_channels(
    receiver: Receiver, nodes: list[Node]
) -> None:
    a, b, _ = nodes
    async with client(b, "u5") as raw:
        await subscribe(raw, "room-on-b")
        await arrived(receiver, "the occupy on B", type="channel_occupied", channel="room-on-b")
        b.gw.send_sigterm()
        assert await raw.close_code() == 3001
    # Flushed at shutdown: the disconnect and the unsubscribe of its last client.
    gone = await arrived(receiver, "B's shutdown disconnect", type="disconnect", user="u5")
    assert gone[0]["code"] == 3001 and gone[0]["node"] == b.uid
    await b.gw.wait_exit(within=30)
    vacated = await arrived(receiver, "the vacate after B left", type="channel_vacated", channel="room-on-b")
    assert vacated[0]["node"] in {a.uid, b.uid}
