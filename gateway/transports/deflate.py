"""permessage-deflate (RFC 7692) for the WebSocket transports (bidirectional and
``uni_websocket``): the negotiation, the bounds on what a client may make the server inflate,
and the compressed frames the server writes.

Negotiation uses websockets' ``ServerPerMessageDeflateFactory`` with ``server_no_context_takeover``
always in the answer (RFC 7692 §7.1.1.1): the server starts every message from an empty window,
so a message's compressed bytes depend only on the payload, the level and the window size, never
on what the connection sent before. That is what lets a publication be compressed once for every
connection that negotiated the same window (``ws_frame``: cached on the ``SharedPush`` next to
its uncompressed frame), instead of once per connection as a context-takeover stream must.

Incoming messages are bounded twice, as Centrifugo does: ``message_size_limit`` bounds the bytes
on the wire (compressed), ``decompressed_limit`` the inflated message; past it the connection is
closed with 1009 ("message too big after decompression") before zlib inflates more than the
limit, whatever the compression ratio (a zip bomb).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from websockets.exceptions import PayloadTooBig
from websockets.extensions.base import Extension
from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.typing import ExtensionParameter

from gateway.config.sections.endpoints import UniWebSocketSettings, WebSocketSettings
from gateway.hub import SharedPush
from gateway.transports import framing

__all__ = [
    "SHARED_WINDOW_BITS",
    "DeflateSettings",
    "InflatedTooBig",
    "deflate",
    "deflate_settings",
    "negotiated",
    "uni_ws_frame",
    "ws_frame",
]

SHARED_WINDOW_BITS = 15
"""The window every client gets unless it asks for a smaller ``server_max_window_bits``: frames
compressed with it are the ones cached on a shared push."""

_EMPTY_BLOCK_TAIL = b"\x00\x00\xff\xff"
_DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY)


@dataclass(frozen=True, slots=True)
class DeflateSettings:
    """``websocket.compression`` on: what the transport negotiates and how it compresses."""

    level: int = 1
    """zlib level, 1 (fastest, Centrifugo's default) to 9."""
    min_size: int = 0
    """Messages of at most this many bytes are sent uncompressed (0: every message is compressed)."""
    decompressed_limit: int | None = None
    """Largest inflated client message in bytes (None: no limit)."""

    def compresses(self, size: int) -> bool:
        """Whether a message of ``size`` bytes goes out compressed (Centrifugo: larger than
        ``compression_min_size``, or every message when it is 0)."""
        return self.min_size == 0 or size > self.min_size

    def factory(self, wire_limit: int | None) -> ServerPerMessageDeflateFactory:
        """The extension factory for one connection; ``wire_limit`` bounds a message's bytes as
        received (``websocket.message_size_limit``; None: no limit)."""
        return _Factory(wire_limit)


def deflate_settings(ws: WebSocketSettings | UniWebSocketSettings) -> DeflateSettings | None:
    """permessage-deflate for a WebSocket endpoint (None: its ``compression`` off).
    The inflated-message bound defaults to ten times ``message_size_limit``, as Centrifugo's."""
    if not ws.compression:
        return None
    limit = ws.decompressed_message_size_limit or ws.message_size_limit * 10
    return DeflateSettings(
        level=ws.compression_level, min_size=ws.compression_min_size, decompressed_limit=limit or None
    )


class InflatedTooBig(PayloadTooBig):
    """A client message inflates past ``decompressed_limit``: websockets fails the connection
    with 1009 and this reason (Centrifugo's)."""

    def __str__(self) -> str:
        return "message too big after decompression"


class _Inflater(PerMessageDeflate):
    """websockets' PerMessageDeflate, plus a bound on the compressed bytes of one message (the
    protocol's ``max_size`` bounds the inflated ones)."""

    def __init__(self, negotiated: PerMessageDeflate, wire_limit: int | None) -> None:
        super().__init__(
            negotiated.remote_no_context_takeover,
            negotiated.local_no_context_takeover,
            negotiated.remote_max_window_bits,
            negotiated.local_max_window_bits,
        )
        self.wire_limit = wire_limit
        self._wire = 0

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        if frame.opcode in _DATA_OPCODES:
            self._wire = 0
        elif frame.opcode is not Opcode.CONT:
            return frame  # control frames are never compressed
        self._wire += len(frame.data)
        if self.wire_limit is not None and self._wire > self.wire_limit:
            raise PayloadTooBig(self._wire, self.wire_limit)
        try:
            return super().decode(frame, max_size=max_size)
        except InflatedTooBig:
            raise
        except PayloadTooBig:
            raise InflatedTooBig(None, max_size if max_size is not None else 0) from None


class _Factory(ServerPerMessageDeflateFactory):
    def __init__(self, wire_limit: int | None) -> None:
        super().__init__(server_no_context_takeover=True)
        self.wire_limit = wire_limit

    def process_request_params(
        self, params: Sequence[ExtensionParameter], accepted_extensions: Sequence[Extension]
    ) -> tuple[list[ExtensionParameter], PerMessageDeflate]:
        response, extension = super().process_request_params(params, accepted_extensions)
        return response, _Inflater(extension, self.wire_limit)


def negotiated(extensions: Sequence[Extension]) -> int | None:
    """The server's window bits when the handshake accepted permessage-deflate, else None."""
    for extension in extensions:
        if isinstance(extension, PerMessageDeflate):
            return extension.local_max_window_bits
    return None


def deflate(payload: bytes, level: int, window_bits: int = SHARED_WINDOW_BITS) -> bytes:
    """One message compressed from an empty window (RFC 7692 §7.2.1: DEFLATE, sync flush, the
    trailing empty block's 0x00 0x00 0xff 0xff removed)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -window_bits)
    data = compressor.compress(payload) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return data[:-4] if data.endswith(_EMPTY_BLOCK_TAIL) else data


def ws_frame(
    payloads: list[bytes],
    shared: SharedPush | None,
    settings: DeflateSettings,
    window_bits: int,
    *,
    binary: bool,
    separator: bytes,
) -> bytes:
    """``framing.ws_frame`` for a connection that negotiated permessage-deflate: the same
    message, compressed (RSV1 set) when ``settings.compresses`` its size. A shared push's
    compressed frame is built by the first such writer with the shared window and cached on it
    (``SharedPush.deflated``), so a broadcast compresses once, not once per connection."""
    payload = (
        shared.payload
        if shared is not None
        else (payloads[0] if len(payloads) == 1 else separator.join(payloads))
    )
    if not settings.compresses(len(payload)):
        return framing.ws_frame(payloads, shared, binary=binary, separator=separator)
    if shared is not None and window_bits == SHARED_WINDOW_BITS:
        frame = shared.deflated
        if frame is None:
            frame = shared.deflated = framing.ws_deflated_frame(
                deflate(payload, settings.level), binary=binary
            )
        return frame
    return framing.ws_deflated_frame(deflate(payload, settings.level, window_bits), binary=binary)


def uni_ws_frame(
    push: bytes, shared: SharedPush | None, settings: DeflateSettings, window_bits: int
) -> bytes:
    """The text frame of one unidirectional message (a Push without its wrapper, or pushes
    joined by newlines) for a ``uni_websocket`` connection that negotiated permessage-deflate:
    compressed (RSV1 set) when ``settings.compresses`` its size. With ``shared`` (the message is
    exactly that publication's unwrapped push) the compressed frame with the shared window is
    built by the first such writer and cached on it (``SharedPush.uni_deflated``)."""
    if not settings.compresses(len(push)):
        return framing.ws_text_frame(push)
    if shared is not None and window_bits == SHARED_WINDOW_BITS:
        frame = shared.uni_deflated
        if frame is None:
            frame = framing.ws_deflated_frame(deflate(push, settings.level), binary=False)
            shared.uni_deflated = frame
        return frame
    return framing.ws_deflated_frame(deflate(push, settings.level, window_bits), binary=False)
