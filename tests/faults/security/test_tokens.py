"""JWT attacks over the wire against a real gateway process (reliability-notes §3.2 J1–J12).

tests/gateway/test_auth.py proves the verifier in-process (every algorithm family, JWKS, key
rotation, claim types); this module proves that each refusal reaches the client as the right
Centrifugo code on a real socket and that nothing of a refused client stays on the node:
connect ⇒ close 3500 (invalid) or error 109 (expired); subscribe ⇒ error 103 (invalid), 109
(expired), close 3500 (token of another user / channel / client)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.faults.security.conftest import (
    SECRET,
    GatewayFactory,
    Secrets,
    Session,
    api,
    metrics,
    security_config,
    uid,
    wait_until,
    ws_session,
)
from tests.support import GatewayProcess

pytestmark = pytest.mark.timeout(60)

WRONG_SECRET = "not-the-gateway-secret-0123456789abcdef"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], claims: dict[str, Any], key: bytes | None) -> str:
    """A JWT built by hand (PyJWT refuses to make the malicious ones): HMAC-SHA256 with ``key``,
    or an empty signature when ``key`` is None."""
    signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    signature = b"" if key is None else hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


async def connect_outcome(gw: GatewayProcess, token: str) -> tuple[str, Any]:
    """("reply", connect result) / ("error", code) / ("closed", close code) of one connect."""
    async with ws_session(gw) as session:
        cmd_id = await session.raw.send("connect", {"token": token})
        reply_or_close = asyncio.create_task(session.raw.wait_for(lambda m: m.get("id") == cmd_id, 10))
        done, _ = await asyncio.wait(
            {reply_or_close, session.raw.closed}, return_when=asyncio.FIRST_COMPLETED
        )
        if reply_or_close in done:
            reply = reply_or_close.result()
            if "error" in reply:
                return "error", reply["error"]["code"]
            return "reply", reply["connect"]
        reply_or_close.cancel()
        return "closed", session.raw.closed.result()


async def subscribe_outcome(session: Session, channel: str, token: str) -> tuple[str, Any]:
    cmd_id = await session.raw.send("subscribe", {"channel": channel, "token": token})
    reply_or_close = asyncio.create_task(session.raw.wait_for(lambda m: m.get("id") == cmd_id, 10))
    done, _ = await asyncio.wait({reply_or_close, session.raw.closed}, return_when=asyncio.FIRST_COMPLETED)
    if reply_or_close in done:
        reply = reply_or_close.result()
        return ("error", reply["error"]["code"]) if "error" in reply else ("reply", reply["subscribe"])
    reply_or_close.cancel()
    return "closed", session.raw.closed.result()


async def assert_node_empty(gw: GatewayProcess) -> None:
    async def empty() -> bool:
        m = await metrics(gw)
        return m["centrifugo_node_num_clients"] == 0 and m["centrifugo_node_num_subscriptions"] == 0

    await wait_until(empty, 10, "no client or subscription left on the node")


def _now() -> int:
    return int(time.time())


@pytest.mark.parametrize(
    "case",
    ["alg-none", "alg-none-uppercase", "wrong-key", "unknown-alg", "nbf-future", "channel-claim"],
)
async def test_invalid_connection_tokens_close_3500(
    security_gateway: GatewayProcess, secrets: Secrets, case: str
):
    claims = {"sub": "mallory", "exp": _now() + 60}
    token = {
        "alg-none": lambda: forge({"alg": "none", "typ": "JWT"}, claims, None),
        "alg-none-uppercase": lambda: forge({"alg": "NONE", "typ": "JWT"}, claims, None),
        "wrong-key": lambda: jwt.encode(claims, WRONG_SECRET, algorithm="HS256"),
        # Only the algorithms derived from the configured keys exist, whatever the header says.
        "unknown-alg": lambda: forge({"alg": "HS999", "typ": "JWT"}, claims, SECRET.encode()),
        "nbf-future": lambda: jwt.encode({**claims, "nbf": _now() + 600}, SECRET, algorithm="HS256"),
        # A subscription token (it has `channel`) presented as a connection token: J8/J9.
        "channel-claim": lambda: jwt.encode(
            {**claims, "channel": "task_user:t1/u1"}, SECRET, algorithm="HS256"
        ),
    }[case]()
    secrets.add(token)
    assert await connect_outcome(security_gateway, token) == ("closed", 3500)
    await assert_node_empty(security_gateway)


async def test_expired_connection_token_is_error_109_and_no_expiry_no_exp(
    security_gateway: GatewayProcess, secrets: Secrets
):
    expired = secrets.token(sub="late", exp_in=-1)
    assert await connect_outcome(security_gateway, expired) == ("error", 109)
    # nbf honoured in the past, exp in the future ⇒ accepted with expiry.
    fine = secrets.token(sub="ok", exp_in=60, nbf=_now() - 5)
    kind, result = await connect_outcome(security_gateway, fine)
    assert kind == "reply" and result["expires"] is True and 50 <= result["ttl"] <= 60
    # No exp at all: accepted and the connection never expires (Centrifugo behaviour; the Status
    # API always mints short-lived tokens, see docs/RELIABILITY.md).
    kind, result = await connect_outcome(security_gateway, secrets.token(sub="forever"))
    assert kind == "reply" and "expires" not in result
    await assert_node_empty(security_gateway)


async def test_untrusted_header_fields_fetch_nothing(security_gateway: GatewayProcess, secrets: Secrets):
    """``jku``/``x5u``/``kid`` are never followed: a listener they name sees no connection."""
    hits = 0

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        claims = {"sub": "mallory", "exp": _now() + 60}
        header = {
            "alg": "HS256",
            "typ": "JWT",
            "jku": f"http://127.0.0.1:{port}/jwks.json",
            "x5u": f"http://127.0.0.1:{port}/cert.pem",
            "kid": "../../../../etc/passwd",
        }
        bad = secrets.add(forge(header, claims, WRONG_SECRET.encode()))
        assert await connect_outcome(security_gateway, bad) == ("closed", 3500)
        crit = secrets.add(
            forge({"alg": "HS256", "crit": ["x-unknown"], "x-unknown": 1}, claims, SECRET.encode())
        )
        assert await connect_outcome(security_gateway, crit) == ("closed", 3500)
    assert hits == 0


async def test_hs256_signed_with_the_rsa_public_key_is_refused(
    gateway_factory: GatewayFactory, secrets: Secrets
):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    config = security_config(client={"token": {"rsa_public_key": pem.decode()}})
    gw = gateway_factory(config)
    claims = {"sub": "mallory", "exp": _now() + 60}
    confused = secrets.add(forge({"alg": "HS256", "typ": "JWT"}, claims, pem))
    assert await connect_outcome(gw, confused) == ("closed", 3500)
    legit = secrets.add(jwt.encode(claims, key, algorithm="RS256"))
    kind, _ = await connect_outcome(gw, legit)
    assert kind == "reply"


@pytest.mark.parametrize(
    ("aud", "iss", "accepted"),
    [
        ("taskcast-board", "https://status.example", True),
        ("other-app", "https://status.example", False),
        (None, "https://status.example", False),
        ("taskcast-board", "https://evil.example", False),
        ("taskcast-board", None, False),
    ],
)
async def test_audience_and_issuer_when_configured(
    gateway_factory: GatewayFactory, secrets: Secrets, aud: str | None, iss: str | None, accepted: bool
):
    config = security_config(
        client={
            "token": {
                "hmac_secret_key": SECRET,
                "audience": "taskcast-board",
                "issuer": "https://status.example",
            }
        }
    )
    gw = gateway_factory(config)
    claims: dict[str, Any] = {"exp": _now() + 60}
    if aud is not None:
        claims["aud"] = aud
    if iss is not None:
        claims["iss"] = iss
    kind, value = await connect_outcome(gw, secrets.token(sub="u", **claims))
    assert (kind == "reply") is accepted and (accepted or value == 3500), (kind, value)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("another-user", ("closed", 3500)),
        ("another-channel", ("closed", 3500)),
        ("another-client", ("closed", 3500)),
        ("expired", ("error", 109)),
        ("nbf-future", ("error", 103)),
        ("wrong-key", ("error", 103)),
        ("alg-none", ("error", 103)),
        ("connection-token", ("error", 103)),  # no `channel` claim: not a subscription token
    ],
)
async def test_foreign_or_bad_subscription_tokens(
    security_gateway: GatewayProcess, secrets: Secrets, case: str, expected: tuple[str, int]
):
    tenant, user = "t1", f"u{uid()}"
    channel = f"task_detail:{tenant}/{uid()}"
    base = {"exp": _now() + 60, "channel": channel}
    token = {
        "another-user": lambda: secrets.token(sub="someone-else", **base),
        "another-channel": lambda: secrets.token(
            sub=user, **{**base, "channel": f"task_detail:{tenant}/other"}
        ),
        "another-client": lambda: secrets.token(sub=user, client="not-this-connection", **base),
        "expired": lambda: secrets.token(sub=user, **{**base, "exp": _now() - 1}),
        "nbf-future": lambda: secrets.token(sub=user, nbf=_now() + 600, **base),
        "wrong-key": lambda: secrets.add(jwt.encode({"sub": user, **base}, WRONG_SECRET, algorithm="HS256")),
        "alg-none": lambda: secrets.add(forge({"alg": "none"}, {"sub": user, **base}, None)),
        "connection-token": lambda: secrets.token(sub=user, exp_in=60),
    }[case]()
    async with ws_session(security_gateway, secrets.token(sub=user, exp_in=60)) as session:
        assert await subscribe_outcome(session, channel, token) == expected
        if expected[0] == "error":  # the connection survives a plain refusal ...
            listed = await api(security_gateway, "channels", {"pattern": channel})
            assert listed["result"]["channels"] == {}, listed  # ... and holds no subscription
            kind, _ = await subscribe_outcome(
                session, channel, secrets.token(sub=user, **base)
            )  # the right token still works on the same connection
            assert kind == "reply"
    await assert_node_empty(security_gateway)


async def test_subscription_token_for_this_client_id_is_accepted(
    security_gateway: GatewayProcess, secrets: Secrets
):
    user = f"u{uid()}"
    channel = f"task_detail:t1/{uid()}"
    async with ws_session(security_gateway) as session:
        reply = await session.call("connect", {"token": secrets.token(sub=user, exp_in=60)})
        client_id = reply["connect"]["client"]
        token = secrets.token(sub=user, channel=channel, client=client_id, exp_in=60)
        assert (await subscribe_outcome(session, channel, token))[0] == "reply"
