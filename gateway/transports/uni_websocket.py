"""Unidirectional WebSocket (Centrifugo's ``uni_websocket``): the ConnectRequest
(``{"token": ..., "subs": ...}``, ``{}`` is valid) is the ``cf_connect`` URL parameter of the
upgrade request (JSON; invalid JSON is refused with 400 before the upgrade) or else the client's
first text message; then the server only pushes.

Pushes go out like the other unidirectional transports' (gateway/transports/streaming.py): Push
objects without the ``push`` wrapper, one text frame each, or newline-joined in one frame per
write with ``uni_websocket.join_push_messages``. A disconnect is a disconnect push
(``{"disconnect": {"code", "reason"}}``; not with ``disable_disconnect_push``) and then a close
frame with the same code and reason (with ``disable_closing_handshake``: the TCP connection is
ended without one). Later client messages are ignored (Centrifugo reads them only to notice the
close), a few of them: a client that keeps sending is closed with 3501. With
``uni_websocket.compression`` a client offering permessage-deflate gets its larger messages
compressed, each publication compressed once for every such connection (gateway/transports/deflate.py).

The RFC 6455 layer is the WebSocket transport's (gateway/transports/websocket.py): its handshake
routes ``uni_websocket.handler_prefix`` here, and this module adapts the socket to a
``gateway.connection.client.Transport``.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Literal, Protocol

import orjson

from gateway.connection.client import Client
from gateway.connection.factory import Connect
from gateway.hub import SharedPush
from gateway.protocol import codes
from gateway.transports.deflate import DeflateSettings, uni_ws_frame
from gateway.transports.framing import uni_connect_command, unwrap_push, ws_text_frame

MAX_IGNORED_MESSAGES = 16
"""Messages after the ConnectRequest ignored before the connection is closed (3501)."""


class UniSocket(Protocol):
    """The RFC 6455 connection this transport writes to (gateway/transports/websocket.py's
    ``GatewayWebSocketProtocol``, which routes ``uni_websocket.handler_prefix`` here)."""

    request_headers: dict[str, str]

    def write_raw(self, frames: bytes) -> None: ...

    def buffered_bytes(self) -> int: ...

    def close(self, disconnect: codes.Disconnect) -> None: ...

    def drop(self) -> None:
        """End the TCP connection (after the bytes already written) without a close frame."""


@dataclass(frozen=True, slots=True)
class UniWebSocketEndpoint:
    """What ``uni_websocket`` needs, bound by the composition root."""

    handler_prefix: str
    message_size_limit: int
    join_push_messages: bool
    connect: Connect
    disable_closing_handshake: bool = False
    disable_disconnect_push: bool = False
    compression: DeflateSettings | None = None
    """permessage-deflate offered on this endpoint (``uni_websocket.compression``; None: never)."""


class UniWebSocketTransport:
    """The ``gateway.connection.client.Transport`` of one unidirectional WebSocket connection."""

    name = "uni_websocket"
    emulation = False
    unidirectional = True

    def __init__(
        self, socket: UniSocket, endpoint: UniWebSocketEndpoint, window_bits: int | None = None
    ) -> None:
        """``window_bits``: the server window the handshake negotiated for permessage-deflate
        (None: the connection did not negotiate it)."""
        self.socket = socket
        self.endpoint = endpoint
        self.window_bits = window_bits if endpoint.compression is not None else None
        self.client: Client = endpoint.connect(self)
        self.connect_received = False
        self.ignored = 0

    @property
    def request_headers(self) -> dict[str, str]:
        """The upgrade request's headers (lower-case names): proxies forward their allow-list."""
        return self.socket.request_headers

    def connect_from_url(self, data: bytes) -> None:
        """The ``cf_connect`` parameter's ConnectRequest: the connect, before any message."""
        self.message(data)

    def message(self, data: bytes) -> None:
        """A text message from the client: the first is the ConnectRequest, the rest are ignored
        (up to ``MAX_IGNORED_MESSAGES``, then 3501: a client of this transport does not send).
        A first message that is not a JSON object closes with 3501 (bad request)."""
        if self.connect_received:
            self.ignored += 1
            if self.ignored > MAX_IGNORED_MESSAGES:
                self.client.disconnect(codes.DISCONNECT_BAD_REQUEST)
            return
        self.connect_received = True
        command = uni_connect_command(data)
        if command is None:
            self.client.disconnect(codes.DISCONNECT_BAD_REQUEST)
            return
        self.client.feed(command)

    def release(self) -> None:
        """The socket is gone and the client released it: drop the client, which references this
        transport (a reference cycle otherwise). Nothing is received after this."""
        del self.client

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        pushes = [unwrap_push(payload) for payload in payloads]
        compression, bits = self.endpoint.compression, self.window_bits
        if compression is not None and bits is not None:
            one = shared if len(pushes) == 1 else None
            if self.endpoint.join_push_messages:
                self.socket.write_raw(uni_ws_frame(b"\n".join(pushes), one, compression, bits))
            else:
                self.socket.write_raw(b"".join(uni_ws_frame(push, one, compression, bits) for push in pushes))
        elif self.endpoint.join_push_messages:
            self.socket.write_raw(ws_text_frame(b"\n".join(pushes)))
        else:
            self.socket.write_raw(b"".join(ws_text_frame(push) for push in pushes))

    def buffered_bytes(self) -> int:
        return self.socket.buffered_bytes()

    def close(self, disconnect: codes.Disconnect) -> None:
        endpoint = self.endpoint
        if (
            disconnect.code != codes.DISCONNECT_CONNECTION_CLOSED.code
            and not endpoint.disable_disconnect_push
        ):
            body = {"code": disconnect.code, "reason": disconnect.reason}
            self.socket.write_raw(ws_text_frame(orjson.dumps({"disconnect": body})))
        if endpoint.disable_closing_handshake:
            self.socket.drop()
        else:
            self.socket.close(disconnect)


CONNECT_PARAM = "cf_connect"
"""The URL parameter that may carry the ConnectRequest (Centrifugo v6.3)."""


def uni_url_connect(target: str) -> bytes | Literal[False] | None:
    """The ``cf_connect`` ConnectRequest of a request target (``/path?cf_connect=...``): its
    bytes when it is a JSON object, None when the parameter is absent or empty, False when it
    is not a JSON object (answered 400 before the upgrade, as Centrifugo does)."""
    _, _, query = target.partition("?")
    values = urllib.parse.parse_qs(query).get(CONNECT_PARAM)
    if not values or not values[0]:
        return None
    data = values[0].encode()
    return data if uni_connect_command(data) is not None else False
