"""Bytes of the shared memory engine's Unix socket (gateway/engine/shared_memory.py, the client
side in each worker; gateway/engine/shared_server.py, the broker in the supervisor).

A frame is a 4-byte big-endian length and a msgpack body. The engine's value types travel as
msgpack extension types holding their fields in declaration order, decoded back into exactly
those classes (an allow-list by construction: nothing else can be built from the bytes, unlike
pickle). Messages are lists:

* request  ``[id, op, *args]`` (worker → broker);
* reply    ``["r", id, value]`` or ``["e", id, message]`` (broker → worker, in request order);
* event    ``["p", channel, publication, position]`` (map changes too), ``["j"|"l", channel, info]``,
  ``["c", data]`` (broker → worker, interleaved with replies in the order they happened).

Pure: imports no asyncio.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack

from gateway.engine.base import HistoryOptions, HistoryResult, PresenceStats, PublishResult
from gateway.engine.map_base import MapStateResult, MapStreamResult
from gateway.maps.options import MapOptions
from gateway.maps.state import MapChange, UpdateResult
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition

MAX_FRAME_BYTES = 64 << 20
"""Largest frame accepted (a history answer of big publications): past it the link is broken."""

HEADER_BYTES = 4

_TYPES: tuple[type[Any], ...] = (
    StreamPosition,
    ClientInfo,
    Publication,
    HistoryOptions,
    PublishResult,
    HistoryResult,
    PresenceStats,
    # map channels (gateway/engine/map_shared.py)
    MapChange,
    MapOptions,
    UpdateResult,
    MapStateResult,
    MapStreamResult,
)
_CODES = {cls: code for code, cls in enumerate(_TYPES, start=1)}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _TYPES}


class WireError(ValueError):
    """A frame that is not a message of this protocol (a broken or foreign peer)."""


_BIG_INT = 100
"""Extension code of an int past msgpack's 64 bits, as decimal text (the engine answers any int,
gateway/engine/base.py)."""


def _default(obj: Any) -> msgpack.ExtType:
    cls = type(obj)
    if cls is int:
        return msgpack.ExtType(_BIG_INT, str(obj).encode())
    code = _CODES.get(cls)
    if code is None:
        raise TypeError(f"cannot send {cls.__name__} over the shared engine socket")
    values = [getattr(obj, name) for name in _FIELDS[cls]]
    return msgpack.ExtType(code, msgpack.packb(values, default=_default, use_bin_type=True))


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _BIG_INT:
        try:
            return int(data.decode())
        except ValueError as exc:
            raise WireError("bad big int") from exc
    if not 1 <= code <= len(_TYPES):
        raise WireError(f"unknown extension type {code}")
    cls = _TYPES[code - 1]
    values = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    if not isinstance(values, list) or len(values) != len(_FIELDS[cls]):
        raise WireError(f"bad {cls.__name__} fields")
    return cls(*values)


def encode(message: list[Any]) -> bytes:
    """One frame: length header + msgpack body."""
    body: bytes = msgpack.packb(message, default=_default, use_bin_type=True)
    return len(body).to_bytes(HEADER_BYTES, "big") + body


def body_length(header: bytes) -> int:
    """The body length announced by a frame header.

    Raises:
        WireError: past ``MAX_FRAME_BYTES``.
    """
    n = int.from_bytes(header, "big")
    if n > MAX_FRAME_BYTES:
        raise WireError(f"frame of {n} bytes exceeds {MAX_FRAME_BYTES}")
    return n


def decode(body: bytes) -> list[Any]:
    """A message from a frame body.

    Raises:
        WireError: not msgpack, not a list, or an unknown/bad extension value.
    """
    try:
        message = msgpack.unpackb(body, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    except WireError:
        raise
    except Exception as exc:
        raise WireError(f"undecodable frame: {type(exc).__name__}") from exc
    if not isinstance(message, list) or not message:
        raise WireError("a message is a non-empty list")
    return message
