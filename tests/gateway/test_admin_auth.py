"""The admin UI's access rule (gateway/admin/auth.py), pure: the password check, the admin token's
signature and lifetime, the bound on wrong passwords per address; the admin options' checks."""

from __future__ import annotations

import json
from pathlib import Path

import jwt
import pytest

from gateway.admin.auth import (
    LOGIN_FAILURES_ALLOWED,
    LOGIN_WINDOW_SECONDS,
    AdminAuth,
    LoginLimiter,
    TokenIssuer,
    password_matches,
    token_of,
)
from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings
from gateway.config.sections.endpoints import AdminSettings


def load(config: dict[str, object], tmp_path: Path) -> tuple[Settings, list[str]]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_settings(str(path), {})


SECRET = "an-admin-secret-long-enough-for-hs512-which-wants-64-bytes-of-key"


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    ("given", "expected", "ok"),
    [
        ("s3cret", "s3cret", True),
        ("s3cre", "s3cret", False),
        ("", "", False),
        ("x", "", False),
        ("é", "é", True),
    ],
)
def test_password_matches_only_the_configured_one(given: str, expected: str, ok: bool) -> None:
    assert password_matches(given, expected) is ok


def test_a_token_is_valid_until_its_lifetime_ends_and_only_for_its_secret() -> None:
    clock = Clock()
    issuer = TokenIssuer(SECRET, 3600, clock)
    token = issuer.mint()
    assert issuer.valid(token)
    clock.t += 3599
    assert issuer.valid(token)
    clock.t += 1
    assert not issuer.valid(token)
    assert not TokenIssuer(SECRET + "2", 3600, Clock()).valid(issuer.mint())


@pytest.mark.parametrize(
    "claims",
    [
        {"sub": "someone", "exp": 2_000_000},  # not an admin token
        {"sub": "admin"},  # no expiry
    ],
)
def test_tokens_this_issuer_did_not_mint_are_refused(claims: dict[str, object]) -> None:
    issuer = TokenIssuer(SECRET, 3600, Clock())
    assert not issuer.valid(jwt.encode(claims, SECRET, algorithm="HS256"))
    assert not issuer.valid(jwt.encode({"sub": "admin", "exp": 2_000_000}, SECRET, algorithm="HS512"))
    assert not issuer.valid("not-a-jwt")
    assert not issuer.valid("")


def test_failed_logins_are_bounded_per_address_for_a_window() -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for _ in range(LOGIN_FAILURES_ALLOWED):
        assert limiter.retry_after("10.0.0.1") is None
        limiter.failed("10.0.0.1")
    wait = limiter.retry_after("10.0.0.1")
    assert wait is not None and 0 < wait <= LOGIN_WINDOW_SECONDS
    assert limiter.retry_after("10.0.0.2") is None  # another address is not affected
    clock.t += LOGIN_WINDOW_SECONDS
    assert limiter.retry_after("10.0.0.1") is None


def test_the_limiter_remembers_a_bounded_number_of_addresses() -> None:
    limiter = LoginLimiter(allowed=1, tracked=3, clock=Clock())
    for i in range(10):
        limiter.failed(f"a{i}")
    assert limiter.retry_after("a0") is None  # forgotten
    assert limiter.retry_after("a9") is not None


def test_authorization_header_scheme_is_token() -> None:
    assert token_of({"authorization": "token abc"}) == "abc"
    assert token_of({"authorization": "Token  abc "}) == "abc"
    assert token_of({"authorization": "Bearer abc"}) == ""
    assert token_of({}) == ""


def test_login_returns_a_token_only_for_the_password() -> None:
    auth = AdminAuth(AdminSettings(enabled=True, password="pw", secret=SECRET))
    assert auth.login("nope") is None
    token = auth.login("pw")
    assert token is not None and auth.authorized({"authorization": f"token {token}"})
    assert not auth.authorized({})
    insecure = AdminAuth(AdminSettings(enabled=True, insecure=True))
    assert insecure.authorized({}) and insecure.login("") is None


def test_admin_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load({"admin": {"enabled": True, "secret": "s"}}, tmp_path)
    assert err.value.option == "admin.password"
    with pytest.raises(ConfigError) as err:
        load({"admin": {"enabled": True, "password": "p"}}, tmp_path)
    assert err.value.option == "admin.secret"
    with pytest.raises(ConfigError) as err:
        load({"admin": {"enabled": True, "insecure": True, "handler_prefix": "ui"}}, tmp_path)
    assert err.value.option == "admin.handler_prefix"
    with pytest.raises(ConfigError) as err:  # the page would shadow /health
        load(
            {
                "admin": {"enabled": True, "insecure": True, "handler_prefix": "/health"},
                "health": {"enabled": True},
            },
            tmp_path,
        )
    assert err.value.option == "admin.handler_prefix"
    settings, warnings = load(
        {"admin": {"enabled": True, "password": "p", "secret": SECRET, "token_ttl": "2h"}}, tmp_path
    )
    assert not [w for w in warnings if "admin" in w]
    assert settings.admin.token_ttl == 7200
    assert (
        settings.redacted()["admin"]["password"] == "***" and settings.redacted()["admin"]["secret"] == "***"
    )
    _, warnings = load({"admin": {"enabled": True, "insecure": True}}, tmp_path)
    assert any(w.startswith("admin.insecure is true") for w in warnings)
