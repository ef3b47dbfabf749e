"""Channel and tenant spoofing against a real gateway process (reliability-notes §3.2 C1–C6).

The attacker is user ``alice`` of tenant ``t1`` with the connection token the Status API would
mint: ``channels: ["task_user:t1/alice"]``. Whatever she asks for, she must never be subscribed
to another user's or tenant's channel, and no name is ever normalised into someone else's: the
namespaces have no ``allow_subscribe_for_client`` (⇒ 103 without a token), a subscription token
for her own channel used on another name closes the connection (3500), non-ASCII names and
names over ``channel.max_length`` are 107, and with a ``channel_regex`` the grammar itself
refuses path tricks (107). After every refusal, publications to the spoofed names must not reach
her while her own channel keeps working.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from tests.faults.security.conftest import (
    GatewayFactory,
    Secrets,
    Session,
    api,
    security_config,
    ws_session,
)
from tests.faults.security.test_tokens import subscribe_outcome
from tests.support import GatewayProcess, scaled

pytestmark = pytest.mark.timeout(60)

ALICE_CHANNEL = "task_user:t1/alice"

# Names that must never give alice another user's stream. ASCII ones pass the default grammar
# and are refused for lack of permission (103); what matters is that none is normalised.
ASCII_SPOOFS = [
    "task_user:t1/bob",
    "task_user:t2/alice",  # another tenant, same user id
    "task_user:t1/alice/../bob",
    "task_user:t1/bob/../alice",
    "task_user:t1/./bob",
    "task_user:t1//bob",
    "task_user:t1/alice%2F..%2Fbob",
    "task_user:t1%2Fbob",
    "task_user:t1/alice\x00",
    "task_user:t1/alice ",
    "task_user:T1/alice",
    "task_user:t1/ALICE",
    "task_user:t1/alice#bob",  # user-limited channel syntax: not enabled in the namespace
    "task_user:t1/alice,bob",
    "task_user:t1/alice:bob",
    "$task_user:t1/alice",  # private prefix
    "task_detail:t1/someone-elses-task",
    "task_project:t1/p1",
    "task_user:" + "a" * 245,  # exactly channel.max_length (255): grammar OK, permission not
]
UNICODE_SPOOFS = [
    "task_user:t1/\u0430lice",  # Cyrillic а
    "task_user:t1/alic\u0435",  # Cyrillic е
    "task_user:t1\uff0falice",  # fullwidth solidus
    "task_user:\uff541/alice",  # fullwidth t
    "task_user:t1/alice\u200b",  # zero-width space
    "task_user:t1/a\u0301lice",  # combining accent
    "task_user:t1/ALİCE".lower(),  # dotted İ lower-cases to i + combining dot
]
OVERLONG = ["task_user:t1/" + "a" * 243, "task_user:t1/alice" + "/x" * 200]


async def _alice(gw: GatewayProcess, secrets: Secrets) -> Any:
    token = secrets.token(sub="alice", exp_in=120, channels=[ALICE_CHANNEL])
    return ws_session(gw, token)


async def _assert_nothing_leaks(gw: GatewayProcess, session: Session, spoofed: list[str]) -> None:
    """Publish into every spoofed name that is a valid channel, then a marker into alice's own
    channel: the marker must be the first publication she sees."""
    for channel in spoofed:
        await api(gw, "publish", {"channel": channel, "data": {"leak": channel}})
    await api(gw, "publish", {"channel": ALICE_CHANNEL, "data": {"marker": True}})
    async with asyncio.timeout(scaled(10)):
        while True:
            msg = await session.raw.messages.get()
            push = msg.get("push", {})
            if "pub" in push:
                assert push["channel"] == ALICE_CHANNEL and push["pub"]["data"] == {"marker": True}, push
                return


async def test_alice_subscribed_to_her_channel_from_the_token(
    security_gateway: GatewayProcess, secrets: Secrets
):
    async with await _alice(security_gateway, secrets) as alice:
        await _assert_nothing_leaks(security_gateway, alice, [])


async def test_ascii_spoofs_without_a_token_are_refused_103_and_never_normalised(
    security_gateway: GatewayProcess, secrets: Secrets
):
    async with await _alice(security_gateway, secrets) as alice:
        for channel in ASCII_SPOOFS:
            reply = await alice.call("subscribe", {"channel": channel})
            assert reply.get("error", {}).get("code") == 103, (channel, reply)
        valid = [c for c in ASCII_SPOOFS if "\x00" not in c]
        await _assert_nothing_leaks(security_gateway, alice, valid)


@pytest.mark.parametrize("channel", UNICODE_SPOOFS + OVERLONG)
async def test_unicode_look_alikes_and_overlong_names_are_107(
    security_gateway: GatewayProcess, secrets: Secrets, channel: str
):
    async with await _alice(security_gateway, secrets) as alice:
        reply = await alice.call("subscribe", {"channel": channel})
        assert reply.get("error", {}).get("code") == 107, (channel, reply)
        # Even a token minted for the look-alike name does not help: the name itself is refused.
        token = secrets.token(sub="alice", channel=channel, exp_in=60)
        reply = await alice.call("subscribe", {"channel": channel, "token": token})
        assert reply.get("error", {}).get("code") == 107, (channel, reply)
        await _assert_nothing_leaks(security_gateway, alice, [])


async def test_look_alike_namespace_is_unknown_102(security_gateway: GatewayProcess, secrets: Secrets):
    async with await _alice(security_gateway, secrets) as alice:
        reply = await alice.call("subscribe", {"channel": "t\u0430sk_user:t1/bob"})  # Cyrillic а
        assert reply.get("error", {}).get("code") in (102, 107), reply


@pytest.mark.parametrize("channel", ["task_user:t1/bob", "task_user:t1/alice/../bob", "task_user:t1/alice "])
async def test_her_own_subscription_token_on_another_name_closes_3500(
    security_gateway: GatewayProcess, secrets: Secrets, channel: str
):
    """A token minted for ``task_detail:t1/<her task>`` (or her user channel) is bound to that exact
    name: replaying it on another one is a forged request (3500, terminal)."""
    for granted in (ALICE_CHANNEL, "task_detail:t1/her-task"):
        target = channel if granted.startswith("task_user") else channel.replace("task_user", "task_detail")
        async with await _alice(security_gateway, secrets) as alice:
            token = secrets.token(sub="alice", channel=granted, exp_in=60)
            assert await subscribe_outcome(alice, target, token) == ("closed", 3500)


async def test_connect_request_subs_cannot_add_foreign_channels(
    security_gateway: GatewayProcess, secrets: Secrets
):
    """ConnectRequest.subs (what SDKs send to resubscribe) only adds channels the client could
    subscribe to itself."""
    token = secrets.token(sub="alice", exp_in=120, channels=[ALICE_CHANNEL])
    subs = {"task_user:t1/bob": {}, "task_user:t2/alice": {}, "task_detail:t1/x": {}}
    async with ws_session(security_gateway) as alice:
        reply = await alice.call("connect", {"token": token, "subs": subs})
        assert "connect" in reply or reply.get("error", {}).get("code") == 103, reply
        if "connect" in reply:
            assert set(reply["connect"].get("subs", {})) <= {ALICE_CHANNEL}, reply
            await _assert_nothing_leaks(security_gateway, alice, list(subs))


async def test_strict_channel_regex_refuses_path_tricks_with_107(
    gateway_factory: GatewayFactory, secrets: Secrets
):
    """With a per-namespace ``channel_regex`` the grammar itself refuses every trick before
    permissions are looked at; only well-formed foreign names get as far as 103."""
    regex = r"[a-z0-9_-]{1,64}/[a-z0-9_-]{1,64}"
    config = security_config()
    for ns in config["channel"]["namespaces"]:
        if ns["name"] == "task_user":
            ns["channel_regex"] = regex
    gw = gateway_factory(config)
    async with await _alice(gw, secrets) as alice:
        for channel in [c for c in ASCII_SPOOFS if c.startswith("task_user:")]:
            expected = 103 if re.fullmatch(regex, channel.split(":", 1)[1]) else 107
            reply = await alice.call("subscribe", {"channel": channel})
            assert reply.get("error", {}).get("code") == expected, (channel, reply)
        await _assert_nothing_leaks(gw, alice, [])
