"""Wire frames of outgoing messages, built once per shared push (pure: no I/O).

A transport's ``write(payloads, shared)`` gets everything a connection queued in one loop tick.
When ``shared`` is set, every connection that queued the same pushes in that tick holds the same
``SharedPush`` (gateway/hub.py, gateway/client.py): its frame is built by the first writer and
cached on it, so a broadcast to N WebSocket connections builds one frame, not N.
"""

from __future__ import annotations

from gateway.hub import SharedPush

__all__ = ["SharedPush", "ws_frame", "ws_text_frame"]


def ws_text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented RFC 6455 text frame (server → client, no extensions; §5.2)."""
    n = len(payload)
    if n < 126:
        header = bytes((0x81, n))
    elif n < 65536:
        header = bytes((0x81, 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x81, 127)) + n.to_bytes(8, "big")
    return header + payload


def ws_frame(payloads: list[bytes], shared: SharedPush | None) -> bytes:
    """The one WebSocket text frame of a ``write`` call: the newline-joined payloads (§1.2).
    With ``shared`` (whose payload is exactly that join) the frame is cached on it."""
    if shared is not None:
        frame = shared.frame
        if frame is None:
            frame = shared.frame = ws_text_frame(shared.payload)
        return frame
    return ws_text_frame(payloads[0] if len(payloads) == 1 else b"\n".join(payloads))
