"""Limits and bad frames, each answered with its Centrifugo code WHILE a control client on the
same gateway process keeps receiving every publication of its channel, in order (the ``control``
fixture publishes through the server API for the whole test and checks the result at the end).

Config (tests/faults/security/conftest.py): channel_limit 8, task_detail
subscription_limit_per_connection 2, user_connection_limit 2, message_size_limit 4096.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.faults.security.conftest import (
    Control,
    Secrets,
    api,
    metrics,
    raw_ws_open,
    read_until_close,
    uid,
    wait_until,
    ws_frame,
    ws_session,
)
from tests.faults.security.test_tokens import subscribe_outcome
from tests.helpers.gateway_proc import GatewayProcess

pytestmark = pytest.mark.timeout(60)


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
        async with asyncio.timeout(10):
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
