"""Bidirectional WebSocket transport (PROTOCOL.md §4.1): an adapter between one upgraded socket
and one ``Client``.

uvicorn parses the HTTP request (gateway/http/server.py bounds its head and its deadline) and hands
every WebSocket upgrade to the protocol class built by ``protocol_class(endpoint)``; it runs the
RFC 6455 state machine of ``websockets`` (sans-I/O) and feeds each data message into the
connection's ``Client``: no ASGI round trip and no task per connection. Outgoing frames are
written straight to the asyncio transport; a publication's frame is built once per publish and
shared by every subscriber whose queue holds only it (gateway/transports/framing.py).

The client picks the protocol with the WebSocket subprotocol, as with Centrifugo:
``centrifuge-protobuf`` selects Protobuf (binary frames both ways, gateway/protocol/protobuf/);
anything else is JSON (text frames). A data frame of the other type closes with 3506.

With ``websocket.compression`` the handshake accepts a client's permessage-deflate offer (RFC
7692; gateway/transports/deflate.py): a publication is compressed once for every connection that
negotiated it, and inflated client messages are bounded.

The protocol gets what it needs as narrow callables on ``WebSocketEndpoint`` (``admit``,
``connect``); it never sees the runtime.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, cast

from websockets.exceptions import PayloadTooBig, ProtocolError
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import SERVER, Event, Protocol
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from gateway.connection.client import Client
from gateway.connection.factory import Connect
from gateway.http.origins import origin_allowed
from gateway.hub import SharedPush
from gateway.protocol import codes
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.protobuf.codec import PROTOBUF
from gateway.protocol.protobuf.codec import SUBPROTOCOL as PROTOBUF_SUBPROTOCOL
from gateway.transports import deflate, framing
from gateway.transports.uni_websocket import UniWebSocketEndpoint, UniWebSocketTransport, uni_url_connect
from httpwire.cycles import release_transport

log = logging.getLogger("taskcast.gateway.websocket")
protocol_log = logging.getLogger("taskcast.gateway.websocket.frames")
"""The RFC 6455 layer's own log ("connection open" per connection): quiet unless debugging."""
protocol_log.setLevel(logging.WARNING)

JSON_SUBPROTOCOL = Subprotocol("centrifuge-json")
_PROTOBUF_SUBPROTOCOL = Subprotocol(PROTOBUF_SUBPROTOCOL)

CLOSE_TIMEOUT_SECONDS = 5.0
"""How long to wait for the client's close frame before dropping the TCP connection."""

CLOSING_READ_LIMIT = 65536
"""Bytes read from a peer after our close frame before the connection is dropped without
waiting for its close frame."""

Admit = Callable[[], int | None]
"""Handshake admission: None to accept, else the Retry-After seconds of a 503."""


@dataclass(frozen=True, slots=True)
class WebSocketEndpoint:
    """What the WebSocket endpoint needs, bound by the composition root."""

    handler_prefix: str
    message_size_limit: int
    """Largest incoming message in bytes, fragments reassembled (0: no limit)."""
    allowed_origins: tuple[str, ...]
    admit: Admit
    connect: Connect
    uni: UniWebSocketEndpoint | None = None
    """``uni_websocket`` on the same listener (gateway/transports/uni_websocket.py); a
    ``handler_prefix`` of "" disables the bidirectional endpoint."""
    compression: deflate.DeflateSettings | None = None
    """permessage-deflate offered on the bidirectional endpoint (None: never negotiated)."""


class _FrameLoop(Protocol):
    """websockets' frame loop (``Protocol.parse``: frames in, ``recv_frame``; the same bounds,
    errors and close codes) without what it keeps between two messages: websockets' loop holds
    the last frame it parsed and waits for the next byte in a new sub-generator
    (``StreamReader.at_eof``), two objects made by every client message and alive until the
    next one (a pong every ping interval) — past the young collections, into every full one
    (gateway/gc_pauses.py). This loop waits inline and drops the frame once handed on."""

    def parse(self) -> Generator[None]:
        reader = self.reader
        try:
            while True:
                while not reader.buffer:
                    if reader.eof:
                        raise EOFError("unexpected end of stream")
                    yield
                max_size = None
                if self.max_message_size is not None:
                    if self.current_size is None:
                        max_size = self.max_message_size
                    else:
                        max_size = self.max_message_size - self.current_size
                fragment_limit = getattr(self, "max_fragment_size", None)
                if fragment_limit is not None:
                    max_size = fragment_limit if max_size is None else min(max_size, fragment_limit)
                # After a close frame, recv_frame() replaced this generator (discard()): it is
                # not stepped again.
                frame = yield from Frame.parse(
                    reader.read_exact, mask=self.side is SERVER, max_size=max_size, extensions=self.extensions
                )
                if self.debug:
                    self.logger.debug("< %s", frame)
                self.recv_frame(frame)
                del frame
        except ProtocolError as exc:
            self.fail(CloseCode.PROTOCOL_ERROR, str(exc))
            self.parser_exc = exc
        except EOFError as exc:
            self.fail(CloseCode.ABNORMAL_CLOSURE, str(exc))
            self.parser_exc = exc
        except UnicodeDecodeError as exc:
            self.fail(CloseCode.INVALID_DATA, f"{exc.reason} at position {exc.start}")
            self.parser_exc = exc
        except PayloadTooBig as exc:
            exc.set_current_size(self.current_size)
            self.fail(CloseCode.MESSAGE_TOO_BIG, str(exc))
            self.parser_exc = exc
        except Exception as exc:
            self.logger.error("parser failed", exc_info=True)
            self.fail(CloseCode.INTERNAL_ERROR)  # no details: they may be security-sensitive
            self.parser_exc = exc
        # After an error, fail() replaced this generator (discard()).
        yield
        raise AssertionError("parse() stepped after an error")


class _ServerProtocol(ServerProtocol, _FrameLoop):
    """websockets' server side with the gateway's subprotocol choice as a method: passed as the
    ``select_subprotocol`` argument it would be bound to each connection's instance, a reference
    cycle per connection. After the handshake, its frames go through ``_FrameLoop``.

    ``events_received`` and ``data_to_send`` hand over a copy and empty the connection's own
    lists in place: websockets replaces them with new lists on every call, and those lists,
    made by one client message and kept until the next (a pong every ping interval), outlive
    the young collections and are scanned by every full one (gateway/gc_pauses.py). The copies
    are freed when the caller is done with them."""

    def events_received(self) -> list[Event]:
        events = self.events
        taken = events.copy()
        events.clear()
        return taken

    def data_to_send(self) -> list[bytes]:
        writes = self.writes
        taken = writes.copy()
        writes.clear()
        return taken

    def select_subprotocol(self, subprotocols: Sequence[Subprotocol]) -> Subprotocol | None:
        # Protobuf when offered; else JSON, naming it when the client did (none otherwise).
        if _PROTOBUF_SUBPROTOCOL in subprotocols:
            return _PROTOBUF_SUBPROTOCOL
        return JSON_SUBPROTOCOL if JSON_SUBPROTOCOL in subprotocols else None


class GatewayWebSocketProtocol(asyncio.Protocol):
    """One WebSocket connection, built by uvicorn for each upgrade (``Config(ws=<class>)``, with
    uvicorn's keyword arguments ``config``, ``server_state``, ``app_state``)."""

    endpoint: ClassVar[WebSocketEndpoint]

    name = "websocket"
    emulation = False
    unidirectional = False

    def __init__(
        self, config: Any = None, server_state: Any = None, app_state: Any = None, _loop: Any = None
    ) -> None:
        self.connections: set[Any] = server_state.connections if server_state is not None else set()
        compression = self.endpoint.compression
        wire_limit = self.endpoint.message_size_limit or None
        self.conn = _ServerProtocol(
            # websockets bounds the whole message across its fragments (RFC 6455 §5.4), closing
            # with 1009 when it grows past the limit.
            max_size=wire_limit,
            extensions=[compression.factory(wire_limit)] if compression is not None else None,
            logger=protocol_log,
        )
        self._deflate: deflate.DeflateSettings | None = None
        """Set when this connection negotiated permessage-deflate."""
        self._window_bits = deflate.SHARED_WINDOW_BITS
        self.transport: asyncio.Transport | None = None
        self.client: Client | None = None
        self.close_sent = False
        self._read_after_close = 0
        self._close_timer: asyncio.TimerHandle | None = None
        self._fragments: list[bytes] | None = None
        self.request_headers: dict[str, str] = {}
        """Parts of a fragmented data message received so far (None: no message in progress)."""
        self.codec: Codec = JSON
        """The connection's protocol, chosen by the subprotocol at the handshake."""
        self._data_opcode = Opcode.TEXT
        self.uni: UniWebSocketTransport | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.connections.add(self)
        # The send queue samples this once per connection per tick: the transport's own (C) method,
        # without a Python frame of ours around it.
        self.buffered_bytes = self.transport.get_write_buffer_size  # type: ignore[method-assign]

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self._fragments = None
        if self.client is not None:
            self.client.connection_lost()
            self.client = None
        # No reference cycle outlives the connection: websockets' parser is a generator suspended
        # in a method of ``conn`` (closing it drops its frame), the transport references itself,
        # the unidirectional transport references this protocol.
        uni, self.uni = self.uni, None
        if uni is not None:
            uni.release()
        self.conn.parser.close()
        release_transport(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.close_sent:
            # Closing: only the peer's close frame matters. A peer that keeps sending instead
            # (a flood cut with 3013 or 3501) is not parsed for the whole close timeout.
            self._read_after_close += len(data)
            if self._read_after_close > CLOSING_READ_LIMIT and self.transport is not None:
                self.transport.abort()
                return
        self.conn.receive_data(data)
        for event in self.conn.events_received():
            if isinstance(event, Request):
                self._handshake(event)
                # websockets' parser keeps the Request in its suspended generator frame for the
                # whole connection: its headers (about 1.5 KiB) go once the handshake read them.
                event.headers.clear()
            elif isinstance(event, Frame):
                self._frame(event)
        self._send_pending()
        if self.conn.parser_exc is not None or self.conn.close_sent is not None:
            self._closing()

    def eof_received(self) -> bool | None:
        return None

    def resume_writing(self) -> None:
        """The socket drained below asyncio's low-water mark: held output goes now (§13.3)."""
        if self.client is not None:
            self.client.send_queue.writable()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: disconnect with 3001 so SDKs reconnect elsewhere."""
        if self.client is not None and not self.client.closed:
            self.client.disconnect(codes.DISCONNECT_SHUTDOWN)
        elif self.transport is not None:
            self.transport.close()

    # --- handshake and frames ------------------------------------------------------------------

    def _reject(self, status: HTTPStatus, text: str, retry_after: int | None = None) -> None:
        response = self.conn.reject(status, text)
        if retry_after is not None:
            response.headers["Retry-After"] = str(retry_after)
        self.conn.send_response(response)
        self._send_pending()
        if self.transport is not None:
            self.transport.close()

    def _handshake(self, request: Request) -> None:
        endpoint = self.endpoint
        path = request.path.split("?", 1)[0]
        uni = endpoint.uni if endpoint.uni is not None and path == endpoint.uni.handler_prefix else None
        if path != endpoint.handler_prefix and uni is None:
            self._reject(HTTPStatus.NOT_FOUND, "not found")
            return
        url_connect = uni_url_connect(request.path) if uni is not None else None
        if url_connect is False:
            self._reject(HTTPStatus.BAD_REQUEST, "invalid connect request")
            return
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, endpoint.allowed_origins, request.headers.get("Host")):
            log.info("websocket origin refused: %s", origin)
            self._reject(HTTPStatus.FORBIDDEN, "origin not allowed")
            return
        refusal = endpoint.admit()
        if refusal is not None:
            # 503 at the handshake, as Centrifugo answers: the SDKs retry it with backoff.
            self._reject(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections", refusal)
            return
        if uni is not None:
            # The unidirectional endpoint offers its own compression settings (or none).
            uni_limit = uni.message_size_limit or None
            self.conn.available_extensions = (
                [uni.compression.factory(uni_limit)] if uni.compression is not None else None
            )
        response: Response = self.conn.accept(request)
        self.conn.send_response(response)
        if response.status_code != 101:
            self._send_pending()
            if self.transport is not None:
                self.transport.close()
            return
        # Proxies forward allow-listed headers of the upgrade request (cookies, auth).
        self.request_headers = {k.lower(): v for k, v in request.headers.raw_items()}
        if uni is not None:
            self.conn.max_message_size = uni.message_size_limit or None
            uni_bits = deflate.negotiated(self.conn.extensions)
            if uni_bits is not None and uni.compression is not None:
                self.conn.max_message_size = uni.compression.decompressed_limit
            self.uni = UniWebSocketTransport(self, uni, uni_bits)
            self.client = self.uni.client
            if url_connect is not None:
                self.uni.connect_from_url(url_connect)
            return
        if self.conn.subprotocol == _PROTOBUF_SUBPROTOCOL:
            self.codec, self._data_opcode = PROTOBUF, Opcode.BINARY
        window_bits = deflate.negotiated(self.conn.extensions)
        if window_bits is not None and endpoint.compression is not None:
            # The inflated message is bounded here; the extension bounds the compressed bytes.
            self.conn.max_message_size = endpoint.compression.decompressed_limit
            self._deflate, self._window_bits = endpoint.compression, window_bits
        self.client = endpoint.connect(self, self.codec)

    def _frame(self, frame: Frame) -> None:
        client = self.client
        if client is None:
            return
        opcode = frame.opcode
        feed = client.feed if self.uni is None else self.uni.message
        if opcode is self._data_opcode:
            if frame.fin:
                feed(bytes(frame.data))
            else:
                self._fragments = [bytes(frame.data)]
        elif opcode is Opcode.CONT:
            # RFC 6455 §5.4: a message may be split into a first frame and continuation frames
            # (proxies do it); websockets has checked their order and the total size.
            if self._fragments is None:
                return  # continuation of a refused message: refused below at its first frame
            self._fragments.append(bytes(frame.data))
            if frame.fin:
                message, self._fragments = b"".join(self._fragments), None
                feed(message)
        elif opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            # A text frame on a Protobuf connection or a binary one on a JSON connection.
            client.disconnect(codes.DISCONNECT_INAPPROPRIATE_PROTOCOL)
        elif opcode is Opcode.CLOSE:
            client.connection_lost()

    def _send_pending(self) -> None:
        if self.transport is None:
            return
        for chunk in self.conn.data_to_send():
            if chunk:
                self.transport.write(chunk)
            elif self.transport.can_write_eof():
                # websockets' empty chunk means "half-close" (its sans-I/O contract): send FIN and
                # let the peer read our close frame and close; its remaining bytes are discarded.
                # A full close here would drop unread input and reset the connection (RST), and
                # the peer would never see the close code (e.g. 1009 after an oversized frame).
                self.transport.write_eof()
                self._closing()
            else:
                self.transport.close()

    def _closing(self) -> None:
        if self._close_timer is None and self.transport is not None and not self.transport.is_closing():
            loop = asyncio.get_running_loop()
            self._close_timer = loop.call_later(CLOSE_TIMEOUT_SECONDS, self._abort)

    def _abort(self) -> None:
        self._close_timer = None
        if self.transport is not None:
            self.transport.abort()

    # --- gateway.connection.client.Transport ----------------------------------------------------------------

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        transport = self.transport
        if transport is None or self.close_sent or transport.is_closing():
            return
        if self._deflate is not None:
            codec = self.codec
            transport.write(
                deflate.ws_frame(
                    payloads,
                    shared,
                    self._deflate,
                    self._window_bits,
                    binary=codec.binary,
                    separator=codec.separator,
                )
            )
            return
        # Per delivery: a shared push's frame is built by the first writer and reused as is.
        frame = shared.frame if shared is not None else None
        if frame is None:
            codec = self.codec
            frame = framing.ws_frame(payloads, shared, binary=codec.binary, separator=codec.separator)
        transport.write(frame)

    def write_raw(self, frames: bytes) -> None:
        """Already-built frames (the unidirectional transport frames its own pushes)."""
        transport = self.transport
        if transport is None or transport.is_closing() or self.close_sent:
            return
        transport.write(frames)

    def buffered_bytes(self) -> int:
        transport = self.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def drop(self) -> None:
        """End the connection after what is already written, without a close frame
        (``uni_websocket.disable_closing_handshake``)."""
        if self.close_sent or self.transport is None:
            return
        self.close_sent = True
        self.transport.close()

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


def protocol_class(endpoint: WebSocketEndpoint) -> type[asyncio.Protocol]:
    """The protocol class uvicorn instantiates per upgrade, bound to ``endpoint``."""

    class BoundWebSocketProtocol(GatewayWebSocketProtocol):
        pass

    BoundWebSocketProtocol.endpoint = endpoint
    return BoundWebSocketProtocol
