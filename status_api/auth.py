"""Who is calling: service identities (bearer service JWT or per-producer keys, optionally bound to
one tenant: the JWT's ``tenant`` claim, a key's ``tenant_id``), execution tokens, and end users
(bearer JWT from the deployment's identity provider: HS, RS/ES with a PEM key, or JWKS; or the
documented dev mode). Algorithms are fixed by configuration, never taken from a token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jwt

from status_api.domain.errors import DomainError, ErrorKind, unauthenticated
from status_api.domain.model import ExecutionGrant, ServiceIdentity, UserIdentity
from status_api.tokens import EXEC_TYPE, TokenIssuer

#: How long after its expiry an event credential may still be answered an exact duplicate's first
#: result (seed §3.2): a worker retrying a timed-out request across its token's expiry.
REPLAY_GRACE_SECONDS = 86400


@dataclass(frozen=True, slots=True)
class ServiceKey:
    producer_id: str
    roles: frozenset[str]
    key_sha256: str  # hex digest of the key; the key itself need not be stored
    tenant_id: str | None = None  # None: the key may act for any tenant


@dataclass(frozen=True, slots=True)
class ServiceAuthSettings:
    mode: str = "jwt"  # "jwt" | "keys"
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    jwt_algorithms: tuple[str, ...] = ("HS256",)
    audience: str | None = None
    issuer: str | None = None
    keys: tuple[ServiceKey, ...] = ()


@dataclass(frozen=True, slots=True)
class UserAuthSettings:
    mode: str = "hs"  # "hs" | "rs" | "jwks" | "dev"
    secret: str | None = None
    public_key: str | None = None
    jwks_url: str | None = None
    algorithms: tuple[str, ...] = ("HS256",)
    audience: str | None = None
    issuer: str | None = None
    tenant_claim: str = "tenant"
    user_claim: str = "sub"
    projects_claim: str = "projects"
    leeway_seconds: int = 30


def bearer(headers: Mapping[str, str]) -> str:
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthenticated("UNAUTHENTICATED", "a bearer token is required")
    return token.strip()


class ServiceAuthenticator:
    """Verifies coordinator-side credentials; also recognizes execution tokens on the event entry."""

    def __init__(self, settings: ServiceAuthSettings, tokens: TokenIssuer) -> None:
        self.s = settings
        self.tokens = tokens
        self._keys = {k.key_sha256: k for k in settings.keys}

    def service(self, token: str) -> ServiceIdentity:
        """Raises DomainError UNAUTHENTICATED ``INVALID_SERVICE_CREDENTIAL``."""
        if self.s.mode == "keys":
            digest = hashlib.sha256(token.encode()).hexdigest()
            for known, entry in self._keys.items():
                if hmac.compare_digest(known, digest):
                    return ServiceIdentity(entry.producer_id, entry.roles, entry.tenant_id)
            raise unauthenticated("INVALID_SERVICE_CREDENTIAL", "unknown service key")
        key = self.s.jwt_public_key or self.s.jwt_secret or ""
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(self.s.jwt_algorithms),
                audience=self.s.audience,
                issuer=self.s.issuer,
                options={"require": ["exp", "sub"], "verify_aud": self.s.audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise unauthenticated("INVALID_SERVICE_CREDENTIAL", "service token rejected") from exc
        roles = claims.get("roles", [])
        if not isinstance(roles, list):
            raise unauthenticated("INVALID_SERVICE_CREDENTIAL", "roles claim must be a list")
        tenant = claims.get("tenant")
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise unauthenticated("INVALID_SERVICE_CREDENTIAL", "tenant claim must be a non-empty string")
        return ServiceIdentity(str(claims["sub"]), frozenset(str(r) for r in roles), tenant)

    def replay_producer(self, token: str) -> str | None:
        """The producer of an event credential that is correctly signed but expired (at most
        :data:`REPLAY_GRACE_SECONDS` ago), else None. Such a caller may only be answered the first
        result of an exact duplicate of its own accepted event (seed §3.2: idempotency first), never
        have anything applied."""
        ts = self.tokens.s
        try:
            c = jwt.decode(
                token,
                ts.execution_secret,
                algorithms=["HS256"],
                issuer=ts.execution_issuer,
                leeway=REPLAY_GRACE_SECONDS,
                options={"require": ["exp", "sub", "iss"]},
            )
        except jwt.PyJWTError:
            c = None
        if c is not None and c.get("typ") == EXEC_TYPE and isinstance(c.get("producerId"), str):
            return str(c["producerId"])
        if self.s.mode != "jwt":
            return None  # static keys do not expire: a rejected key is simply unknown
        try:
            claims = jwt.decode(
                token,
                self.s.jwt_public_key or self.s.jwt_secret or "",
                algorithms=list(self.s.jwt_algorithms),
                audience=self.s.audience,
                issuer=self.s.issuer,
                leeway=REPLAY_GRACE_SECONDS,
                options={"require": ["exp", "sub"], "verify_aud": self.s.audience is not None},
            )
        except jwt.PyJWTError:
            return None
        return str(claims["sub"])

    def event_caller(self, token: str) -> ExecutionGrant | ServiceIdentity:
        """An execution token (step events) or else a service credential (TASK_* events)."""
        grant = self.tokens.verify_execution(token)
        return grant if grant is not None else self.service(token)


class UserAuthenticator:
    def __init__(self, settings: UserAuthSettings) -> None:
        self.s = settings
        self._jwks = (
            jwt.PyJWKClient(settings.jwks_url or "", cache_keys=True) if settings.mode == "jwks" else None
        )
        if settings.mode in ("hs", "rs") and not (settings.secret or settings.public_key):
            raise ValueError("user_auth needs secret (hs) or public_key (rs)")

    async def authenticate(self, headers: Mapping[str, str]) -> UserIdentity:
        """Raises DomainError UNAUTHENTICATED ``INVALID_USER_TOKEN`` / ``UNAUTHENTICATED``."""
        if self.s.mode == "dev":
            # Demo only: identity from headers, no signature. Never enable in production.
            who = headers.get("x-taskcast-dev-user", "")
            tenant, _, user = who.partition("/")
            if not tenant or not user:
                raise unauthenticated("UNAUTHENTICATED", "dev mode needs X-Taskcast-Dev-User: tenant/user")
            projects = headers.get("x-taskcast-dev-projects", "")
            return UserIdentity(tenant, user, frozenset(p for p in projects.split(",") if p))
        token = bearer(headers)
        try:
            if self._jwks is not None:
                key: object = (await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)).key
            else:
                key = self.s.public_key or self.s.secret or ""
            claims = jwt.decode(
                token,
                key,  # type: ignore[arg-type]
                algorithms=list(self.s.algorithms),
                audience=self.s.audience,
                issuer=self.s.issuer,
                leeway=self.s.leeway_seconds,
                options={"require": ["exp", "sub"], "verify_aud": self.s.audience is not None},
            )
        except (jwt.PyJWTError, jwt.PyJWKClientError) as exc:
            raise unauthenticated("INVALID_USER_TOKEN", "user token rejected") from exc
        tenant_id = claims.get(self.s.tenant_claim)
        user_id = claims.get(self.s.user_claim)
        if not isinstance(tenant_id, str) or not isinstance(user_id, str) or not tenant_id or not user_id:
            raise DomainError(ErrorKind.UNAUTHENTICATED, "INVALID_USER_TOKEN", "tenant/user claims missing")
        projects = claims.get(self.s.projects_claim, [])
        if not isinstance(projects, list):  # a string would be read as its characters
            raise DomainError(
                ErrorKind.UNAUTHENTICATED, "INVALID_USER_TOKEN", "projects claim must be a list"
            )
        return UserIdentity(tenant_id, user_id, frozenset(p for p in projects if isinstance(p, str)))


def service_keys_from_config(items: Sequence[Mapping[str, object]]) -> tuple[ServiceKey, ...]:
    out = []
    for item in items:
        digest = item.get("key_sha256") or hashlib.sha256(str(item["key"]).encode()).hexdigest()
        roles = item.get("roles", [])
        tenant = item.get("tenant_id")
        out.append(
            ServiceKey(
                str(item["producer_id"]),
                frozenset(map(str, roles)),  # type: ignore[call-overload]
                str(digest),
                str(tenant) if tenant is not None else None,
            )
        )
    return tuple(out)
