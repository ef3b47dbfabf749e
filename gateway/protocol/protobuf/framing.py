"""The varint-length-delimited message stream of the Protobuf client protocol (PROTOCOL.md §1):
each ``Command`` of a frame, and each ``Reply`` written, is prefixed with its length as an
unsigned varint. Cuts a frame into its messages one at a time as the caller pulls them, and
prefixes a serialized message; a truncated varint, a length past the end of the frame or an
empty frame raises ``ProtocolError`` (3501)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.protocol.codec import ProtocolError

__all__ = ["delimited", "iter_messages", "read_varint", "split_frame", "varint"]

_MAX_VARINT_BYTES = 10


def read_varint(frame: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it.

    Raises:
        ProtocolError: the frame ends inside the varint, or it is longer than 10 bytes.
    """
    result = shift = 0
    end = min(len(frame), pos + _MAX_VARINT_BYTES)
    while pos < end:
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ProtocolError("truncated varint")


def varint(n: int) -> bytes:
    """``n`` (>= 0) as an unsigned varint."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def iter_messages(frame: bytes) -> Iterator[bytes]:
    """The varint-length-delimited messages of a frame, in order, cut one at a time as the
    caller pulls them (nothing past the last one pulled is read).

    Raises:
        ProtocolError: (when pulled) empty frame, truncated varint, or a length past the end
            of the frame.
    """
    if not frame:
        raise ProtocolError("empty frame")
    pos, size = 0, len(frame)
    while pos < size:
        length, pos = read_varint(frame, pos)
        end = pos + length
        if end > size:
            raise ProtocolError("message length beyond the frame")
        yield frame[pos:end]
        pos = end


def split_frame(frame: bytes) -> list[bytes]:
    """Every varint-length-delimited message of a frame (tests and tools: the gateway pulls
    them one by one through ``iter_messages``).

    Raises:
        ProtocolError: empty frame, truncated varint, or a length past the end of the frame.
    """
    return list(iter_messages(frame))


def delimited(message: Any) -> bytes:
    """A Protobuf message serialized with its varint length prefix."""
    body: bytes = message.SerializeToString()
    return varint(len(body)) + body
