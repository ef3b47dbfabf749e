"""Wire frames of outgoing messages, built once per shared push, and the unidirectional
transports' message shapes (a push without its ``push`` wrapper; a bare ConnectRequest wrapped
as the connect command). Pure: no I/O.

A transport's ``write(payloads, shared)`` gets everything a connection queued in one loop tick.
When ``shared`` is set, every connection that queued the same pushes in that tick holds the same
``SharedPush`` (gateway/hub.py, gateway/connection/client.py): its frame is built by the first writer and
cached on it, so a broadcast to N WebSocket connections builds one frame, not N.
"""

from __future__ import annotations

import orjson

from gateway.hub import SharedPush

__all__ = [
    "SharedPush",
    "uni_connect_command",
    "unwrap_push",
    "ws_binary_frame",
    "ws_deflated_frame",
    "ws_frame",
    "ws_text_frame",
]

PUSH_PREFIX = b'{"push":'

_FIN_TEXT = 0x81
_FIN_BINARY = 0x82
_RSV1 = 0x40
"""RFC 7692 §6: set on the first frame of a compressed message."""


def _ws_data_frame(first: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        header = bytes((first, n))
    elif n < 65536:
        header = bytes((first, 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((first, 127)) + n.to_bytes(8, "big")
    return header + payload


def ws_text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented RFC 6455 text frame (server → client, no extensions; §5.2)."""
    return _ws_data_frame(_FIN_TEXT, payload)


def ws_binary_frame(payload: bytes) -> bytes:
    """The same as a binary frame (the Protobuf protocol)."""
    return _ws_data_frame(_FIN_BINARY, payload)


def ws_deflated_frame(deflated: bytes, *, binary: bool) -> bytes:
    """An unfragmented data frame of a message compressed with permessage-deflate (RSV1 set;
    gateway/transports/deflate.py)."""
    return _ws_data_frame((_FIN_BINARY if binary else _FIN_TEXT) | _RSV1, deflated)


def ws_frame(
    payloads: list[bytes], shared: SharedPush | None, *, binary: bool = False, separator: bytes = b"\n"
) -> bytes:
    """The one WebSocket frame of a ``write`` call: the payloads joined with the codec's
    separator (§1.2), in a text frame (JSON) or a binary one (Protobuf). With ``shared`` (whose
    payload is exactly that join) the frame is cached on it: a shared push belongs to one codec,
    so its cached frame always has that codec's frame type."""
    first = _FIN_BINARY if binary else _FIN_TEXT
    if shared is not None:
        frame = shared.frame
        if frame is None:
            frame = shared.frame = _ws_data_frame(first, shared.payload)
        return frame
    return _ws_data_frame(first, payloads[0] if len(payloads) == 1 else separator.join(payloads))


def unwrap_push(payload: bytes) -> bytes:
    """Unidirectional transports send Push objects without the ``push`` wrapper."""
    if payload.startswith(PUSH_PREFIX):
        return payload[len(PUSH_PREFIX) : -1]
    if payload.startswith(b'{"id":'):
        reply = orjson.loads(payload)
        if "connect" in reply:
            return orjson.dumps({"connect": reply["connect"]})
    return payload


def uni_connect_command(data: bytes) -> bytes | None:
    """A unidirectional client sends a bare ConnectRequest (``{}`` is valid): wrap it as the
    connect command the session expects."""
    try:
        request = orjson.loads(data) if data.strip() else {}
    except orjson.JSONDecodeError:
        return None
    if not isinstance(request, dict):
        return None
    return orjson.dumps({"id": 1, "connect": request})
