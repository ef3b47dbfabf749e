"""Raw protocol conformance over a real socket with the ``websockets`` client: bad input gets
Centrifugo's codes and never kills the process; origin checks; metrics; secrets stay out of logs."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
import uuid

import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conformance.conftest import SECRET, GatewayFactory, standard_config
from tests.support import GatewayProcess, mint_token, scaled, wait_until

TIMEOUT = scaled(5.0)


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
        return str(resp.read().decode())


def http_status(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def connect_cmd(cmd_id: int = 1, **extra: object) -> str:
    return json.dumps({"id": cmd_id, "connect": {"token": mint_token(SECRET, "42"), **extra}})


async def recv(ws: websockets.ClientConnection) -> str | bytes:
    """The next message, within the suite's (scaled) bound."""
    return await asyncio.wait_for(ws.recv(), TIMEOUT)


async def closed_with(ws: websockets.ClientConnection) -> tuple[int, str]:
    """Reads until the server closes (each read bounded); returns its close code and reason."""
    with pytest.raises(ConnectionClosed) as exc:
        while True:
            await recv(ws)
    rcvd = exc.value.rcvd
    assert rcvd is not None, "closed without a close frame"
    return rcvd.code, rcvd.reason


async def connected(gw: GatewayProcess, **kwargs: object) -> websockets.ClientConnection:
    ws = await websockets.connect(gw.ws_url, open_timeout=TIMEOUT, **kwargs)  # type: ignore[arg-type]
    await ws.send(connect_cmd())
    reply = json.loads(await recv(ws))
    assert reply["id"] == 1 and "client" in reply["connect"], reply
    return ws


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("{not json", None, (3501, "bad request")),
        (json.dumps({"id": 1, "subscribe": {"channel": "a"}}), None, (3501, "bad request")),  # before connect
        (connect_cmd(1), connect_cmd(2), (3501, "bad request")),  # second connect
        (connect_cmd(1), json.dumps({"subscribe": {"channel": "a"}}), (3501, "bad request")),  # missing id
        (connect_cmd(1), "", (3501, "bad request")),  # empty frame
        (connect_cmd(1), b"\x00\x01binary", (3506, "inappropriate protocol")),
    ],
    ids=["malformed-json", "command-before-connect", "second-connect", "missing-id", "empty-frame", "binary"],
)
async def test_bad_input_closes_with_centrifugo_code(gateway, first, second, expected):
    async with websockets.connect(gateway.ws_url, open_timeout=TIMEOUT) as ws:
        await ws.send(first)
        if second is not None:
            await ws.send(second)
        async with asyncio.timeout(TIMEOUT):
            assert await closed_with(ws) == expected
    assert gateway.health_ok()


async def test_oversized_frame_closes_1009(gateway_factory: GatewayFactory):
    config = standard_config()
    config["websocket"] = {"message_size_limit": 1024}
    gw = gateway_factory(config)
    ws = await connected(gw)
    async with ws:
        await ws.send(json.dumps({"id": 2, "publish": {"channel": "a", "data": "x" * 2000}}))
        code, _ = await closed_with(ws)
        assert code == 1009
    assert gw.health_ok()


async def test_ping_and_unknown_commands_get_error_108_and_connection_stays(gateway):
    ws = await connected(gateway)
    async with ws:
        await ws.send(
            "\n".join(
                json.dumps(cmd)
                for cmd in (
                    {"id": 2, "ping": {}},
                    {"id": 3, "no_such_command": {}},
                    {"id": 4, "history": {"channel": ""}},
                )
            )
        )
        replies: list[dict[str, object]] = []
        while len(replies) < 3:
            replies += [json.loads(line) for line in (await recv(ws)).split("\n") if line]
        by_id = {r["id"]: r for r in replies}
        assert by_id[2] == {"id": 2, "error": {"code": 108, "message": "not available"}}
        assert by_id[3] == {"id": 3, "error": {"code": 108, "message": "not available"}}
        assert by_id[4]["error"]["code"] in (102, 107)
        # The connection still works: a regular command is answered.
        channel = f"wire-{uuid.uuid4().hex[:8]}"
        await ws.send(json.dumps({"id": 5, "subscribe": {"channel": channel}}))
        assert json.loads(await recv(ws))["id"] == 5
    assert gateway.health_ok()


async def test_batched_commands_processed_in_order(gateway):
    """centrifuge-js sends connect and its subscribes in ONE frame (§1.2)."""
    channel = f"wire-{uuid.uuid4().hex[:8]}"
    async with websockets.connect(gateway.ws_url, open_timeout=TIMEOUT) as ws:
        await ws.send(
            connect_cmd(1) + "\n" + json.dumps({"id": 2, "subscribe": {"channel": channel, "flag": 1}})
        )
        replies: list[dict[str, object]] = []
        while len(replies) < 2:
            replies += [json.loads(line) for line in (await recv(ws)).split("\n") if line]
        assert [r["id"] for r in replies] == [1, 2]
        assert "connect" in replies[0] and "subscribe" in replies[1]


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [("https://evil.example", False), ("https://ok.example", True), (None, True)],
    ids=["foreign-origin", "allowed-origin", "no-origin"],
)
async def test_allowed_origins(gateway_factory: GatewayFactory, origin, allowed):
    config = standard_config()
    config["client"] = {**config["client"], "allowed_origins": ["https://ok.example"]}
    gw = gateway_factory(config)
    if not allowed:
        with pytest.raises(InvalidStatus) as exc:
            await websockets.connect(gw.ws_url, origin=origin, open_timeout=TIMEOUT)
        assert exc.value.response.status_code == 403
        return
    ws = await connected(gw, origin=origin)
    await ws.close()


async def test_metrics_use_centrifugo_names(gateway):
    ws = await connected(gateway)
    async with ws:
        # With --workers N a scrape answers for the worker it lands on: scrape (each a new
        # connection, spread by the kernel) until the one holding this client answers.
        async def scrape() -> str | None:
            text = await asyncio.to_thread(http_get, gateway.url + "/metrics")
            found = re.search(r"^centrifugo_node_num_clients (\S+)$", text, re.MULTILINE)
            return text if found is not None and float(found.group(1)) >= 1 else None

        body = await wait_until(scrape, 30, "a /metrics answer counting this client")
    for name in (
        "centrifugo_node_num_users",
        "centrifugo_node_num_channels",
        "centrifugo_node_num_subscriptions",
        "centrifugo_client_connections_accepted",
        "centrifugo_client_command_duration_seconds",
    ):
        assert re.search(rf"^{name}", body, re.MULTILINE), name


async def test_secrets_never_logged(gateway_factory: GatewayFactory):
    config = standard_config()
    config["log"] = {"level": "debug"}
    gw = gateway_factory(config)
    bad_token = mint_token("not-the-secret-0123456789abcdefghijkl", "42")
    async with websockets.connect(gw.ws_url, open_timeout=TIMEOUT) as ws:
        await ws.send(json.dumps({"id": 1, "connect": {"token": bad_token}}))
        assert (await closed_with(ws))[0] == 3500
    body = json.dumps({"channel": "x", "data": {}}).encode()
    for headers, url in [
        ({"X-API-Key": gw.api_key}, gw.api_url + "/publish"),
        ({"Authorization": f"apikey {gw.api_key}"}, gw.api_url + "/publish"),
        ({}, gw.api_url + f"/publish?api_key={gw.api_key}"),
        ({"X-API-Key": gw.api_key + "-wrong"}, gw.api_url + "/publish"),
    ]:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        assert await asyncio.to_thread(http_status, request) in (200, 401)
    gw.terminate()
    log = gw.log_text()
    assert gw.api_key not in log and bad_token not in log and SECRET not in log


async def test_slow_client_is_disconnected_3008_and_others_get_everything(gateway_factory: GatewayFactory):
    config = standard_config()
    config["client"] = {**config["client"], "queue_max_size": 1048576}  # room for a busy test loop
    gw = gateway_factory(config)
    channel = f"wire-{uuid.uuid4().hex[:8]}"
    subscribe = json.dumps({"id": 2, "subscribe": {"channel": channel}})
    count = 200

    async def fast_reader(ws: websockets.ClientConnection) -> list[int]:
        offsets: list[int] = []
        while len(offsets) < count:
            for line in (await recv(ws)).split("\n"):
                if line == "{}":  # a ping: answered as SDKs do (a loaded run outlasts ping + pong timeout)
                    await ws.send("{}")
                push = json.loads(line).get("push") if line else None
                if push and "pub" in push:
                    offsets.append(push["pub"]["offset"])
        return offsets

    async with (
        websockets.connect(gw.ws_url, max_queue=1, open_timeout=TIMEOUT) as slow,  # stops reading early
        websockets.connect(gw.ws_url, open_timeout=TIMEOUT) as fast,
    ):
        for ws in (slow, fast):
            await ws.send(connect_cmd(1) + "\n" + subscribe)
            replies: list[str] = []
            while len(replies) < 2:
                replies += [line for line in (await recv(ws)).split("\n") if line]
        reader = asyncio.create_task(fast_reader(fast))
        payload = json.dumps({"channel": channel, "data": {"x": "y" * 60000}}).encode()

        # The server sends 3008 and then waits CLOSE_TIMEOUT_SECONDS for the close handshake before
        # dropping TCP; the slow client must start draining within that wait, not after the fast
        # reader is done (at load 8 that came later, and the close frame went down with the
        # connection). The moment is the server's: its client count drops to one.
        def clients() -> int:
            info = urllib.request.Request(
                gw.api_url + "/info", data=b"{}", headers={"X-API-Key": gw.api_key}, method="POST"
            )
            with urllib.request.urlopen(info, timeout=TIMEOUT) as resp:
                return int(json.loads(resp.read())["result"]["nodes"][0]["num_clients"])

        def fast_alone() -> bool:
            return clients() == 1

        async def slow_is_dropped() -> tuple[int, str]:
            await wait_until(lambda: asyncio.to_thread(fast_alone), 60, "slow dropped", every=0.05)
            return await closed_with(slow)

        slow_closed = asyncio.create_task(slow_is_dropped())
        for _ in range(count):
            request = urllib.request.Request(
                gw.api_url + "/publish", data=payload, headers={"X-API-Key": gw.api_key}, method="POST"
            )
            assert await asyncio.to_thread(http_status, request) == 200
        async with asyncio.timeout(scaled(30)):  # a generous bound: 12 MB through a loaded loop
            assert await reader == list(range(1, count + 1))
            code, reason = await slow_closed
        assert (code, reason) == (3008, "slow")
    assert gw.health_ok()
