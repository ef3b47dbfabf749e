"""Bidirectional WebSocket transport (PROTOCOL.md §4.1) as a uvicorn WebSocket protocol class.

uvicorn parses HTTP and hands every WebSocket upgrade to this ``asyncio.Protocol``; it runs the
RFC 6455 state machine of ``websockets`` (sans-I/O) and feeds text frames straight into the
connection's ``Client`` — no ASGI round trip and no task per connection. Outgoing frames are
written straight to the asyncio transport: a publication's frame is built once per publish and
the same bytes go to every subscriber whose queue holds only it (gateway/hub.py).

The gateway's runtime is found in uvicorn's lifespan state (``app_state["taskcast"]``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast

from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from gateway.client import Client
from gateway.hub import SharedPush, ws_text_frame
from gateway.origins import origin_allowed
from gateway.protocol import codes

if TYPE_CHECKING:
    from gateway.app import Runtime

log = logging.getLogger("taskcast.gateway.websocket")
protocol_log = logging.getLogger("taskcast.gateway.websocket.frames")
"""The RFC 6455 layer's own log ("connection open" per connection): quiet unless debugging."""
protocol_log.setLevel(logging.WARNING)

JSON_SUBPROTOCOL = Subprotocol("centrifuge-json")

CLOSE_TIMEOUT_SECONDS = 5.0
"""How long to wait for the client's close frame before dropping the TCP connection."""


def _select_subprotocol(_: ServerProtocol, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    # JSON is the only format: accept the JSON subprotocol name when offered, else none.
    return JSON_SUBPROTOCOL if JSON_SUBPROTOCOL in offered else None


class GatewayWebSocketProtocol(asyncio.Protocol):
    """One WebSocket connection. Constructed by uvicorn (``Config(ws=…)``) for each upgrade."""

    name = "websocket"
    emulation = False
    unidirectional = False

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: Any = None) -> None:
        self.runtime: Runtime = app_state["taskcast"]
        self.connections: set[Any] = server_state.connections
        settings = self.runtime.settings
        self.conn = ServerProtocol(
            max_size=settings.websocket.message_size_limit or None,
            select_subprotocol=_select_subprotocol,
            logger=protocol_log,
        )
        self.transport: asyncio.Transport | None = None
        self.client: Client | None = None
        self.close_sent = False
        self._close_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        if self.client is not None:
            self.client.connection_lost()
            self.runtime.connection_closed(self.client)
            self.client = None

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        for event in self.conn.events_received():
            if isinstance(event, Request):
                self._handshake(event)
            elif isinstance(event, Frame):
                self._frame(event)
        self._send_pending()
        if self.conn.parser_exc is not None or self.conn.close_sent is not None:
            self._closing()

    def eof_received(self) -> bool | None:
        return None

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: disconnect with 3001 so SDKs reconnect elsewhere."""
        if self.client is not None and not self.client.closed:
            self.client.disconnect(codes.DISCONNECT_SHUTDOWN)
        elif self.transport is not None:
            self.transport.close()

    # --- handshake and frames ------------------------------------------------------------------

    def _reject(self, status: HTTPStatus, text: str) -> None:
        response = self.conn.reject(status, text)
        self.conn.send_response(response)
        self._send_pending()
        if self.transport is not None:
            self.transport.close()

    def _handshake(self, request: Request) -> None:
        runtime = self.runtime
        settings = runtime.settings
        path = request.path.split("?", 1)[0]
        if settings.websocket.disabled or path != settings.websocket.handler_prefix:
            self._reject(HTTPStatus.NOT_FOUND, "not found")
            return
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, settings.client.allowed_origins, request.headers.get("Host")):
            log.info("websocket origin refused: %s", origin)
            self._reject(HTTPStatus.FORBIDDEN, "origin not allowed")
            return
        refusal = runtime.admit()
        if refusal is not None:
            busy = self.conn.reject(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections")
            busy.headers["Retry-After"] = str(refusal)
            self.conn.send_response(busy)
            self._send_pending()
            if self.transport is not None:
                self.transport.close()
            return
        response: Response = self.conn.accept(request)
        self.conn.send_response(response)
        if response.status_code != 101:
            self._send_pending()
            if self.transport is not None:
                self.transport.close()
            return
        self.client = runtime.new_client(self)

    def _frame(self, frame: Frame) -> None:
        client = self.client
        if client is None:
            return
        if frame.opcode is Opcode.TEXT:
            client.feed(bytes(frame.data))
        elif frame.opcode is Opcode.BINARY:
            client.disconnect(codes.DISCONNECT_INAPPROPRIATE_PROTOCOL)
        elif frame.opcode is Opcode.CLOSE:
            client.connection_lost()

    def _send_pending(self) -> None:
        if self.transport is None:
            return
        for chunk in self.conn.data_to_send():
            if chunk:
                self.transport.write(chunk)
            else:  # websockets signals "close the TCP connection" with an empty chunk
                self.transport.close()

    def _closing(self) -> None:
        if self._close_timer is None and self.transport is not None and not self.transport.is_closing():
            loop = asyncio.get_running_loop()
            self._close_timer = loop.call_later(CLOSE_TIMEOUT_SECONDS, self._abort)

    def _abort(self) -> None:
        self._close_timer = None
        if self.transport is not None:
            self.transport.abort()

    # --- gateway.client.Transport ----------------------------------------------------------------

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        transport = self.transport
        if transport is None or transport.is_closing() or self.close_sent:
            return
        if shared is not None:
            transport.write(shared.ws_frame)
        elif len(payloads) == 1:
            transport.write(ws_text_frame(payloads[0]))
        else:
            transport.write(ws_text_frame(b"\n".join(payloads)))

    def buffered_bytes(self) -> int:
        transport = self.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def close(self, disconnect: codes.Disconnect) -> None:
        """Close frame with the disconnect code and reason (§1.8)."""
        if self.close_sent or self.transport is None:
            return
        self.close_sent = True
        if disconnect.code == codes.DISCONNECT_CONNECTION_CLOSED.code:
            self.transport.close()
            return
        try:
            self.conn.send_close(disconnect.code, disconnect.reason)
        except Exception:  # already closing
            self.transport.close()
            return
        self._send_pending()
        self._closing()


__all__ = ["GatewayWebSocketProtocol", "Headers"]
