"""Issue 28, defect 2 and risk 8, the pure cores: where each hostile value is refused or cut."""

from __future__ import annotations

import time

import jwt
import pytest

from gateway.config.loading import load_settings
from gateway.connection.tokens import InvalidToken, TokenVerifier
from gateway.protocol import codes, policy
from gateway.proxy.replies import ProxyFailure, connect_grant, parse_reply

SECRET = "value-ranges-secret-of-at-least-32-bytes"
NOW_IN_MILLISECONDS = 1_764_633_600_000  # 2025-12-02 in ms: the issuer bug `exp = now * 1000` (a fixed
# value: parameters must be the same in every pytest-xdist worker)


def test_close_reason_is_cut_between_characters() -> None:
    assert codes.close_reason("short") == "short"
    cut = codes.close_reason("é" * 512)
    assert len(cut.encode()) <= codes.MAX_CLOSE_REASON_BYTES and set(cut) == {"é"}
    assert codes.close_reason("x" * 123) == "x" * 123


@pytest.mark.parametrize("code", [0, 999, 1000, 2999, 5000, 99_999])
def test_codes_a_close_frame_cannot_carry(code: int) -> None:
    assert not codes.is_close_code(code)
    with pytest.raises(ProxyFailure, match="disconnect code"):
        parse_reply({"disconnect": {"code": code, "reason": "r"}})


def test_a_long_proxy_reason_is_cut_and_the_code_kept() -> None:
    reply = parse_reply({"disconnect": {"code": 4501, "reason": "é" * 512}})
    assert reply.disconnect is not None and reply.disconnect.code == 4501
    assert len(reply.disconnect.reason.encode()) <= 123


@pytest.mark.parametrize("answer", [{"error": {"code": 2**32}}, {"error": {"code": -1}}])
def test_error_codes_past_uint32_are_unreadable(answer: dict[str, object]) -> None:
    with pytest.raises(ProxyFailure, match="out of range"):
        parse_reply(answer)


@pytest.mark.parametrize("expire_at", [2**40, 2**63, NOW_IN_MILLISECONDS])
def test_proxy_expiries_past_year_9999_are_unreadable(expire_at: int) -> None:
    with pytest.raises(ProxyFailure, match="out of range"):
        connect_grant({"user": "u", "expire_at": expire_at})
    assert connect_grant({"user": "u", "expire_at": 9_999_999_999}).expire_at == 9_999_999_999
    assert connect_grant({"user": "u", "expire_at": -5}).expire_at is None


@pytest.mark.parametrize("claim", ["exp", "expire_at"])
@pytest.mark.parametrize("value", [NOW_IN_MILLISECONDS, 2**40, 2**63, 1e20])
async def test_token_expiries_past_year_9999_are_invalid_tokens(claim: str, value: float) -> None:
    settings, _ = load_settings(None, {"CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY": SECRET})
    verifier = TokenVerifier(settings.client.token)
    token = jwt.encode({"sub": "u", claim: value}, SECRET, algorithm="HS256")
    with pytest.raises(InvalidToken, match="out of range"):
        await verifier.verify_connect(token)
    sub_token = jwt.encode({"sub": "u", "channel": "c", claim: value}, SECRET, algorithm="HS256")
    with pytest.raises(InvalidToken, match="out of range"):
        await verifier.verify_subscribe(sub_token)


def test_ttl_is_clamped_to_uint32() -> None:
    assert policy.expiry_ttl(policy.MAX_EXPIRE_AT, time.time()) == policy.MAX_TTL
    assert policy.expiry_ttl(time.time() + 10, time.time()) in (9, 10)
