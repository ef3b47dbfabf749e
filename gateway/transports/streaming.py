"""HTTP streaming transports (PROTOCOL.md §4.2–4.5): bidirectional SSE and HTTP-streaming with
the ``/emulation`` endpoint, and unidirectional SSE / HTTP-streaming.

Each stream is a ``StreamTransport`` feeding one long-lived HTTP response. The connection's
``Client`` is the very same as for WebSocket: commands arrive in the initial request (connect)
and then through ``/emulation`` (gateway/transports/emulation.py); replies and pushes are
written to the open response — one chunk per event-loop tick. Unidirectional streams carry
pushes without the ``push`` wrapper and accept only a ConnectRequest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.client import Client
from gateway.hub import SharedPush
from gateway.origins import origin_allowed
from gateway.protocol import codes

if TYPE_CHECKING:
    from gateway.app import Runtime

log = logging.getLogger("taskcast.gateway.streaming")

NO_CACHE_HEADERS = {
    "Cache-Control": "private, no-cache, no-store, must-revalidate, max-age=0",
    "Pragma": "no-cache",
    "Expires": "0",
    "X-Accel-Buffering": "no",
}
PUSH_PREFIX = b'{"push":'
CLOSE_GRACE_SECONDS = 5.0
"""How long a closed stream may take to write its final disconnect push before it is abandoned."""


class StreamTransport:
    """One streaming HTTP response, as a ``gateway.client.Transport``."""

    def __init__(self, name: str, *, sse: bool, unidirectional: bool) -> None:
        self.name = name
        self.sse = sse
        self.emulation = not unidirectional
        self.unidirectional = unidirectional
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.pending_bytes = 0
        self.closed = False
        self.writer: asyncio.Task[None] | None = None
        """The task writing the response (set by StreamResponse)."""
        self.aborted = False
        self._abort_handle: asyncio.TimerHandle | None = None

    def _frame(self, payload: bytes) -> bytes:
        if self.unidirectional:
            payload = _unwrap(payload)
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


def _unwrap(payload: bytes) -> bytes:
    """Unidirectional transports send Push objects without the ``push`` wrapper."""
    if payload.startswith(PUSH_PREFIX):
        return payload[len(PUSH_PREFIX) : -1]
    if payload.startswith(b'{"id":'):
        reply = orjson.loads(payload)
        if "connect" in reply:
            return orjson.dumps({"connect": reply["connect"]})
    return payload


class StreamResponse:
    """A raw ASGI response that streams the transport's queue and notices a client that went
    away at once (it listens for ``http.disconnect`` while idle)."""

    def __init__(
        self, runtime: Runtime, client: Client, transport: StreamTransport, headers: dict[str, str]
    ) -> None:
        self.runtime = runtime
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
            self.runtime.streams.discard(self.client)
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
    body = b""
    async for chunk in request.stream():
        body += chunk
        if limit and len(body) > limit:
            return None
    return body


class StreamEndpoint:
    """``/connection/sse``, ``/connection/http_stream``, ``/connection/uni_sse``,
    ``/connection/uni_http_stream``."""

    def __init__(
        self, runtime: Runtime, name: str, *, sse: bool, unidirectional: bool, max_body: int
    ) -> None:
        self.runtime = runtime
        self.name = name
        self.sse = sse
        self.unidirectional = unidirectional
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(request)
        await response(scope, receive, send)

    async def handle(self, request: Request) -> Any:
        settings = self.runtime.settings
        if request.method == "OPTIONS":
            return preflight(request, "GET, POST, OPTIONS" if self.sse else "POST, OPTIONS")
        if request.method not in (("GET", "POST") if self.sse else ("POST",)):
            return Response(status_code=405)
        if not origin_allowed(request.headers.get("origin"), settings.client.allowed_origins):
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
            command = _uni_command(data)
            if command is None:
                return Response("bad request", status_code=400)
            data = command
        refusal = self.runtime.admit()
        if refusal is not None:
            return Response("too many connections", status_code=503, headers={"Retry-After": str(refusal)})
        transport = StreamTransport(self.name, sse=self.sse, unidirectional=self.unidirectional)
        client = self.runtime.new_client(transport)
        self.runtime.streams.add(client)
        client.feed(data)
        headers = dict(NO_CACHE_HEADERS)
        headers.update(cors_headers(request))
        headers["Content-Type"] = "text/event-stream; charset=utf-8" if self.sse else "application/json"
        return StreamResponse(self.runtime, client, transport, headers)


def _uni_command(data: bytes) -> bytes | None:
    """A unidirectional client sends a bare ConnectRequest (``{}`` is valid): wrap it as the
    connect command the session expects."""
    try:
        request = orjson.loads(data) if data.strip() else {}
    except orjson.JSONDecodeError:
        return None
    if not isinstance(request, dict):
        return None
    return orjson.dumps({"id": 1, "connect": request})


REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 15\r\nconnection: close\r\n\r\nrequest timeout"
)


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, told about graceful shutdown: streaming responses never end by
    themselves, so the first connection asked to shut down ends them all with 3001 (the
    WebSocket protocol does the same for its own connection).

    Slowloris guard: uvicorn has no deadline for receiving a request (its keep-alive timer only
    runs between requests), so a socket that opens and drips header bytes, or never finishes a
    body, would be held forever. ``http_server.request_timeout`` arms a deadline when the
    connection opens and at each request's first byte; it is disarmed when the request is
    complete (headers and body) or handed to the WebSocket protocol (whose 3502 stale timer
    then applies). On expiry an unfinished head gets 408 and the connection is closed; a
    stalled body is closed (the app sees ``http.disconnect``). Long-lived stream responses are
    not affected: their request is complete before they start.
    """

    _request_deadline: asyncio.TimerHandle | None = None
    _head_done = False

    def _arm(self) -> None:
        runtime = self.app_state.get("taskcast")
        timeout = runtime.settings.http_server.request_timeout if runtime is not None else 0.0
        if timeout > 0 and self._request_deadline is None:
            self._request_deadline = self.loop.call_later(timeout, self._request_timed_out)

    def _disarm(self) -> None:
        if self._request_deadline is not None:
            self._request_deadline.cancel()
            self._request_deadline = None

    def _request_timed_out(self) -> None:
        self._request_deadline = None
        transport = self.transport
        if transport is None or transport.is_closing() or transport.get_protocol() is not self:
            return
        if not self._head_done:
            transport.write(REQUEST_TIMEOUT_RESPONSE)
        transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._head_done = False
        self._arm()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._head_done = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()
        super().handle_websocket_upgrade()

    def shutdown(self) -> None:
        runtime = self.app_state.get("taskcast")
        if runtime is not None and runtime.streams:
            runtime.shutdown_streams()
        super().shutdown()
