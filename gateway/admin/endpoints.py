"""The admin web UI's HTTP side, at Centrifugo's paths (``admin.handler_prefix`` = P):

* ``GET P/`` (``/`` for an empty P): the page (gateway/admin/static/index.html);
* ``GET P/admin/static/<file>``: its script and stylesheet, from the gateway itself;
* ``GET P/admin/init``: ``{"insecure", "authenticated", "edition"}`` for the page's start;
* ``POST P/admin/auth``: the password (form field or JSON ``password``) -> ``{"token"}``; a wrong
  one is 401, and past ``LOGIN_FAILURES_ALLOWED`` per client address in a window, 429;
* ``POST P/admin/api``: ``{"method", "params"}`` with ``Authorization: token <token>`` ->
  ``{"result"}`` or ``{"error": {"code", "message"}}``, run by the server API's executor (every
  method it has) plus ``connections`` (one user's connections on every node, by a cluster survey).

Never logs a password or a token; logs each refused login (address only) and each admin call
that changes something (method, channel or user). Imports the server API's executor through a
narrow protocol, the node for the survey, the settings; nothing imports this but app.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from html import escape
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.admin.auth import AdminAuth
from gateway.api.requests import ApiError
from gateway.config.schema import Settings
from gateway.engine.base import EngineError
from gateway.node import Node
from gateway.protocol import codes

log = logging.getLogger("taskcast.gateway.admin")

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"admin.js": "text/javascript; charset=utf-8", "admin.css": "text/css; charset=utf-8"}
MAX_BODY_BYTES = 1 << 20
"""The largest login or API request body read (Centrifugo's 1 MB)."""
READ_ONLY = frozenset({"info", "channels", "presence", "presence_stats", "history", "connections"})
"""Admin API methods that change nothing (not logged)."""
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class Executor(Protocol):
    """The server API's executor (gateway/api/executor.py ``ServerApi``) as the admin API uses it."""

    def call(self, method: str, params: object, *, protocol: str = "http") -> Awaitable[dict[str, Any]]: ...


class AdminEndpoints:
    """The admin routes of one gateway process."""

    def __init__(self, settings: Settings, api: Executor, node: Node, auth: AdminAuth | None = None) -> None:
        prefix = settings.admin.handler_prefix.rstrip("/")
        self.page_path = prefix or "/"
        self.base = prefix + "/admin"
        self.api = api
        self.node = node
        self.auth = auth or AdminAuth(settings.admin)
        html = (STATIC / "index.html").read_text(encoding="utf-8")
        self.page = html.replace("{{BASE}}", escape(self.base, quote=True))

    def routes(self) -> list[Route]:
        pages = [self.page_path] if self.page_path == "/" else [self.page_path, self.page_path + "/"]
        return [
            *(Route(path, self.index, methods=["GET", "HEAD"]) for path in pages),
            Route(self.base + "/static/{name:str}", self.asset, methods=["GET", "HEAD"]),
            Route(self.base + "/init", self.init, methods=["GET"]),
            Route(self.base + "/auth", self.login, methods=["POST"]),
            Route(self.base + "/api", self.call, methods=["POST"]),
        ]

    def internal_prefixes(self) -> tuple[str, ...]:
        """The paths the internal listener serves for the admin UI."""
        return (self.page_path, self.base)

    async def index(self, _: Request) -> Response:
        return Response(self.page, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        media = ASSETS.get(name)
        if media is None:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response((STATIC / name).read_bytes(), media_type=media, headers=SECURITY_HEADERS)

    async def init(self, request: Request) -> Response:
        body = {
            "insecure": self.auth.insecure,
            "authenticated": self.auth.authorized(request.headers),
            "edition": "taskcast",
        }
        return JSONResponse(body, headers=SECURITY_HEADERS)

    async def login(self, request: Request) -> Response:
        address = request.client.host if request.client else ""
        wait = self.auth.limiter.retry_after(address)
        if wait is not None:
            headers = {**SECURITY_HEADERS, "retry-after": str(max(1, int(wait + 0.999)))}
            return JSONResponse({"error": "too many failed logins; retry later"}, 429, headers=headers)
        body = await _body(request)
        if body is None:
            return JSONResponse({"error": "request body too large"}, 413, headers=SECURITY_HEADERS)
        token = self.auth.login(_password(body, request.headers.get("content-type", "")))
        if token is None:
            self.auth.limiter.failed(address)
            log.warning("admin login refused: wrong password from %s", address or "unknown address")
            return JSONResponse({"error": "wrong password"}, 401, headers=SECURITY_HEADERS)
        log.info("admin login from %s", address or "unknown address")
        return JSONResponse({"token": token}, headers=SECURITY_HEADERS)

    async def call(self, request: Request) -> Response:
        if not self.auth.authorized(request.headers):
            return Response(status_code=401, headers=SECURITY_HEADERS)
        body = await _body(request)
        if body is None:
            return JSONResponse({"error": "request body too large"}, 413, headers=SECURITY_HEADERS)
        try:
            command = orjson.loads(body)
        except orjson.JSONDecodeError:
            command = None
        if not isinstance(command, dict) or not isinstance(command.get("method"), str):
            return _error(codes.ERROR_BAD_REQUEST)
        method, params = command["method"], command.get("params") or {}
        if method not in READ_ONLY:
            log.info(
                "admin api %s %s from %s",
                method,
                _target(params),
                request.client.host if request.client else "",
            )
        try:
            if method == "connections":
                result = await self.connections(params)
            else:
                result = await self.api.call(method, params)
        except ApiError as exc:
            return _error(exc.error)
        # orjson, as the server API: results may hold kept JSON (orjson fragments).
        return Response(
            orjson.dumps({"result": result}), media_type="application/json", headers=SECURITY_HEADERS
        )

    async def connections(self, params: object) -> dict[str, Any]:
        """``{"user": U}`` -> ``{"connections": {client id: {user, session, channels, node,
        node_name}}}``
        from every live node (a node that does not answer in time is left out).

        Raises:
            ApiError: 107 without a string ``user``; 100 when the control channel is down.
        """
        user = params.get("user") if isinstance(params, dict) else None
        if not isinstance(user, str):
            raise ApiError(codes.ERROR_BAD_REQUEST, "user")
        try:
            replies = await self.node.cluster.survey("connections", user=user)
        except EngineError as exc:
            raise ApiError(codes.ERROR_INTERNAL) from exc
        names = {info.get("uid"): info.get("name", "") for info in self.node.cluster.nodes()}
        found: dict[str, Any] = {}
        for node, payload in replies.items():
            if isinstance(payload, dict):
                for client, conn in payload.items():
                    if isinstance(conn, dict):
                        found[client] = {**conn, "node": node, "node_name": names.get(node, "")}
        return {"connections": found}


async def _body(request: Request) -> bytes | None:
    """The request body, or None past MAX_BODY_BYTES (read no further)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _password(body: bytes, content_type: str) -> str:
    """The ``password`` of a JSON object or of a urlencoded form; "" when there is none."""
    if content_type.startswith("application/json"):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return ""
        value = data.get("password") if isinstance(data, dict) else None
        return value if isinstance(value, str) else ""
    try:
        values = parse_qs(body.decode("utf-8", "replace"), max_num_fields=16).get("password", [])
    except ValueError:  # more fields than max_num_fields
        return ""
    return values[0] if values else ""


def _target(params: object) -> str:
    """What an action was aimed at, for its log line (channel, user, client; never data)."""
    if not isinstance(params, dict):
        return ""
    return " ".join(
        f"{k}={params[k]!r}" for k in ("channel", "user", "client") if isinstance(params.get(k), str)
    )


def _error(error: codes.Error) -> Response:
    body = {"error": {"code": error.code, "message": error.message}}
    return JSONResponse(body, headers=SECURITY_HEADERS)


__all__ = ["AdminEndpoints", "Executor"]
