"""The JSON encoding of client protocol v2's replies and pushes (PROTOCOL.md §1.1): the bytes
``JsonCodec`` (gateway/protocol/codec.py) writes, and the result objects the server HTTP API
shares (a presence entry's client info, a map publication).

Raw JSON payloads are embedded unchanged (``orjson.Fragment``), never re-parsed. Zero values are
omitted as Centrifugo does, except the fields §1.1 lists as always written. Pure: builds bytes
and dicts, nothing else.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocol import codes
from gateway.protocol.jsonbytes import dumps_kept
from gateway.protocol.messages import (
    ClientInfo,
    ConnectResult,
    EmptyResult,
    HistoryPage,
    KeyedPublication,
    PresenceResult,
    PresenceStatsResult,
    Publication,
    RefreshResult,
    Result,
    RPCResult,
    StreamPosition,
    SubscribeResult,
)

Raw = orjson.Fragment


def raw(data: bytes) -> orjson.Fragment:
    """Embed a payload's bytes unchanged, as Centrifugo does (its ``Raw`` type): valid JSON for
    JSON payloads; bytes that are not JSON (a Protobuf client's or ``b64data`` publication)
    reach JSON clients as they are. Raw newlines are dropped, because ``\\n`` delimits the
    messages of a frame (JSON only has them as whitespace between tokens)."""
    if b"\n" in data:
        data = data.replace(b"\n", b"")
    return orjson.Fragment(data)


def client_info_obj(info: ClientInfo) -> dict[str, Any]:
    obj: dict[str, Any] = {"user": info.user, "client": info.client}
    if info.conn_info is not None:
        obj["conn_info"] = raw(info.conn_info)
    if info.chan_info is not None:
        obj["chan_info"] = raw(info.chan_info)
    return obj


def publication_obj(
    data: bytes, offset: int = 0, info: ClientInfo | None = None, tags: dict[str, str] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {"data": raw(data)}
    if info is not None:
        obj["info"] = client_info_obj(info)
    if offset:
        obj["offset"] = offset
    if tags:
        obj["tags"] = tags
    return obj


def encode_reply(cmd_id: int, method: str, result: dict[str, Any]) -> bytes:
    """``{"id":N,"<method>":{...}}`` — the result is written even when empty (§1.1)."""
    return orjson.dumps({"id": cmd_id, method: result})


def encode_error(cmd_id: int, error: codes.Error) -> bytes:
    err: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.temporary:
        err["temporary"] = True
    return orjson.dumps({"id": cmd_id, "error": err})


def encode_push(channel: str, key: str, payload: dict[str, Any]) -> bytes:
    """``{"push":{"channel":C,"<key>":{...}}}``; channel omitted when empty."""
    push: dict[str, Any] = {"channel": channel, key: payload} if channel else {key: payload}
    return dumps_kept({"push": push})  # a held connection keeps it (jsonbytes.py)


def encode_pub_push(
    channel: str, data: bytes, offset: int, info: ClientInfo | None, tags: dict[str, str] | None
) -> bytes:
    """The publication push, built once per publish and shared by every subscriber."""
    return encode_push(channel, "pub", publication_obj(data, offset, info, tags))


def map_publication_obj(pub: Publication) -> dict[str, Any]:
    """A map change or state entry: a publication with ``key`` (and ``removed``, without data)."""
    obj = publication_obj(pub.data, pub.offset, pub.info, pub.tags)
    obj["key"] = pub.key
    if pub.removed:
        obj["removed"] = True
    if pub.removed or not pub.data:  # a removal, a map presence entry: no data
        del obj["data"]
    return obj


def map_delta_publication_obj(pub: Publication) -> dict[str, Any]:
    """A map change for a subscription with fossil delta (gateway/maps/delta.py): ``data`` is
    always written (a JSON string, ``""`` for a removal, which centrifuge-js parses), ``delta``
    when it is a fossil delta."""
    obj = publication_obj(pub.data, pub.offset, pub.info, pub.tags)
    obj["key"] = pub.key
    if pub.removed:
        obj["removed"] = True
    if pub.delta:
        obj["delta"] = True
    return obj


PING = b"{}"
"""A server ping is an empty reply (§1.4)."""


def history_result_obj(pubs: list[Publication], position: StreamPosition) -> dict[str, Any]:
    """A history result as a JSON object (client protocol and server API)."""
    return {
        "publications": [publication_obj(p.data, p.offset, p.info, p.tags) for p in pubs],
        "epoch": position.epoch,
        "offset": position.offset,
    }


def map_subscribe_result_obj(r: SubscribeResult) -> dict[str, Any]:
    """A map subscribe reply (every phase): type echoed, position, state page and changes."""
    obj: dict[str, Any] = {"type": r.type}
    if r.phase:
        obj["phase"] = r.phase
    if r.cursor:
        obj["cursor"] = r.cursor
    if r.expires:
        obj["expires"] = True
        obj["ttl"] = r.ttl
    if r.recoverable:
        obj["recoverable"] = True
    if r.positioned:
        obj["positioned"] = True
    if r.recovered:
        obj["recovered"] = True
    if r.was_recovering:
        obj["was_recovering"] = True
    if r.epoch:
        obj["epoch"] = r.epoch
    if r.offset:
        obj["offset"] = r.offset
    if r.state:
        obj["state"] = [map_publication_obj(p) for p in r.state]
    if r.publications:
        encode = map_delta_publication_obj if r.delta else map_publication_obj
        obj["publications"] = [encode(p) for p in r.publications]
    if r.data is not None:
        obj["data"] = raw(r.data)
    if r.delta:
        obj["delta"] = True
    return obj


def subscribe_result_obj(r: SubscribeResult) -> dict[str, Any]:
    if r.type:
        return map_subscribe_result_obj(r)
    obj: dict[str, Any] = {}
    if r.expires:
        obj["expires"] = True
        obj["ttl"] = r.ttl
    if r.recoverable:
        obj["recoverable"] = True
    if r.positioned:
        obj["positioned"] = True
        if r.recovered:
            obj["recovered"] = True
        obj["epoch"] = r.epoch
        obj["offset"] = r.offset
        if r.publications is not None:
            obj["publications"] = [publication_obj(p.data, p.offset, p.info, p.tags) for p in r.publications]
    if r.was_recovering:
        obj["was_recovering"] = True
    if r.data is not None:
        obj["data"] = raw(r.data)
    if r.delta:
        obj["delta"] = True
    if r.type:
        obj["type"] = r.type
        if not r.positioned and r.epoch:
            obj["epoch"] = r.epoch
    return obj


def keyed_publication_obj(item: KeyedPublication) -> dict[str, Any]:
    """A shared-poll key's publication: ``key`` with ``data`` and ``version``, or ``removed``."""
    if item.removed:
        return {"key": item.key, "removed": True}
    obj: dict[str, Any] = {"data": raw(item.data if item.data is not None else b"null"), "key": item.key}
    if item.version:
        obj["version"] = item.version
    return obj


def _expiry(obj: dict[str, Any], expires: bool, ttl: int) -> dict[str, Any]:
    if expires:
        obj["expires"] = True
        obj["ttl"] = ttl
    return obj


def connect_result_obj(result: ConnectResult) -> dict[str, Any]:
    obj = _expiry({"client": result.client, "version": result.version}, result.expires, result.ttl)
    if result.subs:
        obj["subs"] = {ch: subscribe_result_obj(r) for ch, r in result.subs.items()}
    if result.ping:
        obj["ping"] = result.ping
    if result.pong is not None:
        obj["pong"] = result.pong
    if result.session:
        obj["session"] = result.session
    if result.node:
        obj["node"] = result.node
    if result.time:
        obj["time"] = result.time
    if result.data is not None:
        obj["data"] = raw(result.data)
    return obj


def result_obj(result: Result) -> dict[str, Any]:
    """The JSON object of a reply's result (zero values omitted as Centrifugo does)."""
    if isinstance(result, SubscribeResult):
        return subscribe_result_obj(result)
    if isinstance(result, EmptyResult):
        return {}
    if isinstance(result, ConnectResult):
        return connect_result_obj(result)
    if isinstance(result, RPCResult):
        return {"data": raw(result.data)} if result.data is not None else {}
    if isinstance(result, HistoryPage):
        return history_result_obj(result.publications, StreamPosition(result.offset, result.epoch))
    if isinstance(result, PresenceResult):
        return {"presence": {cid: client_info_obj(info) for cid, info in result.presence.items()}}
    if isinstance(result, PresenceStatsResult):
        return {"num_clients": result.num_clients, "num_users": result.num_users}
    if isinstance(result, RefreshResult):
        return _expiry({"client": "", "version": ""}, result.expires, result.ttl)
    obj = _expiry({}, result.expires, result.ttl)  # SubRefreshResult
    if result.items:
        obj["items"] = [keyed_publication_obj(item) for item in result.items]
    return obj
