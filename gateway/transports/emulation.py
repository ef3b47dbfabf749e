"""``POST /emulation`` (PROTOCOL.md §4.4): commands of SSE / HTTP-streaming sessions.

Body ``{"session","node","data"}`` where ``data`` is a JSON string holding newline-joined
commands; or, for a Protobuf session (``Content-Type: application/octet-stream``, as the SDKs
send), a Protobuf ``EmulationRequest`` whose ``data`` holds varint-delimited commands.
The session lives on the node named by ``node``: a local session gets the commands
fed exactly as if they had arrived on a WebSocket frame; a session on another live node is
reached through the engine's control channel (gateway/cluster.py), so a load balancer needs no
sticky sessions. Answers 204; 400 malformed, 404 unknown node, 413 too large, 405 other methods.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.engine.base import EngineError
from gateway.http.origins import origin_allowed
from gateway.protocol.codec import ProtocolError
from gateway.protocol.protobuf import codec as protobuf
from gateway.transports.streaming import cors_headers, preflight

log = logging.getLogger("taskcast.gateway.emulation")

Route = Callable[[str, str, str | bytes], Awaitable[bool]]
"""``route(node, session, commands)``: deliver to the session's node; False for an unknown node."""


class EmulationEndpoint:
    def __init__(self, *, max_body: int, allowed_origins: tuple[str, ...], route: Route) -> None:
        self.max_body = max_body
        self.allowed_origins = allowed_origins
        self.route = route

    async def __call__(self, request: Request) -> Response:
        if request.method == "OPTIONS":
            return preflight(request, "POST, OPTIONS")
        if request.method != "POST":
            return Response(status_code=405)
        if not origin_allowed(request.headers.get("origin"), self.allowed_origins):
            return Response("origin not allowed", status_code=403)
        limit = self.max_body
        body = bytearray()  # appended in place: bytes += chunk would copy the body per chunk
        try:
            async for chunk in request.stream():
                body += chunk
                if limit and len(body) > limit:
                    return Response("request entity too large", status_code=413)
        except ClientDisconnect:  # gone mid-body (or cut by http_server.request_timeout)
            return Response(status_code=400)
        parsed = _parse(bytes(body), request.headers.get("content-type", ""))
        if parsed is None:
            return Response("malformed request", status_code=400)
        session, node, data = parsed
        headers = cors_headers(request)
        try:
            routed = await self.route(node, session, data)
        except EngineError as exc:  # the control channel is down: the SDK retries the command
            log.info("emulation routing to node %s failed: %s", node, exc)
            return Response("routing failed", status_code=500, headers=headers)
        if not routed:
            return Response("unknown node", status_code=404, headers=headers)
        return Response(status_code=204, headers=headers)


def _parse(body: bytes, content_type: str) -> tuple[str, str, str | bytes] | None:
    """``(session, node, commands)`` of a JSON or Protobuf request body; None when malformed."""
    if content_type.split(";", 1)[0].strip().lower() == protobuf.CONTENT_TYPE:
        try:
            return protobuf.decode_emulation_request(body)
        except ProtocolError:
            return None
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(req, dict):
        return None
    session, node, data = req.get("session"), req.get("node"), req.get("data")
    if not isinstance(session, str) or not isinstance(node, str) or not isinstance(data, str):
        return None
    return session, node, data
