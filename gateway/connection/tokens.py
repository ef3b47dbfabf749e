"""Connection and subscription JWT verification (PROTOCOL.md §5), with PyJWT's algorithms.

``TokenVerifier`` owns key material for one ``client.token``/``client.subscription_token`` section:
PEM keys are parsed once at construction, JWKS keys are fetched with httpx and cached by ``kid``.
The set of acceptable algorithms comes from the settings (``TokenSettings.algorithms``); the token
header only picks one of them, and each algorithm family is bound to its own key (so an HS256 token
can never be checked against an RSA public key). ``exp``/``nbf`` are checked against an injected
clock. Error messages never contain the token or any key. This module reads no environment and
imports nothing from the gateway but ``config.schema`` and the pure ``protocol.policy``
(whose ``Override`` is the claims' ``override`` value).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import orjson
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from jwt.algorithms import Algorithm, get_default_algorithms
from jwt.exceptions import PyJWTError

from gateway.config.schema import TokenSettings
from gateway.protocol.jsonbytes import dumps_kept
from gateway.protocol.policy import Override as SubscriptionOverride
from gateway.protocol.policy import expire_at_in_range

__all__ = [
    "ConnectToken",
    "InvalidToken",
    "KeysUnavailable",
    "ServerSideSub",
    "SubscribeToken",
    "SubscriptionOverride",
    "TokenError",
    "TokenExpired",
    "TokenVerifier",
]


class TokenError(Exception):
    """Base class of token verification failures."""


class InvalidToken(TokenError):
    """Bad signature, malformed token, disallowed algorithm, aud/iss mismatch, ``nbf`` in the
    future, a ``channel`` claim in a connection token, or a claim of the wrong type.
    Connect answers disconnect 3500; subscribe answers error 103."""


class TokenExpired(TokenError):
    """``exp`` has passed (no leeway). Connect/subscribe answer error 109 so the SDK refreshes."""


class KeysUnavailable(TokenError):
    """The JWKS endpoint could not be read (network, HTTP status, bad document). Temporary: answer
    an internal error (100) rather than rejecting the token."""


@dataclass(frozen=True, slots=True)
class ServerSideSub:
    """One entry of a connection token's ``subs`` map. ``info``/``data`` are raw JSON bytes, or
    the decoded ``b64info``/``b64data`` bytes, which take precedence."""

    info: bytes | None = None
    data: bytes | None = None
    override: SubscriptionOverride | None = None


@dataclass(frozen=True, slots=True)
class ConnectToken:
    """A verified connection token.

    ``expire_at``: connection expiry (unix seconds) from ``expire_at`` (0 ⇒ None) or else ``exp``;
    None = never expires. It may already be in the past when ``expire_at`` was given explicitly;
    the caller decides (connect ⇒ 109, refresh ⇒ 110). ``channels`` is empty when ``subs`` is
    present (Centrifugo ignores ``channels`` then). ``meta`` is server-side only.
    """

    user: str
    expire_at: int | None
    info: bytes | None
    channels: tuple[str, ...]
    subs: dict[str, ServerSideSub]
    meta: bytes | None


@dataclass(frozen=True, slots=True)
class SubscribeToken:
    """A verified subscription token. The caller must check ``user`` against the connection's
    user, ``channel`` against the requested channel and a non-empty ``client`` against the
    connection's client id (mismatch ⇒ 3500)."""

    user: str
    channel: str
    client: str
    expire_at: int | None
    info: bytes | None
    data: bytes | None
    override: SubscriptionOverride | None


@dataclass(frozen=True, slots=True)
class _JwksKey:
    keys: Mapping[str, Any]  # algorithm → key prepared for it by PyJWT (curve checked for ES*)


_JWKS_FAMILY = {"RSA": frozenset({"RS256", "RS384", "RS512"}), "OKP": frozenset({"EdDSA"})}
_OVERRIDE_FIELDS = ("presence", "join_leave", "force_push_join_leave", "force_recovery", "force_positioning")


class TokenVerifier:
    """Verifies tokens for one token section. Safe to share between all connections.

    ``now`` is the clock for exp/nbf and JWKS refetch throttling. ``http`` is used for JWKS
    requests when given (the caller owns and closes it); otherwise a short-lived client is made
    per fetch (fetches are rare). ``skip_signature`` is ``client.insecure_skip_token_signature_verify``:
    claims are still checked, the signature is not. JWKS: a token with an unknown ``kid`` triggers
    a refetch at most once per ``jwks_refetch_interval`` seconds; keys older than
    ``jwks_cache_ttl`` are refetched on use (the old ones are kept if that fails).

    Raises ``ValueError`` from the constructor when a configured key cannot be loaded (the config
    loader already rejects those, so this only happens with hand-built settings).
    """

    def __init__(
        self,
        settings: TokenSettings,
        *,
        now: Callable[[], float] = time.time,
        http: httpx.AsyncClient | None = None,
        skip_signature: bool = False,
        jwks_timeout: float = 5.0,
        jwks_refetch_interval: float = 10.0,
        jwks_cache_ttl: float = 3600.0,
    ) -> None:
        self._settings = settings
        self._now = now
        self._http = http
        self._skip_signature = skip_signature
        self._jws = jwt.PyJWS()
        all_algorithms = get_default_algorithms()
        self._algorithms: dict[str, Algorithm] = {name: all_algorithms[name] for name in settings.algorithms}
        try:
            self._static_keys = {} if settings.jwks_public_endpoint else self._load_static_keys(settings)
            self._previous_hmac: Any = None
            if settings.hmac_previous_secret_key and not settings.jwks_public_endpoint:
                self._previous_hmac = self._algorithms["HS256"].prepare_key(
                    settings.hmac_previous_secret_key.encode()
                )
        except (PyJWTError, ValueError, TypeError) as exc:
            raise ValueError(f"cannot load a token verification key ({type(exc).__name__})") from None
        self._audience_re = _compile(settings.audience_regex)
        self._issuer_re = _compile(settings.issuer_regex)
        self._user_path = tuple(settings.user_id_claim.split(".")) if settings.user_id_claim else ("sub",)
        self._jwks_timeout = jwks_timeout
        self._jwks_refetch_interval = jwks_refetch_interval
        self._jwks_cache_ttl = jwks_cache_ttl
        self._jwks: dict[str, _JwksKey] = {}
        self._jwks_loaded_at: float | None = None
        self._jwks_attempt_at: float | None = None
        self._jwks_failed = False
        self._jwks_lock = asyncio.Lock()

    def _load_static_keys(self, settings: TokenSettings) -> dict[str, Any]:
        """Algorithm → key prepared by PyJWT for it, PEM parsed once. An ES algorithm whose curve
        does not match the configured key gets no entry (tokens using it are rejected)."""
        sources: dict[str, Any] = {"HS": settings.hmac_secret_key.encode()}
        for prefix, pem in (("RS", settings.rsa_public_key), ("ES", settings.ecdsa_public_key)):
            if pem:
                sources[prefix] = load_pem_public_key(pem.encode())
        return _prepare(self._algorithms, lambda alg: sources.get(alg[:2]))

    async def verify_connect(self, token: str) -> ConnectToken:
        """Verify a connection token and return its claims.

        Raises:
            InvalidToken: see the class; includes a non-empty ``channel`` claim.
            TokenExpired: ``exp`` has passed.
            KeysUnavailable: the JWKS endpoint could not be read.
        """
        claims = await self._decode(token)
        if claims.get("channel"):
            raise InvalidToken("connection token must not contain a channel claim")
        user = self._check_claims(claims)
        subs_claim = claims.get("subs")
        subs: dict[str, ServerSideSub] = {}
        channels: tuple[str, ...] = ()
        if subs_claim is not None:
            if not isinstance(subs_claim, dict):
                raise InvalidToken("invalid subs claim")
            for channel, sub in subs_claim.items():
                if not isinstance(sub, dict):
                    raise InvalidToken("invalid subs claim")
                subs[channel] = ServerSideSub(
                    info=_bytes_claim(sub, "info", "b64info"),
                    data=_bytes_claim(sub, "data", "b64data"),
                    override=_override(sub.get("override")),
                )
        else:
            channels_claim = claims.get("channels")
            if channels_claim is not None:
                if not isinstance(channels_claim, list) or not all(
                    isinstance(c, str) for c in channels_claim
                ):
                    raise InvalidToken("invalid channels claim")
                channels = tuple(channels_claim)
        return ConnectToken(
            user=user,
            expire_at=_expire_at(claims),
            info=_bytes_claim(claims, "info", "b64info"),
            channels=channels,
            subs=subs,
            meta=_raw_json(claims.get("meta")),
        )

    async def verify_subscribe(self, token: str) -> SubscribeToken:
        """Verify a subscription token and return its claims (``channel`` is required).

        Raises:
            InvalidToken: see the class; includes a missing or empty ``channel`` claim.
            TokenExpired: ``exp`` has passed.
            KeysUnavailable: the JWKS endpoint could not be read.
        """
        claims = await self._decode(token)
        user = self._check_claims(claims)
        channel = claims.get("channel")
        if not isinstance(channel, str) or not channel:
            raise InvalidToken("subscription token needs a channel claim")
        client = claims.get("client", "")
        if not isinstance(client, str):
            raise InvalidToken("invalid client claim")
        return SubscribeToken(
            user=user,
            channel=channel,
            client=client,
            expire_at=_expire_at(claims),
            info=_bytes_claim(claims, "info", "b64info"),
            data=_bytes_claim(claims, "data", "b64data"),
            override=_override(claims.get("override")),
        )

    async def _decode(self, token: str) -> dict[str, Any]:
        """Parse once, verify the signature, return the claims object."""
        try:
            parts = self._jws.decode_complete(token, options={"verify_signature": False})
            claims = orjson.loads(parts["payload"])
        except (PyJWTError, ValueError, TypeError):
            raise InvalidToken("malformed token") from None
        if not isinstance(claims, dict):
            raise InvalidToken("malformed token: claims are not an object")
        if self._skip_signature:
            return claims
        header: dict[str, Any] = parts["header"]
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise InvalidToken("token algorithm is not allowed")
        signing_input = token.encode().rsplit(b".", 1)[0]
        signature: bytes = parts["signature"]
        if self._settings.jwks_public_endpoint:
            kid = header.get("kid")
            if not isinstance(kid, str) or not kid:
                raise InvalidToken("token has no kid header")
            jwk = await self._jwks_key(kid)
            if alg not in jwk.keys:
                raise InvalidToken("token algorithm does not match its key")
            keys = [jwk.keys[alg]]
        else:
            keys = self._keys_for(alg)
        algorithm = self._algorithms[alg]
        if not any(_verify(algorithm, signing_input, key, signature) for key in keys):
            raise InvalidToken("invalid token signature")
        return claims

    def _keys_for(self, alg: str) -> list[Any]:
        keys = [self._static_keys[alg]] if alg in self._static_keys else []
        if self._previous_hmac is not None and alg.startswith("HS"):
            until = self._settings.hmac_previous_secret_key_valid_until
            if until == 0 or self._now() < until:
                keys.append(self._previous_hmac)
        return keys

    def _check_claims(self, claims: Mapping[str, Any]) -> str:
        """aud/iss (when configured), nbf, exp; returns the user id."""
        s = self._settings
        if s.audience or self._audience_re:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(_matches(a, s.audience, self._audience_re) for a in auds):
                raise InvalidToken("token audience is not accepted")
        if s.issuer or self._issuer_re:
            iss = claims.get("iss")
            if not _matches(iss, s.issuer, self._issuer_re):
                raise InvalidToken("token issuer is not accepted")
        now = self._now()
        nbf = _number(claims, "nbf")
        if nbf is not None and nbf > now:
            raise InvalidToken("token is not valid yet (nbf)")
        exp = _number(claims, "exp")
        if exp is not None and exp <= now:
            raise TokenExpired("token expired")
        user: Any = claims
        for part in self._user_path:
            user = user.get(part) if isinstance(user, dict) else None
        if user is None:
            return ""
        if isinstance(user, str):
            return user
        if isinstance(user, int) and not isinstance(user, bool) and self._settings.user_id_claim:
            return str(user)
        raise InvalidToken("invalid user id claim")

    async def _jwks_key(self, kid: str) -> _JwksKey:
        entry = self._jwks.get(kid)
        if entry is not None and not self._jwks_stale():
            return entry
        async with self._jwks_lock:
            entry = self._jwks.get(kid)
            if entry is not None and not self._jwks_stale():
                return entry
            now = self._now()
            if self._jwks_attempt_at is None or now - self._jwks_attempt_at >= self._jwks_refetch_interval:
                self._jwks_attempt_at = now
                try:
                    await self._fetch_jwks()
                except KeysUnavailable:
                    if entry is None:
                        raise
                    return entry  # stale but still the best we have
            elif entry is None and self._jwks_failed:
                raise KeysUnavailable("JWKS endpoint unavailable (retry throttled)")
            entry = self._jwks.get(kid)
        if entry is None:
            raise InvalidToken("token key id is unknown")
        return entry

    def _jwks_stale(self) -> bool:
        return self._jwks_loaded_at is None or self._now() - self._jwks_loaded_at >= self._jwks_cache_ttl

    async def _fetch_jwks(self) -> None:
        url = self._settings.jwks_public_endpoint
        try:
            async with asyncio.timeout(self._jwks_timeout):
                if self._http is not None:
                    response = await self._http.get(url, timeout=self._jwks_timeout)
                else:
                    async with httpx.AsyncClient(timeout=self._jwks_timeout) as http:
                        response = await http.get(url)
            response.raise_for_status()
            document = response.json()
        except (httpx.HTTPError, TimeoutError, ValueError) as exc:
            self._jwks_failed = True
            raise KeysUnavailable(f"JWKS endpoint unavailable ({type(exc).__name__})") from None
        keys = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(keys, list):
            self._jwks_failed = True
            raise KeysUnavailable("JWKS endpoint returned no keys list")
        parsed = (_parse_jwk(item) for item in keys)
        self._jwks = {kid: key for kid, key in parsed if key is not None}
        self._jwks_loaded_at = self._now()
        self._jwks_failed = False


def _parse_jwk(item: object) -> tuple[str, _JwksKey | None]:
    """(kid, key) of one JWKS entry; ("", None) for entries that cannot verify our tokens."""
    if (
        not isinstance(item, dict)
        or item.get("use", "sig") != "sig"
        or not isinstance(item.get("kid"), str)
        or item.get("kty") not in ("RSA", "EC", "OKP")  # never symmetric keys from a URL
    ):
        return "", None
    try:
        jwk = jwt.PyJWK(item)
    except (PyJWTError, KeyError, ValueError, TypeError):
        return "", None
    explicit = item.get("alg")
    if isinstance(explicit, str):
        algorithms = frozenset({explicit})
    else:
        algorithms = _JWKS_FAMILY.get(str(jwk.key_type), frozenset({jwk.algorithm_name}))
    all_algorithms = get_default_algorithms()
    usable = {alg: all_algorithms[alg] for alg in algorithms if alg in all_algorithms}
    return item["kid"], _JwksKey(keys=_prepare(usable, lambda _alg: jwk.key))


def _prepare(algorithms: Mapping[str, Algorithm], source: Callable[[str], Any]) -> dict[str, Any]:
    """Algorithm → ``source(alg)`` prepared by that algorithm; incompatible keys are left out."""
    prepared: dict[str, Any] = {}
    for name, algorithm in algorithms.items():
        key = source(name)
        if key is None:
            continue
        try:
            prepared[name] = algorithm.prepare_key(key)
        except PyJWTError:
            continue
    return prepared


def _verify(algorithm: Algorithm, signing_input: bytes, key: Any, signature: bytes) -> bool:
    try:
        return algorithm.verify(signing_input, key, signature)
    except (ValueError, TypeError, PyJWTError):
        return False


def _compile(pattern: str) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def _matches(value: object, exact: str, regex: re.Pattern[str] | None) -> bool:
    if not isinstance(value, str):
        return False
    if regex is not None:
        return regex.search(value) is not None
    return value == exact


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"invalid {name} claim")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidToken(f"invalid {name} claim")
    return number


def _expire_at(claims: Mapping[str, Any]) -> int | None:
    """``expire_at`` (0 = never) or else ``exp``, refused when out of range (``exp`` in
    milliseconds, 2^63, 1e20: ``policy.MAX_EXPIRE_AT``) so no reply carries an unencodable ttl."""
    name = "expire_at" if claims.get("expire_at") is not None else "exp"
    value = _number(claims, name)
    if value is None:
        return None
    if not expire_at_in_range(value):
        raise InvalidToken(f"{name} claim out of range (unix seconds expected)")
    if name == "expire_at":
        return int(value) or None
    return int(value)


def _raw_json(value: object) -> bytes | None:
    return None if value is None else dumps_kept(value)  # kept per connection (jsonbytes.py)


def _bytes_claim(claims: Mapping[str, Any], raw_name: str, b64_name: str) -> bytes | None:
    """``b64<name>`` (standard base64) wins over the raw-JSON ``<name>`` claim."""
    encoded = claims.get(b64_name)
    if encoded is not None:
        if not isinstance(encoded, str):
            raise InvalidToken(f"invalid {b64_name} claim")
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidToken(f"invalid {b64_name} claim") from None
    return _raw_json(claims.get(raw_name))


def _override(value: object) -> SubscriptionOverride | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidToken("invalid override claim")
    flags: dict[str, bool | None] = {}
    for name in _OVERRIDE_FIELDS:
        item = value.get(name)
        if item is None:
            flags[name] = None
            continue
        flag = item.get("value") if isinstance(item, dict) else None
        if not isinstance(flag, bool):
            raise InvalidToken("invalid override claim")
        flags[name] = flag
    return SubscriptionOverride(**flags)
