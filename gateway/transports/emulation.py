"""``POST /emulation`` (PROTOCOL.md §4.4): commands of SSE / HTTP-streaming sessions.

Body ``{"session","node","data"}`` where ``data`` is a JSON string holding newline-joined
commands. The session lives on the node named by ``node``: a local session gets the commands
fed exactly as if they had arrived on a WebSocket frame; a session on another live node is
reached through the engine's control channel (so a load balancer needs no sticky sessions).
Answers 204; 400 malformed, 404 unknown node, 413 too large, 405 other methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway import control
from gateway.client import Client
from gateway.origins import origin_allowed
from gateway.transports.streaming import cors_headers, preflight

if TYPE_CHECKING:
    from gateway.app import Runtime


class EmulationEndpoint:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        runtime.node.on_emulation = self.deliver_local

    def deliver_local(self, session: str, data: bytes) -> None:
        """Feed commands into a local session; unknown sessions are dropped silently."""
        client = self.runtime.node.hub.sessions.get(session)
        if isinstance(client, Client):
            client.feed(data)

    async def __call__(self, request: Request) -> Response:
        runtime = self.runtime
        settings = runtime.settings
        if request.method == "OPTIONS":
            return preflight(request, "POST, OPTIONS")
        if request.method != "POST":
            return Response(status_code=405)
        if not origin_allowed(request.headers.get("origin"), settings.client.allowed_origins):
            return Response("origin not allowed", status_code=403)
        limit = settings.emulation.max_request_body_size
        body = b""
        try:
            async for chunk in request.stream():
                body += chunk
                if limit and len(body) > limit:
                    return Response("request entity too large", status_code=413)
        except ClientDisconnect:  # gone mid-body (or cut by http_server.request_timeout)
            return Response(status_code=400)
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            return Response("malformed request", status_code=400)
        if not isinstance(req, dict):
            return Response("malformed request", status_code=400)
        session, node, data = req.get("session"), req.get("node"), req.get("data")
        if not isinstance(session, str) or not isinstance(node, str) or not isinstance(data, str):
            return Response("malformed request", status_code=400)
        headers = cors_headers(request)
        node_obj = runtime.node
        if node == node_obj.uid:
            self.deliver_local(session, data.encode())
            return Response(status_code=204, headers=headers)
        if node not in {info.get("uid") for info in node_obj.registry.live()}:
            return Response("unknown node", status_code=404, headers=headers)
        message = control.encode("emulation", node_obj.uid, session=session, data=data)
        try:
            await node_obj.broker.publish_control(message, node_id=node)
        except Exception:
            return Response("routing failed", status_code=500, headers=headers)
        return Response(status_code=204, headers=headers)
