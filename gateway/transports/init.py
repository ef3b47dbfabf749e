"""Centrifugo's connection init endpoint (``init``, GET ``/connection/init``): answers ``{}``
(200, ``application/json; charset=utf-8``) so a client can open (and warm) its HTTP connection,
TLS included, before the WebSocket or streaming connect, and a load balancer can probe a public
path. It goes through the connection endpoints' checks: a browser Origin outside
``client.allowed_origins`` is 403, the CORS headers are set for an allowed one, ``OPTIONS`` is a
CORS preflight and other methods are 405 (Centrifugo serves GET only).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.http.origins import origin_allowed
from gateway.transports.streaming import cors_headers, preflight

BODY = b"{}"
MEDIA_TYPE = "application/json; charset=utf-8"


class ConnectionInitEndpoint:
    """The ASGI endpoint of ``init.handler_prefix``."""

    def __init__(self, allowed_origins: tuple[str, ...]) -> None:
        self.allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = self.handle(Request(scope, receive))
        await response(scope, receive, send)

    def handle(self, request: Request) -> Response:
        if request.method == "OPTIONS":
            return preflight(request, "GET, OPTIONS")
        if request.method != "GET":
            return Response(status_code=405, headers={"Allow": "GET"})
        if not origin_allowed(request.headers.get("origin"), self.allowed_origins):
            return Response("origin not allowed", status_code=403)
        return Response(BODY, headers={**cors_headers(request), "Content-Type": MEDIA_TYPE})
