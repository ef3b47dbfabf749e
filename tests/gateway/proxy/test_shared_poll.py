"""Shared poll subscriptions (Centrifugo v6.8) against real gateway processes and a real HTTP
and gRPC ``shared_poll_refresh`` backend (tests/gateway/proxy/backend.py).

The official centrifuge-js SDK tracks keys with backend-issued signatures and receives their
state from the gateway's polls, a later change at the backend, a ``shared_poll_publish`` of the
server API and a removal (HTTP backend + JSON, gRPC backend + Protobuf, and JSON over the SSE
emulation). A raw client checks what
the SDK does not show: the polls are shared (one backend request for the keys of several
connections), refused tracks (bad signature 103, expired 109, too many keys 106, nothing to
track 107) retain nothing and poll nothing, and with the Redis engine a ``shared_poll_publish``
sent to one node (HTTP and gRPC server API) reaches a connection on another.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import grpc
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from gateway.api.grpc import api_pb2, api_pb2_grpc
from gateway.sharedpoll.signature import sign
from tests.gateway.proxy.backend import Served
from tests.gateway.proxy.conftest import GatewayStarter
from tests.gateway.proxy.test_proxy_js import _run
from tests.support import mint_token
from tests.support.procs import free_port
from tests.support.waiting import scaled, wait_until

TOKEN_SECRET = "shared-poll-token-secret-of-32-bytes-at-least"
SP_SECRET = "shared-poll-hmac-secret"


def sp_config(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {
        "client": {"token": {"hmac_secret_key": TOKEN_SECRET}},
        "shared_poll": {"hmac_secret_key": SP_SECRET},
        "channel": {
            # Shorter than a test's wait for a push: a poll that hangs (a loaded machine) is
            # abandoned and the next interval asks again within that wait.
            "proxy": {"shared_poll_refresh": {"endpoint": endpoint, "timeout": f"{scaled(3):g}s"}},
            "namespaces": [
                {
                    "name": "sp",
                    "subscription_type": "shared_poll",
                    "allow_subscribe_for_client": True,
                    "shared_poll": {
                        "mode": "versioned",
                        "refresh_interval": "0.3s",
                        "publish_enabled": True,
                        "max_keys_per_connection": 3,
                    },
                },
                {
                    "name": "spl",
                    "subscription_type": "shared_poll",
                    "allow_subscribe_for_client": True,
                    "shared_poll": {"refresh_interval": "0.2s"},  # versionless (the default mode)
                },
            ],
        },
        **extra,
    }


@pytest.mark.node
@pytest.mark.parametrize(
    ("protocol", "wire", "transport"),
    [("http", "json", "websocket"), ("grpc", "protobuf", "websocket"), ("http", "json", "sse")],
    ids=["http-json", "grpc-protobuf", "http-json-sse"],
)
async def test_js_sdk_shared_poll_subscription(
    protocol: str, wire: str, transport: str, served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(sp_config(served.endpoint(protocol, "shared_poll_refresh"), sse={"enabled": True}))
    url: object = gw.ws_url
    if transport == "sse":  # commands as /emulation POSTs, which the SDK sends one at a time
        url = [{"transport": "sse", "endpoint": f"{gw.url}/connection/sse"}]
    channel = f"sp:{uuid.uuid4().hex[:8]}"
    served.backend.entities.update(
        {"a": {"version": 1, "data": {"v": "a1"}}, "b": {"version": 1, "data": {"v": "b1"}}}
    )
    events = await _run(
        "shared_poll.mjs",
        {
            "url": url,
            "emulationEndpoint": f"{gw.url}/emulation",
            "protocol": wire,
            "channel": channel,
            "user": "u1",
            "token": mint_token(TOKEN_SECRET, "u1"),
            "secret": SP_SECRET,
            "backendUrl": served.http_url,
            "apiUrl": gw.api_url,
            "apiKey": gw.api_key,
        },
    )
    assert {e["transport"] for e in events if e["event"] == "connected"} == {transport}
    updates = [(e["key"], e.get("data"), e["removed"]) for e in events if e["event"] == "update"]
    assert ("a", {"v": "a1"}, False) in updates and ("b", {"v": "b1"}, False) in updates
    assert updates[-3:] == [("a", {"v": "a2"}, False), ("b", {"v": "b5"}, False), ("a", None, True)]
    assert [e for e in events if e["event"] == "sub_error"] == []
    assert [e["keys"] for e in events if e["event"] == "tracked"] == [[]]
    polls = served.backend.of("shared_poll_refresh")
    assert polls and all(c.body["channel"] == channel for c in polls)


# --- a raw client ---------------------------------------------------------------------------


class Raw:
    """A JSON protocol client speaking the shared-poll commands directly."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws, self.next_id, self.pushes = ws, 0, []

    @classmethod
    async def open(cls, url: str, user: str) -> Raw:
        raw = cls(await connect(url, open_timeout=scaled(10)))
        assert "connect" in await raw.call("connect", {"token": mint_token(TOKEN_SECRET, user)})
        return raw

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The command's reply; every other message is kept for :meth:`push`, also those after
        the reply in its frame (the gateway writes what one loop tick queued as one frame: a
        track's reply and a poll's answer fanned out meanwhile share it on a loaded machine)."""
        self.next_id += 1
        await self.ws.send(json.dumps({"id": self.next_id, method: params}))
        reply = None
        async with asyncio.timeout(scaled(10)):
            while reply is None:
                for line in str(await self.ws.recv()).splitlines():
                    msg = json.loads(line)
                    if msg.get("id") == self.next_id:
                        reply = msg
                    else:
                        self.pushes.append(msg)
        return reply

    async def push(self) -> dict[str, Any]:
        try:
            async with asyncio.timeout(scaled(20)):
                while not self.pushes:
                    self.pushes += [json.loads(line) for line in str(await self.ws.recv()).splitlines()]
        except TimeoutError:
            raise AssertionError(f"no push within {scaled(20):g}s") from None
        return self.pushes.pop(0)  # type: ignore[no-any-return]

    async def track(self, channel: str, user: str, keys: list[str], **opts: Any) -> dict[str, Any]:
        now = int(time.time())
        sig = opts.get("signature") or sign(
            opts.get("secret", SP_SECRET), channel, keys, user, iat=now, expiry=opts.get("expiry", now + 60)
        )
        batch = {"signature": sig, "items": [{"key": k} for k in keys]}
        return await self.call("sub_refresh", {"channel": channel, "type": 1, "track": [batch]})


async def test_polls_are_shared_and_refused_tracks_retain_nothing(
    served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(sp_config(served.endpoint("http", "shared_poll_refresh")))
    channel = f"sp:{uuid.uuid4().hex[:8]}"
    backend = served.backend
    backend.entities.update({k: {"version": 1, "data": {"k": k}} for k in ("x", "y", "z", "w")})
    one, two = await Raw.open(gw.ws_url, "u1"), await Raw.open(gw.ws_url, "u2")
    for raw in (one, two):
        reply = await raw.call("subscribe", {"channel": channel, "type": 4})
        assert reply["subscribe"]["type"] == 4, reply
    # Refused: nothing tracked, nothing polled.
    assert (await one.track(channel, "u1", ["x"], secret="wrong"))["error"]["code"] == 103
    assert (await one.track(channel, "u2", ["x"]))["error"]["code"] == 103  # another user's signature
    past = int(time.time()) - 60
    assert (await one.track(channel, "u1", ["x"], expiry=past))["error"]["code"] == 109
    assert (await one.track(channel, "u1", ["x", "y", "z", "w"]))["error"]["code"] == 106
    empty = await one.call("sub_refresh", {"channel": channel, "type": 1, "track": []})
    assert empty["error"]["code"] == 107
    assert (await one.track("sp:other", "u1", ["x"]))["error"]["code"] == 103  # not subscribed
    assert backend.of("shared_poll_refresh") == []
    # Both connections track x: each gets it, and the timer polls ask for x once.
    reply = await one.track(channel, "u1", ["x", "y"])
    assert reply["sub_refresh"]["expires"] is True and 0 < reply["sub_refresh"]["ttl"] <= 60
    assert "error" not in await two.track(channel, "u2", ["x"])
    got = [(await one.push())["push"]["pub"] for _ in range(2)]
    assert sorted(got, key=lambda p: p["key"]) == [
        {"key": "x", "data": {"k": "x"}, "version": 1},
        {"key": "y", "data": {"k": "y"}, "version": 1},
    ]
    assert (await two.push())["push"] == {
        "channel": channel,
        "pub": {"key": "x", "data": {"k": "x"}, "version": 1},
    }
    await wait_until(lambda: len(backend.of("shared_poll_refresh")) >= 4, what="timer polls")
    timer = [c.body for c in backend.of("shared_poll_refresh") if len(c.body["items"]) == 2]
    assert timer and all(sorted(i["key"] for i in b["items"]) == ["x", "y"] for b in timer)
    # Untrack and unsubscribe: the backend is no longer asked.
    assert "error" not in await one.call(
        "sub_refresh", {"channel": channel, "type": 2, "untrack": ["x", "y"]}
    )
    assert "error" not in await two.call("unsubscribe", {"channel": channel})
    asked = len(backend.of("shared_poll_refresh"))
    await asyncio.sleep(scaled(1))  # proving an absence: three poll intervals
    assert len(backend.of("shared_poll_refresh")) <= asked + 1
    await one.ws.close()
    await two.ws.close()


async def test_subscription_tokens_are_refreshed_and_an_expired_subscription_ends(
    served: Served, start_gateway: GatewayStarter
) -> None:
    config = sp_config(served.endpoint("http", "shared_poll_refresh"))
    config["client"]["expired_sub_close_delay"] = "0.1s"
    gw = start_gateway(config)
    channel = f"sp:{uuid.uuid4().hex[:8]}"
    kept, lapsed = await Raw.open(gw.ws_url, "u1"), await Raw.open(gw.ws_url, "u2")
    for raw, user in ((kept, "u1"), (lapsed, "u2")):
        token = mint_token(TOKEN_SECRET, user, channel=channel, exp_in=1)
        reply = await raw.call("subscribe", {"channel": channel, "type": 4, "token": token})
        assert reply["subscribe"]["expires"] is True, reply
    token = mint_token(TOKEN_SECRET, "u1", channel=channel, exp_in=600)
    reply = await kept.call("sub_refresh", {"channel": channel, "token": token})
    assert reply["sub_refresh"]["expires"] is True and reply["sub_refresh"]["ttl"] > 500, reply
    assert (await lapsed.push())["push"] == {
        "channel": channel,
        "unsubscribe": {"code": 2501, "reason": "subscription expired"},
    }
    assert "error" not in await kept.track(channel, "u1", ["x"])  # still subscribed
    async with httpx.AsyncClient(timeout=scaled(10)) as http:  # the server API's unsubscribe
        body = {"user": "u1", "channel": channel}
        resp = await http.post(f"{gw.api_url}/unsubscribe", headers={"X-API-Key": gw.api_key}, json=body)
        assert resp.json() == {"result": {}}, resp.text
    assert (await kept.push())["push"] == {
        "channel": channel,
        "unsubscribe": {"code": 2000, "reason": "server unsubscribe"},
    }
    assert (await kept.track(channel, "u1", ["x"]))["error"]["code"] == 103
    await kept.ws.close()
    await lapsed.ws.close()


async def test_versionless_channels_number_changes_by_content(
    served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(sp_config(served.endpoint("grpc", "shared_poll_refresh")))
    channel = f"spl:{uuid.uuid4().hex[:8]}"
    backend = served.backend
    backend.entities["k"] = {"data": {"n": 1}}
    raw = await Raw.open(gw.ws_url, "u1")
    epoch = (await raw.call("subscribe", {"channel": channel, "type": 4}))["subscribe"]["epoch"]
    assert epoch
    assert "error" not in await raw.track(channel, "u1", ["k"])
    assert (await raw.push())["push"]["pub"] == {"key": "k", "data": {"n": 1}, "version": 1}
    await wait_until(lambda: len(backend.of("shared_poll_refresh")) >= 3, what="unchanged polls")
    backend.entities["k"] = {"data": {"n": 2}}
    assert (await raw.push())["push"]["pub"] == {
        "key": "k",
        "data": {"n": 2},
        "version": 2,
    }  # nothing between
    assert all(
        i.get("version", "0") in (0, "0") for c in backend.of("shared_poll_refresh") for i in c.body["items"]
    )
    publish = {"channel": channel, "key": "k", "version": 9, "data": {}}
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        resp = await http.post(
            f"{gw.api_url}/shared_poll_publish", headers={"X-API-Key": gw.api_key}, json=publish
        )
    assert resp.json()["error"]["code"] == 108  # publish_enabled is off (and needs versioned mode)
    await raw.ws.close()


@pytest.mark.redis
async def test_shared_poll_publish_reaches_another_node_over_redis(
    served: Served, start_gateway: GatewayStarter, redis_url: str
) -> None:
    engine = {
        "engine": {"type": "redis", "redis": {"address": redis_url, "prefix": f"sp-{uuid.uuid4().hex[:8]}"}}
    }
    config = sp_config(served.endpoint("grpc", "shared_poll_refresh"), **engine)
    grpc_port = free_port()
    node1 = start_gateway({**config, "grpc_api": {"enabled": True, "port": grpc_port, "key": "gk"}})
    node2 = start_gateway(config)
    channel = f"sp:{uuid.uuid4().hex[:8]}"
    served.backend.entities["k"] = {"version": 1, "data": {"n": 1}}
    raw = await Raw.open(node2.ws_url, "u1")
    assert "error" not in await raw.call("subscribe", {"channel": channel, "type": 4})
    assert "error" not in await raw.track(channel, "u1", ["k"])
    assert (await raw.push())["push"]["pub"] == {"key": "k", "data": {"n": 1}, "version": 1}
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        body = {"channel": channel, "key": "k", "version": 7, "data": {"n": 7}}
        resp = await http.post(
            f"{node1.api_url}/shared_poll_publish", headers={"X-API-Key": node1.api_key}, json=body
        )
        assert resp.json() == {"result": {}}, resp.text
        stale = {**body, "version": 6}  # not newer: never delivered
        await http.post(
            f"{node1.api_url}/shared_poll_publish", headers={"X-API-Key": node1.api_key}, json=stale
        )
        bad = await http.post(
            f"{node1.api_url}/shared_poll_publish",
            headers={"X-API-Key": node1.api_key},
            json={"channel": channel, "key": "k"},
        )
        assert bad.json()["error"]["code"] == 107
    assert (await raw.push())["push"]["pub"] == {"key": "k", "data": {"n": 7}, "version": 7}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as chan:
        stub = api_pb2_grpc.CentrifugoApiStub(chan)
        request = api_pb2.SharedPollPublishRequest(channel=channel, key="k", version=8, data=b'{"n":8}')
        reply = await stub.SharedPollPublish(request, metadata=(("authorization", "apikey gk"),))
        assert not reply.HasField("error"), reply
    assert (await raw.push())["push"]["pub"] == {"key": "k", "data": {"n": 8}, "version": 8}
    await raw.ws.close()
