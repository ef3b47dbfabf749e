"""A Centrifugo HTTP subscribe proxy for ``task_detail:`` channels (seed §6.5).

The gateway (Centrifugo's ``channel.proxy.subscribe`` / ``channel.proxy.sub_refresh``, or
Taskcast's own gateway) posts the proxy request bodies Centrifugo sends —
``{"client", "transport", "protocol", "encoding", "user", "channel", "meta"?, "data"?, "b64data"?}``
— to ``POST /proxy/v1/subscribe`` and ``POST /proxy/v1/sub-refresh``, and gets the answers it
expects: ``{"result": {...}}`` to allow, ``{"error": {"code", "message"}}`` to refuse
(103 permission denied: the task is not visible to ``user``; 106 limit exceeded: the
connection's or the user's detail quota is used up). With it a deployment can stop issuing
subscription tokens for detail channels: the final authorisation stays on the server.

Authentication: the shared ``subscribe_proxy.secret`` in the ``subscribe_proxy.header`` header
(configure it as a static proxy header on the gateway); compared in constant time, never logged.
A wrong or missing secret is HTTP 401, a malformed body HTTP 422 (the gateway then answers its
client with an internal error, as Centrifugo does for a failing proxy).

Identity: ``user`` is the connection's subject in ``realtime.subject_format``
(``{tenant}/{user}`` by default); project membership comes from ``meta.projects`` (a list of
strings), which only the issuer of the connection (its JWT's ``meta`` claim, or a connect proxy)
can set. The ACL is the one of the token path (:meth:`UserIdentity.can_view`).

Quota (seed §6.5): the token path's, shared with it. Each connection (the ``client`` id) holds at
most ``realtime.max_detail_subscriptions_per_session`` live leases, and the user at most
``realtime.max_detail_subscriptions_per_user`` distinct tasks over ALL their holders — every
connection (a reconnect or token refresh is a new one and resets nothing) and every token-path
session. Checked and granted in one transaction under the user's quota lock in the database
(status_api/storage/sessions.py), so concurrent subscribes on any number of Status API replicas
never get past either limit. A lease lasts ``subscribe_proxy.lease_seconds``; with
``subscribe_proxy.refresh`` the answer carries ``expire_at`` and the gateway's sub_refresh proxy
renews it (re-checking the ACL), so a slot frees itself within one lease after the client
unsubscribes or disconnects, or at once when the client releases it
(``POST /api/realtime/subscription-release``: what client-js does when it evicts the oldest
invisible detail on a 106).
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import DBAPIError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from status_api.config import Config
from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import UserIdentity
from status_api.domain.projections import Projection
from status_api.http import guard, read_json
from status_api.queries import TaskQueries
from status_api.storage import proxy_leases
from status_api.storage import repository as repo
from status_api.storage.database import is_retryable
from status_api.storage.sessions import Grant
from status_api.tokens import epoch

log = logging.getLogger("status_api.subscribe_proxy")

#: Centrifugo's client error codes the proxy answers with (gateway/protocol/codes.py).
PERMISSION_DENIED = {"code": 103, "message": "permission denied"}
LIMIT_EXCEEDED = {"code": 106, "message": "limit exceeded"}
_ATTEMPTS = 5
_MAX_ID = 64 - len(proxy_leases.KEY_PREFIX)


def subject_pattern(subject_format: str) -> re.Pattern[str]:
    """The inverse of ``realtime.subject_format``: a pattern with ``tenant``/``user`` groups."""
    out = ""
    for part in re.split(r"(\{tenant\}|\{user\})", subject_format):
        if part == "{tenant}":
            out += r"(?P<tenant>[^/]+?)"
        elif part == "{user}":
            out += r"(?P<user>.+?)"
        else:
            out += re.escape(part)
    return re.compile(out)


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    client: str
    user: str
    channel: str
    projects: frozenset[str]


def parse_request(body: Any) -> ProxyRequest:
    """Centrifugo's SubscribeRequest / SubRefreshRequest JSON (extra fields are ignored, as
    Centrifugo adds some over versions).

    Raises:
        DomainError: ``INVALID_PROXY_REQUEST``.
    """
    if not isinstance(body, dict):
        raise invalid("INVALID_PROXY_REQUEST", "body must be an object")
    fields = {}
    for name, bound in (("client", _MAX_ID), ("user", 200), ("channel", 300)):
        value = body.get(name)
        if not isinstance(value, str) or not value or len(value) > bound:
            raise invalid("INVALID_PROXY_REQUEST", f"{name} must be a non-empty string of at most {bound}")
        fields[name] = value
    meta = body.get("meta")
    raw = meta.get("projects") if isinstance(meta, dict) else None
    projects = frozenset(p for p in raw if isinstance(p, str)) if isinstance(raw, list) else frozenset()
    return ProxyRequest(fields["client"], fields["user"], fields["channel"], projects)


@dataclass
class SubscribeProxy:
    enabled: bool
    secret: bytes
    header: str
    lease_seconds: int
    refresh: bool
    limit: int
    user_limit: int
    queries: TaskQueries
    subject: re.Pattern[str]

    @classmethod
    def from_config(cls, cfg: Config, queries: TaskQueries) -> SubscribeProxy:
        sp = cfg.subscribe_proxy
        return cls(
            enabled=sp.enabled,
            secret=(sp.secret or "").encode(),
            header=sp.header.lower(),
            lease_seconds=sp.lease_seconds or cfg.realtime.subscription_ttl_seconds,
            refresh=sp.refresh,
            limit=cfg.realtime.max_detail_subscriptions_per_session,
            user_limit=cfg.realtime.max_detail_subscriptions_per_user,
            queries=queries,
            subject=subject_pattern(cfg.realtime.subject_format),
        )

    def authorized(self, headers: Any) -> bool:
        given = str(headers.get(self.header, "")).encode()
        return bool(self.secret) and hmac.compare_digest(given, self.secret)

    def _target(self, req: ProxyRequest) -> tuple[UserIdentity, str] | None:
        """The identity and task of a ``task_detail:{tenant}/{taskId}`` request, or None."""
        prefix = Projection.TASK_DETAIL.namespace + ":"
        if not req.channel.startswith(prefix):
            return None
        tenant, sep, task_id = req.channel[len(prefix) :].partition("/")
        m = self.subject.fullmatch(req.user)
        if not sep or not task_id or m is None:
            return None
        groups = m.groupdict()
        user_tenant = groups.get("tenant") or tenant
        if user_tenant != tenant or not groups.get("user"):
            return None
        return UserIdentity(tenant, groups["user"], req.projects), task_id

    async def decide(self, req: ProxyRequest, *, refreshing: bool) -> dict[str, Any]:
        """The proxy answer for one (sub-)subscribe request."""
        target = self._target(req)
        engine = self.queries.engine
        if target is not None:
            user, task_id = target
            async with engine.connect() as conn:
                task = (await repo.get_tasks(conn, [task_id])).get(task_id)
            if task is None or not user.can_view(task):
                target = None
        if target is None:
            return {"result": {"expired": True}} if refreshing else {"error": PERMISSION_DENIED}
        now = self.queries.service.clock()
        until = now + timedelta(seconds=self.lease_seconds)
        key = proxy_leases.connection_key(req.client)
        for attempt in range(_ATTEMPTS):
            try:
                async with engine.begin() as conn:
                    granted = await proxy_leases.acquire(
                        conn,
                        key,
                        user.tenant_id,
                        user.user_id,
                        task_id,
                        now,
                        until,
                        per_connection=self.limit,
                        per_user=self.user_limit,
                    )
                break
            except DBAPIError as exc:
                if not is_retryable(exc) or attempt == _ATTEMPTS - 1:
                    raise
        if granted is not Grant.GRANTED:
            refused = PERMISSION_DENIED if granted is proxy_leases.Refusal.FOREIGN else LIMIT_EXCEEDED
            return {"result": {"expired": True}} if refreshing else {"error": refused}
        return {"result": {"expire_at": epoch(until)} if self.refresh else {}}


def _proxy(request: Request) -> SubscribeProxy:
    proxy: SubscribeProxy = request.app.state.subscribe_proxy
    if not proxy.enabled:
        raise DomainError(ErrorKind.NOT_FOUND, "NOT_FOUND", "the subscribe proxy is disabled")
    if not proxy.authorized(request.headers):
        log.warning("subscribe proxy: request without the shared secret from %s", _peer(request))
        raise DomainError(ErrorKind.UNAUTHENTICATED, "PROXY_UNAUTHENTICATED", "proxy secret missing or wrong")
    return proxy


def _peer(request: Request) -> str:
    return request.client.host if request.client else "?"


async def _answer(request: Request, refreshing: bool) -> Response:
    proxy = _proxy(request)
    req = parse_request(await read_json(request))
    reply = await proxy.decide(req, refreshing=refreshing)
    outcome = "granted" if "result" in reply and not reply["result"].get("expired") else "refused"
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.subscribe_proxy("sub_refresh" if refreshing else "subscribe", outcome)
    return JSONResponse(reply)


@guard
async def subscribe(request: Request) -> Response:
    """``POST /proxy/v1/subscribe``: Centrifugo's subscribe proxy request → allow / 103 / 106."""
    return await _answer(request, refreshing=False)


@guard
async def sub_refresh(request: Request) -> Response:
    """``POST /proxy/v1/sub-refresh``: renew the lease (``expire_at``) or ``{"expired": true}``."""
    return await _answer(request, refreshing=True)


routes = [
    Route("/proxy/v1/subscribe", subscribe, methods=["POST"]),
    Route("/proxy/v1/sub-refresh", sub_refresh, methods=["POST"]),
]
