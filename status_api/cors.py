"""CORS for apps served from their own origin (``cors.*``, docs/status-api.md "Cross-origin apps").

An ASGI middleware around every route. Origins are compared exactly (scheme, host and port, as
the browser sends them) against ``cors.allowed_origins``: an allowed origin is echoed in
``Access-Control-Allow-Origin`` (never ``*``, never a reflection of an unlisted origin), with
``Vary: Origin`` so caches keep the answers apart. A preflight (``OPTIONS`` with
``Access-Control-Request-Method``) is answered here, 204 with the allowed methods and headers and
``Access-Control-Max-Age``; from an unlisted origin, or asking for a method or header the API does
not take, it is answered 403 with a coded error (``CORS_ORIGIN_NOT_ALLOWED``,
``CORS_METHOD_NOT_ALLOWED``, ``CORS_HEADER_NOT_ALLOWED``). A request the browser marks cross-site
(``Sec-Fetch-Site: cross-site`` / ``same-site``) from an unlisted origin is refused the same way
before it reaches a route. A same-origin request (the board, an app behind a reverse proxy) is never
touched: the browser marks it ``same-origin`` and needs no CORS headers.

CORS is not authentication: every route still checks its bearer credential. Imports nothing of the
service.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: What the Status API's routes take (status_api/http.py, telemetry, subscribe proxy).
ALLOWED_METHODS = ("GET", "POST", "OPTIONS")
#: Request headers a browser app sends: the bearer, JSON bodies, eventId idempotency, dev identity
#: (``user_auth.mode: dev`` only), W3C trace context.
DEFAULT_ALLOWED_HEADERS = (
    "authorization",
    "content-type",
    "idempotency-key",
    "x-taskcast-dev-user",
    "x-taskcast-dev-projects",
    "traceparent",
    "tracestate",
)
#: Response headers an app may read besides the CORS-safelisted ones (backoff on 429/503).
EXPOSED_HEADERS = ("Retry-After",)


class OriginError(ValueError):
    """An ``allowed_origins`` entry that is not ``scheme://host[:port]``."""


def normalize_origin(value: str) -> str:
    """``value`` as the browser would send it in ``Origin`` (lower-case scheme and host, no default
    port is added or removed, no path).

    Raises:
        OriginError: not an ``http(s)://host[:port]`` origin (a path, a query, ``*``, userinfo).
    """
    raw = value.strip()
    parts = urlsplit(raw)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or "*" in raw
        or parts.username is not None
        or parts.path not in ("",)
        or parts.query
        or parts.fragment
    ):
        raise OriginError(f"{value!r} is not an origin like https://app.example.com or http://localhost:5173")
    try:
        port = parts.port
    except ValueError as exc:
        raise OriginError(f"{value!r} has an invalid port") from exc
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _vary_origin(send: Send) -> Send:
    """``send`` adding ``Vary: Origin``: with CORS on, every answer depends on the Origin, so a
    cache never hands a same-origin answer (no CORS headers) to a cross-origin request."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"vary", b"Origin")]}
        await send(message)

    return wrapped


def _error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "retryable": False}}).encode()


class CorsMiddleware:
    """See the module docstring. ``allowed_origins`` must already be normalized
    (:func:`normalize_origin`); an empty tuple turns CORS off (no headers, preflights fall through
    to the routes as before, cross-site requests are not refused)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_origins: Iterable[str],
        allow_credentials: bool,
        max_age_seconds: int,
        allowed_headers: Iterable[str] = DEFAULT_ALLOWED_HEADERS,
    ) -> None:
        self.app = app
        self.origins = frozenset(allowed_origins)
        self.credentials = allow_credentials
        self.max_age = str(max_age_seconds)
        self.headers = frozenset(h.lower() for h in allowed_headers)
        self._allow_headers = ", ".join(sorted(self.headers)).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.origins:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, _vary_origin(send))
            return
        allowed = origin.lower() in self.origins
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(send, origin, allowed, headers)
            return
        if not allowed:
            if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
                await self._refuse(send, "CORS_ORIGIN_NOT_ALLOWED", "origin not in cors.allowed_origins")
                return
            # Same-origin (or an old browser): no CORS headers.
            await self.app(scope, receive, _vary_origin(send))
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if not k.lower().startswith(b"access-control-")
                ]
                raw += self._actual_headers(origin)
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _actual_headers(self, origin: str) -> list[tuple[bytes, bytes]]:
        out = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
            (b"access-control-expose-headers", ", ".join(EXPOSED_HEADERS).encode()),
        ]
        if self.credentials:
            out.append((b"access-control-allow-credentials", b"true"))
        return out

    async def _preflight(self, send: Send, origin: str, allowed: bool, headers: dict[str, str]) -> None:
        if not allowed:
            await self._refuse(send, "CORS_ORIGIN_NOT_ALLOWED", "origin not in cors.allowed_origins")
            return
        method = headers["access-control-request-method"].strip().upper()
        if method not in ALLOWED_METHODS:
            await self._refuse(send, "CORS_METHOD_NOT_ALLOWED", f"method {method} is not accepted")
            return
        requested = {
            h.strip().lower()
            for h in headers.get("access-control-request-headers", "").split(",")
            if h.strip()
        }
        extra = sorted(requested - self.headers)
        if extra:
            await self._refuse(send, "CORS_HEADER_NOT_ALLOWED", "headers not accepted: " + ", ".join(extra))
            return
        out = [
            *self._actual_headers(origin),
            (b"access-control-allow-methods", ", ".join(ALLOWED_METHODS).encode()),
            (b"access-control-allow-headers", self._allow_headers),
            (b"access-control-max-age", self.max_age.encode()),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": out})
        await send({"type": "http.response.body", "body": b""})

    async def _refuse(self, send: Send, code: str, message: str) -> None:
        # No Access-Control-Allow-Origin: the page cannot read this; the code is for curl, logs and
        # the browser's network panel.
        body = _error(code, message)
        out = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"vary", b"Origin"),
        ]
        await send({"type": "http.response.start", "status": 403, "headers": out})
        await send({"type": "http.response.body", "body": body})
