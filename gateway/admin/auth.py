"""Who may use the admin web UI: the password check, the admin token it returns and the bound on
wrong passwords per client address. No I/O: the clock is injected, the HTTP side is
gateway/admin/endpoints.py. Imports nothing of the gateway but the settings.

The flow is Centrifugo's (internal/admin): ``POST <prefix>/admin/auth`` with the password returns
a token signed with ``admin.secret``; every ``<prefix>/admin/api`` call carries it as
``Authorization: token <token>``. The token is an HS256 JWT (PyJWT, the algorithm fixed here,
never taken from the token) with ``sub`` "admin", ``iat`` and ``exp`` (``admin.token_ttl``).
Changing ``admin.secret`` invalidates every token issued before.
"""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jwt

from gateway.config.sections.endpoints import AdminSettings

ALGORITHM = "HS256"
SUBJECT = "admin"

LOGIN_FAILURES_ALLOWED = 5
"""Wrong passwords one client address may send per ``LOGIN_WINDOW_SECONDS`` before its logins
are refused (429) until the window has passed."""
LOGIN_WINDOW_SECONDS = 60.0
LOGIN_ADDRESSES_TRACKED = 10000
"""Client addresses whose failures are remembered; the oldest is forgotten past this bound, so a
flood of addresses costs bounded memory."""


def password_matches(given: str, expected: str) -> bool:
    """Constant-time comparison (the time does not depend on where the strings differ); an empty
    ``expected`` matches nothing."""
    if not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True, slots=True)
class TokenIssuer:
    """Mints and verifies admin tokens with ``secret``; ``now`` is the clock (seconds)."""

    secret: str
    ttl_seconds: float
    now: Callable[[], float] = time.time

    def mint(self) -> str:
        issued = int(self.now())
        claims = {"sub": SUBJECT, "iat": issued, "exp": issued + max(1, int(self.ttl_seconds))}
        return jwt.encode(claims, self.secret, algorithm=ALGORITHM)

    def valid(self, token: str) -> bool:
        """True for a token this secret signed that has not expired (no leeway)."""
        if not self.secret or not token:
            return False
        try:
            claims = jwt.decode(
                token,
                self.secret,
                algorithms=[ALGORITHM],
                options={"require": ["exp", "sub"], "verify_exp": False},
            )
        except jwt.InvalidTokenError:
            return False
        exp = claims.get("exp")
        return claims.get("sub") == SUBJECT and isinstance(exp, int) and self.now() < exp


class LoginLimiter:
    """Counts wrong passwords per client address in a fixed window of ``window_seconds`` from
    the address's first failure; past ``allowed`` failures, ``retry_after`` says how long the
    address must wait. A right password does not reset the count (a guesser who hits it is
    not told earlier). Bounded: at most ``tracked`` addresses are remembered."""

    def __init__(
        self,
        *,
        allowed: int = LOGIN_FAILURES_ALLOWED,
        window_seconds: float = LOGIN_WINDOW_SECONDS,
        tracked: int = LOGIN_ADDRESSES_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed = allowed
        self.window = window_seconds
        self.tracked = tracked
        self.clock = clock
        self._failures: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def retry_after(self, address: str) -> float | None:
        """None when ``address`` may try a password now; else the seconds until it may."""
        entry = self._failures.get(address)
        if entry is None:
            return None
        started, count = entry
        left = started + self.window - self.clock()
        if left <= 0:
            del self._failures[address]
            return None
        return left if count >= self.allowed else None

    def failed(self, address: str) -> None:
        now = self.clock()
        started, count = self._failures.get(address, (now, 0))
        if started + self.window <= now:
            started, count = now, 0
        self._failures[address] = (started, count + 1)
        self._failures.move_to_end(address)
        while len(self._failures) > self.tracked:
            self._failures.popitem(last=False)


def token_of(headers: Mapping[str, str]) -> str:
    """The token of an ``Authorization: token <token>`` header (Centrifugo's scheme), or ""."""
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "token" else ""


class AdminAuth:
    """The admin settings' whole access rule: ``insecure`` lets everything in; otherwise a
    request needs a valid admin token, and a login the password."""

    def __init__(self, settings: AdminSettings, *, now: Callable[[], float] = time.time) -> None:
        self.insecure = settings.insecure
        self.password = settings.password
        self.tokens = TokenIssuer(settings.secret, settings.token_ttl, now)
        self.limiter = LoginLimiter()

    def authorized(self, headers: Mapping[str, str]) -> bool:
        return self.insecure or self.tokens.valid(token_of(headers))

    def login(self, password: str) -> str | None:
        """A fresh token when ``password`` is right, else None (the caller counts the failure).
        Without a password and a secret configured (``insecure``) no login succeeds."""
        if not self.tokens.secret or not password_matches(password, self.password):
            return None
        return self.tokens.mint()


__all__ = [
    "LOGIN_FAILURES_ALLOWED",
    "LOGIN_WINDOW_SECONDS",
    "AdminAuth",
    "LoginLimiter",
    "TokenIssuer",
    "password_matches",
    "token_of",
]
