"""WebSocket behaviour of a real gateway process: limits, timers, server-side actions and the
subscribe-while-publishing guarantee, driven over a raw socket with the ``websockets`` client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.helpers.raw_client import Raw
from tests.support import GatewayProcess, mint_token, scaled

SECRET = "behaviour-secret-of-at-least-32-bytes!"
BASE: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}},
    "channel": {
        "without_namespace": {
            "history_size": 1000,
            "history_ttl": "300s",
            "force_recovery": True,
            "allow_subscribe_for_client": True,
            "allow_history_for_subscriber": True,
        }
    },
}


@pytest.fixture
def gateway(tmp_path: Path):
    started: list[GatewayProcess] = []

    def start(extra: dict[str, Any] | None = None) -> GatewayProcess:
        cfg = json.loads(json.dumps(BASE))
        for section, values in (extra or {}).items():
            cfg.setdefault(section, {}).update(values)
        gw = GatewayProcess(cfg, tmp_path).start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.terminate()


async def _connected(gw: GatewayProcess, ws: ClientConnection, user: str = "u1", **claims: Any) -> Raw:
    raw = Raw(ws)
    raw.task = asyncio.create_task(raw.pump())  # type: ignore[attr-defined]
    reply = await raw.call("connect", {"token": mint_token(SECRET, user, **claims)})
    assert "connect" in reply, reply
    return raw


async def _api(gw: GatewayProcess, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
        r = await http.post(f"{gw.api_url}/{method}", json=body)
        return r.json()


async def _close_code(ws: ClientConnection, within: float = 10.0) -> int | None:
    async with asyncio.timeout(scaled(within)):
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd else None


async def test_slow_client_is_disconnected_and_never_slows_the_others(gateway):
    # A busy test loop may lag a few messages: the queue bound is generous. The fast client
    # answers pings (Raw): on a loaded machine the 300 publications outlast ping + pong timeout.
    gw = gateway({"client": {"queue_max_size": 1048576}, "prometheus": {"enabled": True}})
    async with connect(gw.ws_url, max_queue=1) as slow_ws, connect(gw.ws_url) as fast_ws:
        fast = await _connected(gw, fast_ws, "fast")
        await fast.call("subscribe", {"channel": "hot"})
        slow_ws.protocol.max_size = None
        await slow_ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "slow")}}))
        await slow_ws.send(json.dumps({"id": 2, "subscribe": {"channel": "hot"}}))
        await fast.call(
            "presence_stats", {"channel": "nope:x"}
        )  # a round trip: the slow subscribe is processed
        payload = "x" * 60000  # beyond what the kernel socket buffers absorb
        async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}, timeout=scaled(10)) as http:
            for n in range(300):
                await http.post(
                    f"{gw.api_url}/publish", json={"channel": "hot", "data": {"n": n, "p": payload}}
                )
        got = []
        async with asyncio.timeout(scaled(10)):
            while len(got) < 300:
                msg = await fast.messages.get()
                if "push" in msg:
                    got.append(msg["push"]["pub"]["data"]["n"])
        assert got == list(range(300))
        # The 3008 close frame queues behind what the slow peer never read; when this test reads
        # it later than the gateway's close timeout (a loaded machine), the socket was dropped
        # instead. Either way the server disconnected it with 3008, once, which its metric shows.
        assert await _close_code(slow_ws) in (3008, None)
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{gw.url}/metrics")).text
        assert 'centrifugo_client_num_server_disconnects{code="3008"} 1.0' in text, text[-2000:]
    assert gw.health_ok()


async def test_no_pong_disconnects_with_3012(gateway):
    gw = gateway({"client": {"ping_interval": "1s", "pong_timeout": "500ms"}})
    async with connect(gw.ws_url) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "u")}}))
        reply = json.loads(await ws.recv())
        assert reply["connect"]["ping"] == 1 and reply["connect"]["pong"] is True
        assert await _close_code(ws) == 3012


async def test_pong_keeps_the_connection(gateway):
    gw = gateway({"client": {"ping_interval": "1s", "pong_timeout": "500ms"}})
    async with connect(gw.ws_url) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "u")}}))
        await ws.recv()
        pings = 0
        async with asyncio.timeout(scaled(8)):
            while pings < 3:
                if json.loads(await ws.recv()) == {}:
                    pings += 1
                    await ws.send("{}")
        assert pings == 3


async def test_no_connect_within_stale_delay_is_3502(gateway):
    gw = gateway({"client": {"stale_close_delay": "300ms"}})
    async with connect(gw.ws_url) as ws:
        assert await _close_code(ws) == 3502


async def test_user_connection_limit_3504(gateway):
    gw = gateway({"client": {"user_connection_limit": 1}})
    async with connect(gw.ws_url) as a, connect(gw.ws_url) as b:
        await _connected(gw, a, "same")
        await b.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "same")}}))
        assert await _close_code(b) == 3504


async def test_connection_limit_is_503_at_the_handshake_and_a_retry_gets_in(gateway):
    """Defect 8: ``client.connection_limit`` answers the handshake with 503 + Retry-After (the
    SDKs retry it) instead of accepting and closing with the terminal 3504 after connect."""
    gw = gateway({"client": {"connection_limit": 2}})
    async with connect(gw.ws_url) as a, connect(gw.ws_url) as b:
        await _connected(gw, a, "a")
        await _connected(gw, b, "b")
        with pytest.raises(InvalidStatus) as info:
            async with connect(gw.ws_url):
                pass
        assert info.value.response.status_code == 503
        assert int(info.value.response.headers["Retry-After"]) >= 1
    async with asyncio.timeout(scaled(10)):  # both left: a retry is admitted once the node counted them out
        while True:
            try:
                async with connect(gw.ws_url) as ws:
                    await _connected(gw, ws, "c")
                    return
            except InvalidStatus as exc:
                assert exc.response.status_code == 503
                await asyncio.sleep(0.05)  # the SDK's retry backoff, shortened


async def test_connection_rate_limit_answers_503_with_retry_after(gateway):
    gw = gateway({"client": {"connection_rate_limit": 1}})
    async with connect(gw.ws_url):
        with pytest.raises(InvalidStatus) as info:
            async with connect(gw.ws_url):
                pass
    assert info.value.response.status_code == 503
    assert int(info.value.response.headers["Retry-After"]) >= 1


async def test_connection_expires_with_3005_without_refresh(gateway):
    gw = gateway({"client": {"expired_close_delay": "0s"}})
    async with connect(gw.ws_url) as ws:
        raw = Raw(ws)
        await ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "u", exp_in=2)}}))
        reply = json.loads(await ws.recv())
        assert reply["connect"]["expires"] is True and 1 <= reply["connect"]["ttl"] <= 2
        del raw
        assert await _close_code(ws) == 3005


async def test_refresh_extends_the_connection(gateway):
    gw = gateway({"client": {"expired_close_delay": "0s"}})
    async with connect(gw.ws_url) as ws:
        raw = await _connected(gw, ws, "u", exp_in=2)
        reply = await raw.call("refresh", {"token": mint_token(SECRET, "u", exp_in=60)})
        assert reply["refresh"]["expires"] is True and reply["refresh"]["ttl"] > 50
        # a refresh token of another user is a terminal disconnect
        await raw.send("refresh", {"token": mint_token(SECRET, "mallory", exp_in=60)})
        assert await raw.close_code() == 3500


async def test_subscription_token_expiry_unsubscribes_2501(gateway):
    gw = gateway(
        {
            "client": {"expired_sub_close_delay": "0s"},
            "channel": {"namespaces": [{"name": "priv"}]},
        }
    )
    async with connect(gw.ws_url) as ws:
        raw = await _connected(gw, ws, "u")
        token = mint_token(SECRET, "u", exp_in=2, channel="priv:a")
        reply = await raw.call("subscribe", {"channel": "priv:a", "token": token})
        assert reply["subscribe"]["expires"] is True
        push = await raw.wait_for(lambda m: "unsubscribe" in m.get("push", {}), within=15)
        assert push["push"] == {
            "channel": "priv:a",
            "unsubscribe": {"code": 2501, "reason": "subscription expired"},
        }


async def test_server_api_subscribe_unsubscribe_disconnect(gateway):
    gw = gateway()
    async with connect(gw.ws_url) as ws:
        raw = await _connected(gw, ws, "alice")
        assert await _api(gw, "subscribe", {"user": "alice", "channel": "srv"}) == {"result": {}}
        push = await raw.wait_for(lambda m: "subscribe" in m.get("push", {}))
        assert push["push"]["channel"] == "srv" and push["push"]["subscribe"]["recoverable"] is True
        await _api(gw, "publish", {"channel": "srv", "data": {"hello": 1}})
        pub = await raw.wait_for(lambda m: "pub" in m.get("push", {}))
        assert pub["push"]["pub"]["data"] == {"hello": 1}
        await _api(gw, "unsubscribe", {"user": "alice", "channel": "srv"})
        unsub = await raw.wait_for(lambda m: "unsubscribe" in m.get("push", {}))
        assert unsub["push"]["unsubscribe"]["code"] == 2000
        await _api(gw, "disconnect", {"user": "alice", "disconnect": {"code": 4001, "reason": "bye"}})
        assert await raw.close_code() == 4001


async def test_subscribe_with_recovery_while_publishing_loses_and_duplicates_nothing(gateway):
    """Publications racing a recovering subscribe are merged by offset (PROTOCOL.md §3.3.6)."""
    gw = gateway()
    stop = asyncio.Event()

    async def publisher() -> None:
        async with httpx.AsyncClient(headers={"X-API-Key": gw.api_key}) as http:
            n = 0
            while not stop.is_set() and n < 5000:
                await http.post(f"{gw.api_url}/publish", json={"channel": "race", "data": {"n": n}})
                n += 1

    first = (await _api(gw, "publish", {"channel": "race", "data": {"n": -1}}))["result"]
    task = asyncio.create_task(publisher())
    try:
        async with connect(gw.ws_url) as ws:
            raw = await _connected(gw, ws, "u")
            reply = await raw.call(
                "subscribe",
                {"channel": "race", "recover": True, "offset": first["offset"], "epoch": first["epoch"]},
            )
            sub = reply["subscribe"]
            assert sub["recovered"] is True
            offsets = [p["offset"] for p in sub.get("publications", [])]
            # A generous bound: on a loaded machine 300 sequential API publishes take seconds.
            async with asyncio.timeout(scaled(60)):
                while len(offsets) < 300:
                    msg = await raw.messages.get()
                    if "pub" in msg.get("push", {}):
                        offsets.append(msg["push"]["pub"]["offset"])
    finally:
        stop.set()
        await task
    assert offsets == list(range(first["offset"] + 1, first["offset"] + 1 + len(offsets)))


async def test_recovery_beyond_history_size_is_not_recovered(gateway):
    gw = gateway(
        {
            "channel": {
                "namespaces": [
                    {
                        "name": "small",
                        "history_size": 2,
                        "history_ttl": "60s",
                        "force_recovery": True,
                        "allow_subscribe_for_client": True,
                    }
                ]
            }
        }
    )
    first = (await _api(gw, "publish", {"channel": "small:c", "data": 0}))["result"]
    for n in range(3):
        await _api(gw, "publish", {"channel": "small:c", "data": n + 1})
    async with connect(gw.ws_url) as ws:
        raw = await _connected(gw, ws, "u")
        reply = await raw.call(
            "subscribe",
            {"channel": "small:c", "recover": True, "offset": first["offset"], "epoch": first["epoch"]},
        )
        sub = reply["subscribe"]
        assert sub.get("recovered", False) is False and "publications" not in sub
        assert sub["offset"] == 4 and sub["was_recovering"] is True
        rejected = await raw.call(
            "subscribe",
            {"channel": "small:d", "recover": True, "offset": 5, "epoch": "gone", "flag": 2},
        )
        assert rejected["error"]["code"] == 112


async def test_command_flood_is_bounded_with_3013(gateway):
    gw = gateway()
    async with connect(gw.ws_url) as ws:
        lines = [json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "u")}})]
        lines += [json.dumps({"id": n, "history": {"channel": "c", "limit": 1}}) for n in range(2, 1200)]
        await ws.send("\n".join(lines))
        assert await _close_code(ws) == 3013
    assert gw.health_ok()


async def test_handshake_limit_admits_only_that_many_unfinished_connects(gateway):
    gw = gateway({"client": {"handshake_limit": 1}})
    async with connect(gw.ws_url) as first:  # transport open, no connect yet
        with pytest.raises(InvalidStatus) as info:
            async with connect(gw.ws_url):
                pass
        assert info.value.response.status_code == 503
        assert info.value.response.headers["Retry-After"] == "1"
        await _connected(gw, first, "u1")  # the first finishes its connect ...
        async with connect(gw.ws_url) as third:  # ... and admission opens again
            await _connected(gw, third, "u2")
