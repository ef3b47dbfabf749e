"""Execution tokens are verified once per token string and cached; a cached token is still
refused once its exp has passed, and a tampered token never hits the cache."""

from __future__ import annotations

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
