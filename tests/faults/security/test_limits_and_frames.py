"""Limits and bad frames, each answered with its Centrifugo code WHILE a control client on the
same gateway process keeps receiving every publication of its channel, in order (the ``control``
fixture publishes through the server API for the whole test and checks the result at the end).

Config (tests/faults/security/conftest.py): channel_limit 8, task_detail
subscription_limit_per_connection 2, user_connection_limit 2, message_size_limit 4096.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from tests.faults.security.conftest import (
    Control,
    Secrets,
    api,
    metrics,
    raw_ws_open,
    read_until_close,
    read_ws_frame,
    uid,
    wait_until,
    ws_frame,
    ws_session,
)
from tests.faults.security.test_tokens import subscribe_outcome
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(60)


UPGRADE_HEADERS = (
    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


def _connect(secrets: Secrets, user: str = "", cmd_id: int = 1) -> bytes:
    token = secrets.token(sub=user or f"u{uid()}", exp_in=120)
    return json.dumps({"id": cmd_id, "connect": {"token": token}}).encode()


async def test_channel_limit_is_106_and_earlier_subscriptions_stay(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control
):
    async with ws_session(security_gateway, secrets.token(sub=f"u{uid()}", exp_in=120)) as abuser:
        channels = [f"task_system:{uid()}" for _ in range(9)]
        for channel in channels[:8]:
            assert "subscribe" in await abuser.call("subscribe", {"channel": channel})
        reply = await abuser.call("subscribe", {"channel": channels[8]})
        assert reply["error"]["code"] == 106, reply
        await api(security_gateway, "publish", {"channel": channels[0], "data": {"still": "here"}})
        pub = await abuser.raw.wait_for(lambda m: "pub" in m.get("push", {}))
        assert pub["push"]["channel"] == channels[0]
    await control.finish()


async def test_namespace_quota_is_106_detail_subscription_limit(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control
):
    user = f"u{uid()}"
    async with ws_session(security_gateway, secrets.token(sub=user, exp_in=120)) as abuser:
        for n in range(3):
            channel = f"task_detail:t1/{uid()}"
            token = secrets.token(sub=user, channel=channel, exp_in=60)
            kind, value = await subscribe_outcome(abuser, channel, token)
            if n < 2:
                assert kind == "reply", value
            else:
                assert kind == "error" and value == 106, (kind, value)
        # The quota is per namespace: other namespaces still subscribe.
        assert "subscribe" in await abuser.call("subscribe", {"channel": f"task_system:{uid()}"})
        reply = await abuser.call(
            "subscribe",
            {
                "channel": (ch := f"task_detail:t1/{uid()}"),
                "token": secrets.token(sub=user, channel=ch, exp_in=60),
            },
        )
        assert reply["error"] == {"code": 106, "message": "DETAIL_SUBSCRIPTION_LIMIT"}, reply
    await control.finish()


async def test_user_connection_limit_closes_3504(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control
):
    user = f"u{uid()}"
    async with (
        ws_session(security_gateway, secrets.token(sub=user, exp_in=120)),
        ws_session(security_gateway, secrets.token(sub=user, exp_in=120)),
        ws_session(security_gateway) as third,
    ):
        await third.raw.send("connect", {"token": secrets.token(sub=user, exp_in=120)})
        assert await third.raw.close_code() == 3504
    await control.finish()


async def test_command_flood_closes_3013(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control
):
    """Frames of 40 commands each, written in one burst faster than they can run: the bound on
    queued commands (1024) closes the connection with 3013 (too many requests)."""
    reader, writer = await raw_ws_open(security_gateway.port)
    try:
        burst = [ws_frame(_connect(secrets))]
        n = 2
        for _ in range(60):
            lines = []
            for _ in range(40):
                lines.append(json.dumps({"id": n, "history": {"channel": "ctl:none", "limit": 1}}))
                n += 1
            burst.append(ws_frame("\n".join(lines).encode()))
        writer.write(b"".join(burst))
        assert await read_until_close(reader) == 3013
    finally:
        writer.close()
    await control.finish()


BAD_FRAMES = {
    # name: (frames after the upgrade, expected close code)
    "malformed-json": ([b"{not json"], 3501),
    "command-before-connect": ([b'{"id":1,"subscribe":{"channel":"ctl:x"}}'], 3501),
    "publish-before-connect": ([b'{"id":1,"publish":{"channel":"ctl:x","data":{}}}'], 3501),
    "second-connect": (["CONNECT", "CONNECT2"], 3501),
    "missing-id": (["CONNECT", b'{"subscribe":{"channel":"ctl:x"}}'], 3501),
    "negative-id": (["CONNECT", b'{"id":-1,"subscribe":{"channel":"ctl:x"}}'], 3501),
    "huge-int-id": (["CONNECT", b'{"id":' + b"9" * 3000 + b',"subscribe":{"channel":"ctl:x"}}'], 3501),
    "deep-nesting": (
        ["CONNECT", b'{"id":2,"publish":{"channel":"ctl:x","data":' + b"[" * 1500 + b"]" * 1500 + b"}}"],
        3501,
    ),
    "not-an-object": (["CONNECT", b"[1,2,3]"], 3501),
    "wrong-field-type": (["CONNECT", b'{"id":2,"subscribe":{"channel":42}}'], 3501),
    "empty-frame": (["CONNECT", b""], 3501),
    "binary-garbage": (["CONNECT", ("BINARY", bytes(range(256)))], 3506),
    "binary-before-connect": ([("BINARY", b"\x00\xff\x00\xff")], 3506),
    "invalid-utf8-text": (["CONNECT", b"\xff\xfe\xfd"], 3501),
    "oversized-frame": (
        ["CONNECT", b'{"id":2,"publish":{"channel":"ctl:x","data":"' + b"x" * 5000 + b'"}}'],
        1009,
    ),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
async def test_bad_frames_close_with_the_right_code(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control, case: str
):
    frames, expected = BAD_FRAMES[case]
    reader, writer = await raw_ws_open(security_gateway.port)
    try:
        for frame in frames:
            if frame == "CONNECT":
                writer.write(ws_frame(_connect(secrets)))
            elif frame == "CONNECT2":
                writer.write(ws_frame(_connect(secrets, cmd_id=2)))
            elif isinstance(frame, tuple):
                writer.write(ws_frame(frame[1], opcode=2))
            else:
                assert isinstance(frame, bytes)
                writer.write(ws_frame(frame))
        assert await read_until_close(reader) == expected
        writer.write(ws_frame(b"", opcode=8))  # our close reply: the server then drops the TCP
        async with asyncio.timeout(scaled(10)):
            while await reader.read(65536):
                pass
    finally:
        writer.close()
    await control.finish()
    assert security_gateway.health_ok()


async def test_every_abuse_leaves_no_client_behind(security_gateway: GatewayProcess):
    """Runs last in this module: every abuser above is gone from the node's counters."""

    async def clean() -> bool:
        m = await metrics(security_gateway)
        return m["centrifugo_node_num_clients"] == 0 and m["centrifugo_node_num_subscriptions"] == 0

    await wait_until(clean, 15, "node counters back to zero")


def _fragments(message: bytes, parts: int, *, ping_between: bool = False) -> bytes:
    """``message`` as one text frame + continuation frames (RFC 6455 §5.4), optionally with a
    ping (a control frame, allowed between fragments) after the first one."""
    size = -(-len(message) // parts)
    chunks = [message[i : i + size] for i in range(0, len(message), size)]
    frames = []
    for n, chunk in enumerate(chunks):
        frames.append(ws_frame(chunk, opcode=1 if n == 0 else 0, fin=n == len(chunks) - 1))
        if n == 0 and ping_between:
            frames.append(ws_frame(b"p", opcode=9))
    return b"".join(frames)


async def _next_message(reader: asyncio.StreamReader) -> dict:
    """The next data frame's first message (pongs skipped)."""
    async with asyncio.timeout(scaled(10)):
        while True:
            opcode, payload = await read_ws_frame(reader)
            assert opcode != 8, f"closed: {payload!r}"
            if opcode == 1:
                return json.loads(payload.split(b"\n")[0])


async def test_fragmented_messages_are_reassembled(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control
):
    """A connect split in three frames and a subscribe split in two (with a ping between the
    fragments) both run whole; the replies come back as for unfragmented messages."""
    reader, writer = await raw_ws_open(security_gateway.port)
    try:
        writer.write(_fragments(_connect(secrets), 3))
        reply = await _next_message(reader)
        assert reply.get("id") == 1 and "connect" in reply, reply
        channel = f"ctl:{uid()}"
        subscribe = json.dumps({"id": 2, "subscribe": {"channel": channel}}).encode()
        writer.write(_fragments(subscribe, 2, ping_between=True))
        reply = await _next_message(reader)
        assert reply.get("id") == 2 and "subscribe" in reply, reply
    finally:
        writer.close()
    await control.finish()


async def test_fragmented_message_over_the_size_limit_closes_1009(
    security_gateway: GatewayProcess, secrets: Secrets, control: Control
):
    """The bound is on the reassembled message (websocket.message_size_limit 4096), not on each
    fragment: three 2,000-byte fragments are refused."""
    reader, writer = await raw_ws_open(security_gateway.port)
    try:
        writer.write(ws_frame(_connect(secrets)))
        await _next_message(reader)
        big = b'{"id":2,"publish":{"channel":"ctl:x","data":"' + b"x" * 5950 + b'"}}'
        writer.write(_fragments(big, 3))
        assert await read_until_close(reader) == 1009
    finally:
        writer.close()
    await control.finish()


HEAD_PATHS = {
    "websocket-upgrade": ("GET", "/connection/websocket", UPGRADE_HEADERS),
    "server-api": ("POST", "/api/publish", ""),
    "sse": ("GET", "/connection/sse?cf_connect=%7B%7D", ""),
    "http-stream": ("POST", "/connection/http_stream", ""),
    "uni-sse": ("GET", "/connection/uni_sse", ""),
    "emulation": ("POST", "/emulation", ""),
    "health": ("GET", "/health", ""),
    "metrics": ("GET", "/metrics", ""),
    "root": ("GET", "/", ""),
}


async def _send_head(port: int, method: str, path: str, extra: str, padding: int) -> bytes:
    """Send a request whose head carries a ``padding``-byte header (in 64 KiB writes, stopping
    when the server hangs up); return what the server answered before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}X-Padding: ".encode())
        chunk = b"a" * 65536
        sent = 0
        try:
            while sent < padding:
                writer.write(chunk[: padding - sent])
                sent += min(len(chunk), padding - sent)
                await writer.drain()
            writer.write(b"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass  # refused before the end of the head: what it answered is read below
        received = b""
        async with asyncio.timeout(scaled(10)):
            while len(received) < 12:
                data = await reader.read(65536)
                if not data:
                    break
                received += data
        return received
    except ConnectionResetError:
        return b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@pytest.mark.parametrize("case", list(HEAD_PATHS))
async def test_request_head_over_1_mib_is_431_on_every_endpoint(
    security_gateway: GatewayProcess, control: Control, case: str
):
    """Centrifugo's Go server refuses heads over 1 MiB; so does every gateway endpoint, before
    buffering the rest (a 4 MiB header is cut off after about 1 MiB)."""
    method, path, extra = HEAD_PATHS[case]
    answer = await _send_head(security_gateway.port, method, path, extra, 4 << 20)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    await control.finish()
    assert security_gateway.health_ok()


async def test_request_head_under_1_mib_is_served(security_gateway: GatewayProcess):
    answer = await _send_head(security_gateway.port, "GET", "/health", "", (1 << 20) - 65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
