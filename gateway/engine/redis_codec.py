"""Bytes of the Redis engine: msgpack ``Publication``/``ClientInfo`` and the PUB/SUB envelopes.

A publication is stored in its stream entry (field ``d``) and published as msgpack
``[data, info, tags, time(, delta(, key, removed))]`` (the map fields only on map changes; the
offset is the entry id, or in the envelope). PUB/SUB messages
on ``<prefix>.client.{ch}`` are, as in Centrifugo (PROTOCOL.md §3.5): ``__p1:<offset>:<epoch>__``
+ publication (written by publish.lua), ``__p0__`` + publication (no history), ``__j__`` / ``__l__``
+ info (join / leave). A map change written with ``delta`` to an existing key is published by
map.lua as ``__pd:<offset>:<epoch>:<n>__`` + the key's previous state payload (``n`` bytes) +
publication, so every node gets the key's previous value with the change (``Publication.prev``).
Pure: imports no redis or asyncio.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgpack

from gateway.protocol.messages import ClientInfo, Publication, StreamPosition

POSITIONED = b"__p1:"
POSITIONED_DELTA = b"__pd:"
UNPOSITIONED = b"__p0__"
JOIN = b"__j__"
LEAVE = b"__l__"
PROBE = b"__probe__"


def _info_fields(info: ClientInfo | None) -> list[Any] | None:
    if info is None:
        return None
    return [info.user, info.client, info.conn_info, info.chan_info]


def _info(fields: Any) -> ClientInfo | None:
    if fields is None:
        return None
    user, client, conn_info, chan_info = fields
    return ClientInfo(user=user, client=client, conn_info=conn_info, chan_info=chan_info)


def encode_publication(pub: Publication) -> bytes:
    fields: list[Any] = [pub.data, _info_fields(pub.info), pub.tags, pub.time]
    if pub.delta or pub.key:
        fields.append(pub.delta)  # older entries have four fields: delta defaults to False
    if pub.key:
        fields += [pub.key, pub.removed]
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def decode_publication(payload: bytes, offset: int) -> Publication:
    data, info, tags, time, *rest = msgpack.unpackb(payload, raw=False)
    delta = bool(rest[0]) if rest else False
    if len(rest) >= 3:
        return Publication(data, offset, _info(info), tags, time, delta, str(rest[1]), bool(rest[2]))
    return Publication(data, offset, _info(info), tags, time, delta)


def encode_info(info: ClientInfo) -> bytes:
    packed: bytes = msgpack.packb(_info_fields(info), use_bin_type=True)
    return packed


def decode_info(payload: bytes) -> ClientInfo:
    info = _info(msgpack.unpackb(payload, raw=False))
    if info is None:
        raise ValueError("client info is nil")
    return info


def decode_positioned(message: bytes) -> tuple[Publication, StreamPosition]:
    """Split ``__p1:<offset>:<epoch>__<publication>``. Epochs are letters, so the first ``__``
    after the prefix ends the header."""
    end = message.index(b"__", len(POSITIONED))
    offset_text, epoch = message[len(POSITIONED) : end].split(b":", 1)
    offset = int(offset_text)
    return decode_publication(message[end + 2 :], offset), StreamPosition(offset, epoch.decode())


def decode_positioned_delta(message: bytes) -> tuple[Publication, StreamPosition]:
    """Split ``__pd:<offset>:<epoch>:<n>__<previous state payload (n bytes)><publication>``:
    the publication with ``prev`` = the previous value's data."""
    end = message.index(b"__", len(POSITIONED_DELTA))
    offset_text, epoch, size_text = message[len(POSITIONED_DELTA) : end].split(b":", 2)
    offset, size, body = int(offset_text), int(size_text), end + 2
    prev = decode_publication(message[body : body + size], 0)
    pub = decode_publication(message[body + size :], offset)
    return replace(pub, prev=prev.data), StreamPosition(offset, epoch.decode())
