"""HTTP streaming transports (PROTOCOL.md §4.2–4.5): bidirectional SSE and HTTP-streaming with
the ``/emulation`` endpoint, and unidirectional SSE / HTTP-streaming.

Each stream is a ``StreamTransport`` feeding one long-lived HTTP response. The connection's
``Client`` is the very same as for WebSocket: commands arrive in the initial request (connect)
and then through ``/emulation`` (gateway/transports/emulation.py); replies and pushes are
written to the open response — one chunk per event-loop tick. Unidirectional streams carry
pushes without the ``push`` wrapper and accept only a ConnectRequest.

HTTP-streaming speaks Protobuf when the connect request says ``Content-Type:
application/octet-stream`` (what the SDKs' Protobuf builds send): the body and the response are
varint-delimited Commands / Replies. SSE and the unidirectional streams are JSON-only, as in
Centrifugo.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.connection.client import Client
from gateway.connection.factory import Connect
from gateway.http.origins import origin_allowed
from gateway.hub import SharedPush
from gateway.protocol import codes
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.protobuf import codec as protobuf
from gateway.transports.framing import uni_connect_command, unwrap_push

log = logging.getLogger("taskcast.gateway.streaming")

NO_CACHE_HEADERS = {
    "Cache-Control": "private, no-cache, no-store, must-revalidate, max-age=0",
    "Pragma": "no-cache",
    "Expires": "0",
    "X-Accel-Buffering": "no",
}
CLOSE_GRACE_SECONDS = 5.0
"""How long a closed stream may take to write its final disconnect push before it is abandoned."""


class OpenStreams:
    """The open streaming connections of this node. Streaming responses never end by
    themselves, so graceful shutdown (gateway/http/server.py's hook) ends them all with 3001."""

    def __init__(self) -> None:
        self.clients: set[Client] = set()

    def add(self, client: Client) -> None:
        self.clients.add(client)

    def discard(self, client: Client) -> None:
        self.clients.discard(client)

    def shutdown(self) -> None:
        for client in list(self.clients):
            client.disconnect(codes.DISCONNECT_SHUTDOWN)


class StreamTransport:
    """One streaming HTTP response, as a ``gateway.connection.client.Transport``."""

    def __init__(self, name: str, *, sse: bool, unidirectional: bool, codec: Codec = JSON) -> None:
        self.name = name
        self.codec = codec
        self.sse = sse
        self.emulation = not unidirectional
        self.unidirectional = unidirectional
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.pending_bytes = 0
        self.closed = False
        self.writer: asyncio.Task[None] | None = None
        """The task writing the response (set by StreamResponse)."""
        self.aborted = False
        self.request_headers: dict[str, str] = {}
        self._abort_handle: asyncio.TimerHandle | None = None

    def _frame(self, payload: bytes) -> bytes:
        if self.codec.binary:
            return payload  # length-prefixed already
        if self.unidirectional:
            payload = unwrap_push(payload)
        return b"data: " + payload + b"\n\n" if self.sse else payload + b"\n"

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        if self.closed:
            return
        chunk = b"".join(self._frame(p) for p in payloads)
        self.pending_bytes += len(chunk)
        self.queue.put_nowait(chunk)

    def buffered_bytes(self) -> int:
        return self.pending_bytes

    def close(self, disconnect: codes.Disconnect) -> None:
        """Write the disconnect push, then end the response (§1.8)."""
        if self.closed:
            return
        if self.codec.binary:
            self.queue.put_nowait(protobuf.PROTOBUF.encode_disconnect_push(disconnect))
        else:
            body = {"code": disconnect.code, "reason": disconnect.reason}
            message = {"disconnect": body} if self.unidirectional else {"push": {"disconnect": body}}
            payload = orjson.dumps(message)
            self.queue.put_nowait(b"data: " + payload + b"\n\n" if self.sse else payload + b"\n")
        self.queue.put_nowait(None)
        self.closed = True
        if self.writer is not None:
            # A peer that stopped reading (3008) would block the response's write forever and
            # keep its socket: give the final push a grace period, then abandon the response.
            self._abort_handle = asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, self._abort)

    def _abort(self) -> None:
        writer = self.writer
        if writer is not None and not writer.done():
            self.aborted = True
            writer.cancel()


class StreamResponse:
    """A raw ASGI response that streams the transport's queue and notices a client that went
    away at once (it listens for ``http.disconnect`` while idle)."""

    def __init__(
        self, streams: OpenStreams, client: Client, transport: StreamTransport, headers: dict[str, str]
    ) -> None:
        self.streams = streams
        self.client = client
        self.transport = transport
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = self.transport
        transport.writer = asyncio.current_task()
        raw_headers = [(k.lower().encode(), v.encode()) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
        await send(
            {"type": "http.response.body", "body": b"\r\n" if transport.sse else b"", "more_body": True}
        )

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(disconnected())
        try:
            while True:
                getter = asyncio.ensure_future(transport.queue.get())
                done, _ = await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                chunk = getter.result()
                if chunk is None:
                    break
                transport.pending_bytes -= len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not watcher.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass
        except asyncio.CancelledError:
            if not transport.aborted:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # our own abort of a dead reader: end the response quietly
        finally:
            watcher.cancel()
            if transport._abort_handle is not None:
                transport._abort_handle.cancel()
            transport.writer = None
            transport.closed = True
            self.streams.discard(self.client)
            self.client.connection_lost()


def cors_headers(request: Request) -> dict[str, str]:
    origin = request.headers.get("origin")
    if not origin:
        return {}
    return {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Credentials": "true",
        "Vary": "Origin",
    }


def preflight(request: Request, methods: str) -> Response:
    headers = cors_headers(request)
    headers.update(
        {
            "Access-Control-Allow-Methods": methods,
            "Access-Control-Allow-Headers": request.headers.get(
                "access-control-request-headers", "content-type"
            ),
            "Access-Control-Max-Age": "300",
        }
    )
    return Response(status_code=204, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it exceeds ``limit`` bytes."""
    body = bytearray()  # appended in place: bytes += chunk would copy the body per chunk
    async for chunk in request.stream():
        body += chunk
        if limit and len(body) > limit:
            return None
    return bytes(body)


class StreamEndpoint:
    """``/connection/sse``, ``/connection/http_stream``, ``/connection/uni_sse``,
    ``/connection/uni_http_stream``."""

    def __init__(
        self,
        name: str,
        *,
        sse: bool,
        unidirectional: bool,
        max_body: int,
        allowed_origins: tuple[str, ...],
        admit: Callable[[], int | None],
        connect: Connect,
        streams: OpenStreams,
    ) -> None:
        self.name = name
        self.sse = sse
        self.unidirectional = unidirectional
        self.max_body = max_body
        self.allowed_origins = allowed_origins
        self.admit = admit
        """Handshake admission: None to accept, else the Retry-After seconds of a 503."""
        self.connect = connect
        self.streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(request)
        await response(scope, receive, send)

    async def handle(self, request: Request) -> Any:
        if request.method == "OPTIONS":
            return preflight(request, "GET, POST, OPTIONS" if self.sse else "POST, OPTIONS")
        if request.method not in (("GET", "POST") if self.sse else ("POST",)):
            return Response(status_code=405)
        if not origin_allowed(request.headers.get("origin"), self.allowed_origins):
            return Response("origin not allowed", status_code=403)
        if request.method == "GET":
            data = request.query_params.get("cf_connect", "").encode()
            if not data:
                return Response("cf_connect required", status_code=400)
        else:
            try:
                body = await _read_body(request, self.max_body)
            except ClientDisconnect:  # gone mid-body (or cut by http_server.request_timeout)
                return Response(status_code=400)
            if body is None:
                return Response("request entity too large", status_code=413)
            data = body
        if self.unidirectional:
            command = uni_connect_command(data)
            if command is None:
                return Response("bad request", status_code=400)
            data = command
        codec = JSON
        if not self.sse and not self.unidirectional and request.method == "POST":
            content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if content_type == protobuf.CONTENT_TYPE:
                codec = protobuf.PROTOBUF
        refusal = self.admit()
        if refusal is not None:
            return Response("too many connections", status_code=503, headers={"Retry-After": str(refusal)})
        transport = StreamTransport(self.name, sse=self.sse, unidirectional=self.unidirectional, codec=codec)
        transport.request_headers = dict(request.headers)  # forwarded by proxies (allow-list)
        client = self.connect(transport, codec)
        self.streams.add(client)
        client.feed(data)
        headers = dict(NO_CACHE_HEADERS)
        headers.update(cors_headers(request))
        if self.sse:
            headers["Content-Type"] = "text/event-stream; charset=utf-8"
        else:
            headers["Content-Type"] = protobuf.CONTENT_TYPE if codec.binary else "application/json"
        return StreamResponse(self.streams, client, transport, headers)
