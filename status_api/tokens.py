"""JWTs the Status API mints (seed §3.3, §7): execution tokens for workers, and the gateway's
connection and subscription tokens for browsers.

Realtime tokens use Centrifugo's claim names so any Centrifugo-compatible gateway verifies them with
its ``client.token`` settings: connection ``{sub, exp, iat, channels}``, subscription
``{sub, channel, exp, iat}``; ``aud``/``iss`` only when configured. The algorithm is fixed by
configuration, never read from a token (PyJWT ``algorithms=[…]``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
import orjson
from jwt.algorithms import HMACAlgorithm
from jwt.utils import base64url_decode, base64url_encode

from status_api.domain.errors import unauthenticated
from status_api.domain.model import ExecutionGrant, UserIdentity

EXEC_TYPE = "taskcast.exec"


def epoch(ts: datetime) -> int:
    return int(ts.replace(tzinfo=UTC).timestamp())


@dataclass(frozen=True, slots=True)
class TokenSettings:
    execution_secret: str
    execution_ttl_seconds: int = 3600
    execution_issuer: str = "taskcast-status-api"
    #: A step attempt's token chain (its first token and every renewal) ends this long after the
    #: first token was issued: no renewal reaches past it.
    execution_max_lifetime_seconds: int = 604800
    #: A token that expired at most this long ago may still be renewed.
    execution_renew_grace_seconds: int = 300
    #: A heartbeat's token expiring within this many seconds is renewed with it (0: never).
    execution_heartbeat_renewal_seconds: int = 1800
    realtime_algorithm: str = "HS256"
    realtime_secret: str | None = None  # HS*
    realtime_private_key: str | None = None  # RS*/ES* (PEM)
    realtime_audience: str | None = None
    realtime_issuer: str | None = None
    connection_ttl_seconds: int = 300
    subscription_ttl_seconds: int = 300
    subject_format: str = "{tenant}/{user}"


VERIFIED_CACHE_SIZE = 32_768
"""Execution tokens kept verified (one per running step attempt). Workers reporting round robin
over more running attempts than this find none of them cached (an LRU under a cyclic pattern), so
the bound covers the seed's 20,000 active tasks with room; an entry is ~1.4 KB with its token
(~45 MB full). A miss costs one verification (~10 µs on the fast path)."""

_HS256_HEAD = base64url_encode(b'{"alg":"HS256","typ":"JWT"}').decode()
"""The header segment PyJWT writes for ``algorithm="HS256"`` (tests check the minted tokens carry
it): the only header :meth:`TokenIssuer._fast_claims` verifies itself."""

_EXEC_CLAIMS = frozenset(
    (
        "typ", "iss", "sub", "iat", "exp", "taskId", "stepId", "operationCode", "taskAttempt",
        "stepAttempt", "producerId", "eventTypes", "chainIat", "jti",
    )
)  # fmt: skip
"""The claims an execution token is minted with (:meth:`TokenIssuer.execution_token`)."""


class TokenIssuer:
    """Mints and verifies the Status API's tokens. ``clock`` (the service clock) decides execution
    token expiry, so the same clock that stamps ``exp`` checks it (tests advance it by hand);
    without one, the wall clock."""

    def __init__(self, settings: TokenSettings, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock
        if not settings.execution_secret:
            raise ValueError("execution token secret is empty")
        self.s = settings
        self._rt_key = settings.realtime_private_key or settings.realtime_secret
        if not self._rt_key:
            raise ValueError("realtime token key is empty")
        self._exec_key = settings.execution_secret.encode()
        self._fast = _pyjwt_takes_hmac_key(settings.execution_secret)
        self._verified: OrderedDict[str, tuple[ExecutionGrant, int]] = OrderedDict()
        """Execution tokens already verified (a worker sends the same one with every event):
        token → (grant, exp). Bounded LRU; ``exp`` is re-checked on every use."""

    # --- execution tokens --------------------------------------------------------------------

    def execution_token(
        self, grant: ExecutionGrant, now: datetime, chain_started: int | None = None
    ) -> tuple[str, int]:
        """(token, exp) binding taskId, stepId, operationCode, attempts, producerId and event types.

        ``chain_started`` (epoch seconds) is when the attempt's first token was issued (None: now,
        a first token); it travels as ``chainIat`` so a renewal knows the chain's age, and ``exp``
        never passes ``chain_started + execution_max_lifetime_seconds``.
        """
        start = epoch(now) if chain_started is None else chain_started
        exp = min(epoch(now) + self.s.execution_ttl_seconds, start + self.s.execution_max_lifetime_seconds)
        claims = {
            "typ": EXEC_TYPE,
            "iss": self.s.execution_issuer,
            "sub": grant.producer_id,
            "iat": epoch(now),
            "exp": exp,
            "taskId": grant.task_id,
            "stepId": grant.step_id,
            "operationCode": grant.operation_code,
            "taskAttempt": grant.task_attempt,
            "stepAttempt": grant.step_attempt,
            "producerId": grant.producer_id,
            "eventTypes": sorted(grant.event_types),
            "chainIat": start,
            # Unique per token: a renewal within the same second is still a new token.
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self.s.execution_secret, algorithm="HS256"), exp

    def verify_execution(self, token: str) -> ExecutionGrant | None:
        """The grant of a valid execution token; None when the token is not one of ours.

        Raises:
            DomainError: UNAUTHENTICATED ``EXECUTION_TOKEN_EXPIRED`` for an expired execution token.
        """
        cached = self._verified.get(token)
        if cached is not None:
            grant, exp = cached
            if self._now() >= exp:
                del self._verified[token]
                raise unauthenticated("EXECUTION_TOKEN_EXPIRED", "executionToken expired")
            self._verified.move_to_end(token)
            return grant
        c = self._execution_claims(token, ["exp", "sub", "iss"])
        if c is None:
            return None
        if self._now() >= int(c["exp"]):
            raise unauthenticated("EXECUTION_TOKEN_EXPIRED", "executionToken expired")
        grant = _grant(c)
        self._verified[token] = (grant, int(c["exp"]))
        if len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return grant

    def verify_for_renewal(self, token: str, now: datetime) -> tuple[ExecutionGrant, int]:
        """(grant, chain start) of an execution token presented for renewal: the signature and
        issuer must verify; ``exp`` may have passed by at most ``execution_renew_grace_seconds``.

        Raises:
            DomainError: UNAUTHENTICATED ``EXECUTION_TOKEN_EXPIRED`` (past the grace),
                ``INVALID_EXECUTION_TOKEN`` (not an execution token of ours).
        """
        c = self._execution_claims(token, ["exp", "sub", "iss", "iat"])
        if c is None:
            raise unauthenticated("INVALID_EXECUTION_TOKEN", "not a valid executionToken")
        if epoch(now) > int(c["exp"]) + self.s.execution_renew_grace_seconds:
            raise unauthenticated("EXECUTION_TOKEN_EXPIRED", "executionToken expired past the renewal grace")
        return _grant(c), int(c.get("chainIat", c["iat"]))

    def due_on_heartbeat(self, token: str, now: datetime) -> tuple[ExecutionGrant, int] | None:
        """(grant, chain start) of a valid execution token that expires within
        ``execution_heartbeat_renewal_seconds`` of ``now``: a heartbeat sent with it is answered a
        renewal. None when the token is not due yet (the verified cache answers that without a
        decode), already ends where its chain must end (a renewal could not extend it), not one
        of ours, or heartbeat renewal is off."""
        window = self.s.execution_heartbeat_renewal_seconds
        if window <= 0:
            return None
        cached = self._verified.get(token)
        if cached is not None and cached[1] - epoch(now) > window:
            return None
        c = self._execution_claims(token, ["exp", "sub", "iss", "iat"])
        if c is None or int(c["exp"]) - epoch(now) > window:
            return None
        chain_started = int(c.get("chainIat", c["iat"]))
        if int(c["exp"]) >= chain_started + self.s.execution_max_lifetime_seconds:
            return None
        return _grant(c), chain_started

    def _execution_claims(self, token: str, required: list[str]) -> dict[str, Any] | None:
        """The claims of an execution token of ours (signature, issuer, ``typ`` and ``required``
        checked; ``exp`` is left to the caller, whose clock and grace differ); None otherwise."""
        claims = self._fast_claims(token, required) if self._fast else None
        return claims if claims is not None else self._pyjwt_claims(token, required)

    def _fast_claims(self, token: str, required: list[str]) -> dict[str, Any] | None:
        """The claims of a token exactly as this issuer mints it — PyJWT's HS256 header, a valid
        HMAC-SHA256 signature under the execution secret, a JSON object payload with only the
        minted claim names, ``required`` present, ``iss`` ours, ``typ`` an execution token, and
        the types PyJWT checks (``sub``/``jti`` strings, ``exp``/``iat`` integers) — verified
        without PyJWT (~5 µs against ~45). None for anything else: the caller then asks PyJWT,
        whose answer is authoritative, so this accepts a subset of what PyJWT accepts."""
        head, _, rest = token.partition(".")
        if head != _HS256_HEAD:
            return None
        body, dot, sig = rest.partition(".")
        if not dot or "." in sig:
            return None
        try:
            mac = base64url_decode(sig)
            raw = base64url_decode(body)
            claims = orjson.loads(raw)
        except (ValueError, TypeError, orjson.JSONDecodeError):
            return None
        expected = hmac.new(self._exec_key, f"{head}.{body}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(mac, expected) or type(claims) is not dict:
            return None
        if not _EXEC_CLAIMS.issuperset(claims) or any(claims.get(k) is None for k in required):
            return None
        if claims.get("typ") != EXEC_TYPE or claims.get("iss") != self.s.execution_issuer:
            return None
        if type(claims.get("sub", "")) is not str or type(claims.get("jti", "")) is not str:
            return None
        if any(k in claims and type(claims[k]) is not int for k in ("exp", "iat")):
            return None
        return claims

    def _pyjwt_claims(self, token: str, required: list[str]) -> dict[str, Any] | None:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self.s.execution_secret,
                algorithms=["HS256"],
                issuer=self.s.execution_issuer,
                options={"require": required, "verify_exp": False, "verify_iat": False},
            )
        except jwt.PyJWTError:
            return None
        return claims if claims.get("typ") == EXEC_TYPE else None

    def _now(self) -> float:
        return epoch(self._clock()) if self._clock is not None else time.time()

    # --- realtime (gateway) tokens -----------------------------------------------------------

    def subject(self, user: UserIdentity) -> str:
        return self.s.subject_format.format(tenant=user.tenant_id, user=user.user_id)

    def _sign(self, claims: dict[str, Any]) -> str:
        if self.s.realtime_audience:
            claims["aud"] = self.s.realtime_audience
        if self.s.realtime_issuer:
            claims["iss"] = self.s.realtime_issuer
        assert self._rt_key is not None
        return jwt.encode(claims, self._rt_key, algorithm=self.s.realtime_algorithm)

    def connection_token(
        self, user: UserIdentity, channels: list[str], now: datetime, session_id: str
    ) -> tuple[str, int]:
        """Connection JWT: ``channels`` are server-side subscriptions (the user's summary channel);
        ``meta.projects`` (server-side only) carries project memberships for the subscribe proxy."""
        exp = epoch(now) + self.s.connection_ttl_seconds
        claims: dict[str, Any] = {
            "sub": self.subject(user),
            "iat": epoch(now),
            "exp": exp,
            "channels": channels,
            "info": {"sessionId": session_id},
        }
        if user.projects:
            # Server-side only (never shown to the client); the subscribe proxy reads project
            # membership from it (status_api/subscribe_proxy.py).
            claims["meta"] = {"projects": sorted(user.projects)}
        return self._sign(claims), exp

    def subscription_token(self, user: UserIdentity, channel: str, now: datetime) -> tuple[str, int]:
        """Subscription JWT bound to ``sub`` + ``channel`` + a short ``exp`` (seed §7.2)."""
        exp = epoch(now) + self.s.subscription_ttl_seconds
        return self._sign({"sub": self.subject(user), "channel": channel, "iat": epoch(now), "exp": exp}), exp


def _pyjwt_takes_hmac_key(secret: str) -> bool:
    """Whether PyJWT verifies HS256 with ``secret`` (it refuses PEM- and SSH-shaped keys: then
    every execution token is refused, and the fast path must not accept one either)."""
    try:
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(secret)
    except jwt.PyJWTError:
        return False
    return True


def _grant(c: dict[str, Any]) -> ExecutionGrant:
    return ExecutionGrant(
        task_id=c["taskId"],
        step_id=c["stepId"],
        operation_code=c["operationCode"],
        task_attempt=int(c["taskAttempt"]),
        step_attempt=int(c["stepAttempt"]),
        producer_id=c["producerId"],
        event_types=frozenset(c["eventTypes"]),
    )
