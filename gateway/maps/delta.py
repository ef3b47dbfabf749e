"""Fossil delta on map subscriptions, as centrifuge's ``client_map.go`` does it: the pure
shaping of a map change or state entry for a subscription that negotiated ``delta: "fossil"``.

Contract (per key, never per channel):

* A live change goes as a fossil delta against **the previous value of the same key**, which
  the map engine hands over with the change (``Publication.prev``: only for a write published
  with ``delta``, to a key that existed). Its subscriber holds exactly that value: a positioned
  subscription that receives offset N has every change before it, and the engine read the
  value in the same atomic step as the write. No per-connection cache is kept, so a gap cannot
  leave a stale base (the gap unsubscribes with 2500 and the SDK recovers).
* A recovered batch (the changes of a live reply): a key's first change in the batch and every
  removal go whole; a later change of the same key goes as a delta against its previous change
  in the batch.
* A delta is sent only when smaller than the value; over JSON it travels as a JSON string, so
  a delta of bytes that are not UTF-8 text, or of a value above ``fossil.MAX_SIZE``, goes whole.
* Over JSON, every value a delta subscription receives (state entries, stream pages, changes)
  is a JSON string holding the value's exact bytes (a removal: ``""``), so centrifuge-js keeps
  those bytes as the key's delta base. Over Protobuf the bytes are sent as they are.

The shaped publications carry ``delta`` = the wire flag (true: ``data`` is a fossil delta) and
no ``prev``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import orjson

from gateway.protocol import fossil
from gateway.protocol.messages import Publication

__all__ = ["change", "escaped", "recovered", "whole"]


def escaped(data: bytes) -> bytes:
    """``data`` (JSON text, or empty) as a JSON string."""
    return orjson.dumps(data.decode("utf-8", "replace"))


def whole(pub: Publication, binary: bool) -> Publication:
    """``pub`` sent whole to a delta subscription (JSON: its data as a JSON string)."""
    data = pub.data if binary else escaped(pub.data)
    return replace(pub, data=data, delta=False, prev=None)


def _against(base: bytes, pub: Publication, binary: bool) -> Publication:
    """``pub`` as a delta against ``base`` when that is smaller (and, over JSON, UTF-8 text),
    else whole."""
    data = pub.data
    if len(base) > fossil.MAX_SIZE or len(data) > fossil.MAX_SIZE:
        return whole(pub, binary)
    patch = fossil.create(base, data)
    if len(patch) >= len(data):
        return whole(pub, binary)
    if not binary:
        try:
            patch = orjson.dumps(patch.decode("utf-8"))
        except UnicodeDecodeError:
            return whole(pub, binary)
    return replace(pub, data=patch, delta=True, prev=None)


def change(pub: Publication, binary: bool) -> Publication:
    """A live change for a delta subscription: against the key's previous value when the
    engine handed it over (a positioned, non-removal change), else whole."""
    if pub.prev is None or pub.removed or not pub.offset:
        return whole(pub, binary)
    return _against(pub.prev, pub, binary)


def recovered(pubs: Sequence[Publication], binary: bool) -> list[Publication]:
    """A recovered batch (stream order) for a delta subscription, by the per-key rule."""
    last: dict[str, bytes] = {}
    shaped: list[Publication] = []
    for pub in pubs:
        if pub.removed:
            last.pop(pub.key, None)
            shaped.append(whole(pub, binary))
            continue
        base = last.get(pub.key)
        last[pub.key] = pub.data
        shaped.append(whole(pub, binary) if base is None else _against(base, pub, binary))
    return shaped
