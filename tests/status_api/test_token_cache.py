"""Execution tokens are verified once per token string and cached; a cached token is still
refused once its exp has passed, and a tampered token never hits the cache."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import jwt
import pytest

from status_api import tokens as tokens_module
from status_api.domain.errors import DomainError
from status_api.domain.model import ExecutionGrant
from status_api.tokens import TokenIssuer, TokenSettings

SECRET = "execution-secret-0123456789abcdefghijklmnop"
GRANT = ExecutionGrant("t1", "02_parse", "DOCUMENT.PARSE", 1, 1, "parser", frozenset({"STEP_STARTED"}))


def _issuer() -> TokenIssuer:
    return TokenIssuer(TokenSettings(execution_secret=SECRET, realtime_secret="r" * 40))


def test_a_verified_token_is_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = _issuer()
    token, _ = issuer.execution_token(GRANT, datetime.now(UTC))
    assert issuer.verify_execution(token) == GRANT
    calls = []
    real_decode = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **kw: calls.append(1) or real_decode(*a, **kw))
    assert issuer.verify_execution(token) == GRANT
    assert calls == []


def test_a_cached_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = _issuer()
    token, exp = issuer.execution_token(GRANT, datetime.now(UTC))
    assert issuer.verify_execution(token) == GRANT
    monkeypatch.setattr(tokens_module.time, "time", lambda: exp + 1)
    with pytest.raises(DomainError) as info:
        issuer.verify_execution(token)
    assert info.value.code == "EXECUTION_TOKEN_EXPIRED"


def test_a_tampered_token_is_not_served_from_the_cache() -> None:
    issuer = _issuer()
    token, _ = issuer.execution_token(GRANT, datetime.now(UTC) - timedelta(seconds=1))
    assert issuer.verify_execution(token) == GRANT
    header, payload, signature = token.split(".")
    forged = ".".join((header, payload, signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")))
    assert issuer.verify_execution(forged) is None


def test_the_seed_s_active_tasks_stay_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed §15: 20,000 active tasks, each worker reporting in turn. Round robin over more tokens
    than the cache holds would find none of them cached (an LRU under a cyclic pattern)."""
    issuer = _issuer()
    now = datetime.now(UTC)
    grants = [
        ExecutionGrant(f"t{i}", "02_parse", "DOCUMENT.PARSE", 1, 1, "parser", frozenset({"STEP_STARTED"}))
        for i in range(20_000)
    ]
    tokens = [issuer.execution_token(g, now)[0] for g in grants]
    for token in tokens:
        issuer.verify_execution(token)
    verified = []
    real = issuer._execution_claims
    monkeypatch.setattr(issuer, "_execution_claims", lambda *a: verified.append(1) or real(*a))
    assert [issuer.verify_execution(t) for t in tokens] == grants
    assert verified == []


def test_minted_tokens_are_verified_without_pyjwt(monkeypatch: pytest.MonkeyPatch) -> None:
    issuer = _issuer()
    token, _ = issuer.execution_token(GRANT, datetime.now(UTC))
    calls = []
    real_decode = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **kw: calls.append(1) or real_decode(*a, **kw))
    assert issuer.verify_execution(token) == GRANT
    assert calls == []
    assert token.split(".")[0] == tokens_module._HS256_HEAD


def _variants(issuer: TokenIssuer) -> list[str]:
    """Tokens around what the issuer mints: each differs in one thing PyJWT checks."""
    now = datetime.now(UTC)
    minted, _ = issuer.execution_token(GRANT, now)
    claims = jwt.decode(minted, options={"verify_signature": False})
    head, payload, sig = minted.split(".")

    def signed(c: dict[str, object], key: str = SECRET, alg: str = "HS256", **headers: object) -> str:
        return jwt.encode(c, key, algorithm=alg, headers=headers or None)

    def without(name: str) -> dict[str, object]:
        return {k: v for k, v in claims.items() if k != name}

    flipped = sig[:-2] + ("AA" if sig[-2:] != "AA" else "BB")
    return [
        minted,
        signed(claims),
        signed(claims, key=SECRET + "x"),
        signed(claims, key=SECRET * 2, alg="HS384"),
        signed(claims, kid="k1"),
        signed({**claims, "iss": "someone-else"}),
        signed({**claims, "typ": "other"}),
        signed({**claims, "aud": "x"}),
        signed({**claims, "nbf": int(now.timestamp()) + 3600}),
        signed({**claims, "sub": 7}),
        signed({**claims, "jti": 7}),
        signed({**claims, "iat": "soon"}),
        signed({**claims, "exp": 1}),
        signed({**claims, "extra": True}),
        signed(without("sub")),
        signed(without("exp")),
        signed(without("iss")),
        signed(without("iat")),
        f"{head}.{payload}.{flipped}",
        f"{head}.{payload}",
        f"{head}.{payload}.{sig}.x",
        f"{head}..{sig}",
        f"{head}.bm90IGpzb24.{sig}",
        f"{head}.{jwt.utils.base64url_encode(b'[1]').decode()}.{sig}",
        "not a token",
    ]


@pytest.mark.parametrize("required", [["exp", "sub", "iss"], ["exp", "sub", "iss", "iat"]])
def test_the_fast_path_accepts_only_what_pyjwt_accepts(required: list[str]) -> None:
    issuer = _issuer()
    for token in _variants(issuer):
        fast = issuer._fast_claims(token, required)
        assert fast is None or fast == issuer._pyjwt_claims(token, required), token
        assert issuer._execution_claims(token, required) == issuer._pyjwt_claims(token, required), token
    assert issuer._fast_claims(_variants(issuer)[0], required) is not None


def test_a_key_pyjwt_refuses_refuses_every_token() -> None:
    """PyJWT will not verify HS256 with a PEM-shaped secret; the fast path must not either."""
    pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"
    issuer = TokenIssuer(TokenSettings(execution_secret=pem, realtime_secret="r" * 40))
    claims = {"typ": tokens_module.EXEC_TYPE, "iss": issuer.s.execution_issuer, "sub": "p", "exp": 2**31}
    head = tokens_module._HS256_HEAD
    payload = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    mac = hmac.new(pem.encode(), f"{head}.{payload}".encode(), hashlib.sha256).digest()
    token = f"{head}.{payload}.{jwt.utils.base64url_encode(mac).decode()}"
    assert issuer._execution_claims(token, ["exp", "sub", "iss"]) is None
