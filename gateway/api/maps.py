"""The server API's map methods (Centrifugo v6.8+): ``map_publish``, ``map_remove``,
``map_read_state``, ``map_read_stream``, ``map_stats``, ``map_clear`` — their typed requests
(parsed by the one parser of gateway/api/requests.py) and ``MapApi``, whose handlers the
executor (gateway/api/executor.py) runs like every other method's.

Centrifugo's answers: an empty channel (and, for writes, an empty key) is 107; a channel of an
unknown namespace 102; a channel whose namespace is not a map (``subscription_type`` map) 107;
a read at a position of another epoch, or from one the stream no longer continues, 112; an
invalid ``key_mode`` or ``b64data`` 107; no map engine 108 (every engine has one: only a
node built without one). Sizes are bounded where they are parsed (``MAX_TAGS``, ``MAX_KEY_LENGTH``) and by the
HTTP body limit; a page is at most ``MAX_READ_LIMIT`` entries (``limit`` -1 or 0 reads a
bounded page too, never the whole of a large map at once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.api.requests import DATA_OR_B64, REQUIRED, TAGS, UINT64, ApiError, Json, bad_request
from gateway.config.schema import ChannelOptions
from gateway.config.sections.maps import MAP_SUBSCRIPTION_TYPES
from gateway.engine.map_base import MapBroker, PositionLost
from gateway.maps.options import MapOptions, resolve
from gateway.maps.state import KEY_MODES, MapChange
from gateway.node import Node
from gateway.protocol import codes, json_replies
from gateway.protocol.messages import Publication, StreamPosition

MAX_KEY_LENGTH = 1024
"""Characters of a map key (Taskcast's bound; a key is stored and sent with every change)."""
MAX_READ_LIMIT = 10_000
"""Entries of one ``map_read_state`` / ``map_read_stream`` answer (larger limits are cut)."""

INT32 = {"range": (-(2**31), 2**31 - 1)}
KEY = {"required": True, "max_length": MAX_KEY_LENGTH}


@dataclass(frozen=True, slots=True)
class MapPublishRequest:
    channel: str = field(default="", metadata=REQUIRED)
    key: str = field(default="", metadata=KEY)
    data: Json | None = field(default=None, metadata=DATA_OR_B64)
    b64data: str = ""
    tags: dict[str, str] | None = field(default=None, metadata=TAGS)
    idempotency_key: str = ""
    delta: bool = False
    version: int = field(default=0, metadata=UINT64)
    version_epoch: str = ""
    score: int = field(default=0, metadata={"range": (-(2**63), 2**63 - 1)})
    key_mode: str = ""


@dataclass(frozen=True, slots=True)
class MapRemoveRequest:
    channel: str = field(default="", metadata=REQUIRED)
    key: str = field(default="", metadata=KEY)
    idempotency_key: str = ""


@dataclass(frozen=True, slots=True)
class MapReadStateRequest:
    channel: str = field(default="", metadata=REQUIRED)
    cursor: str = field(default="", metadata={"max_length": MAX_KEY_LENGTH})
    limit: int = field(default=0, metadata=INT32)
    key: str = field(default="", metadata={"max_length": MAX_KEY_LENGTH})
    asc: bool = False
    revision_offset: int = field(default=0, metadata=UINT64)
    revision_epoch: str = ""


@dataclass(frozen=True, slots=True)
class MapReadStreamRequest:
    channel: str = field(default="", metadata=REQUIRED)
    since_offset: int = field(default=0, metadata=UINT64)
    since_epoch: str = ""
    limit: int = field(default=0, metadata=INT32)
    reverse: bool = False


@dataclass(frozen=True, slots=True)
class MapStatsRequest:
    channel: str = field(default="", metadata=REQUIRED)


@dataclass(frozen=True, slots=True)
class MapClearRequest:
    channel: str = field(default="", metadata=REQUIRED)


MAP_METHODS: dict[str, type[Any]] = {
    "map_publish": MapPublishRequest,
    "map_remove": MapRemoveRequest,
    "map_read_state": MapReadStateRequest,
    "map_read_stream": MapReadStreamRequest,
    "map_stats": MapStatsRequest,
    "map_clear": MapClearRequest,
}
"""Method name -> request type of the map methods (merged into ``commands.METHODS``)."""

MapRequest = (
    MapPublishRequest
    | MapRemoveRequest
    | MapReadStateRequest
    | MapReadStreamRequest
    | MapStatsRequest
    | MapClearRequest
)


def entry_obj(pub: Publication) -> dict[str, Any]:
    """A ``MapEntry``: key, data (raw JSON), tags, offset, removed, time."""
    obj: dict[str, Any] = {"key": pub.key}
    if pub.data:
        obj["data"] = json_replies.raw(pub.data)
    if pub.tags:
        obj["tags"] = pub.tags
    if pub.offset:
        obj["offset"] = pub.offset
    if pub.removed:
        obj["removed"] = True
    if pub.time:
        obj["time"] = pub.time
    return obj


def _limit(limit: int) -> int:
    return MAX_READ_LIMIT if limit <= 0 else min(limit, MAX_READ_LIMIT)


class MapApi:
    """The map methods' handlers, run by the executor (``handlers``).

    Args:
        node: The node (its ``maps`` engine, clock, metrics).
        channel_options: The executor's channel resolution (raises 102/107).
        payload: The executor's ``data`` / ``b64data`` decoding (raises 107).
    """

    def __init__(
        self,
        node: Node,
        channel_options: Callable[[str], ChannelOptions],
        payload: Callable[[object, str], bytes],
    ) -> None:
        self._node = node
        self._options = channel_options
        self._payload = payload

    def handlers(self) -> dict[type[Any], Callable[[Any], Awaitable[dict[str, Any]]]]:
        return {
            MapPublishRequest: self.map_publish,
            MapRemoveRequest: self.map_remove,
            MapReadStateRequest: self.map_read_state,
            MapReadStreamRequest: self.map_read_stream,
            MapStatsRequest: self.map_stats,
            MapClearRequest: self.map_clear,
        }

    def _map(self, channel: str) -> tuple[MapBroker, MapOptions]:
        opts = self._options(channel)
        if opts.subscription_type not in MAP_SUBSCRIPTION_TYPES:
            raise bad_request("channel: not a map namespace")
        maps = self._node.maps
        if maps is None:
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        return maps, resolve(opts.map)

    async def map_publish(self, req: MapPublishRequest) -> dict[str, Any]:
        maps, mopts = self._map(req.channel)
        if req.key_mode not in KEY_MODES:
            raise bad_request("key_mode")
        opts = self._options(req.channel)
        change = MapChange(
            key=req.key,
            data=self._payload(req.data, req.b64data),
            tags=req.tags or None,
            time=int(self._node.clock() * 1000),
            delta=req.delta or opts.delta_publish,
            version=req.version,
            version_epoch=req.version_epoch,
            key_mode=req.key_mode,
            idempotency_key=req.idempotency_key,
        )
        result = await maps.publish(req.channel, change, mopts)
        self._node.metrics.map_write(req.channel, remove=False, reason=result.reason)
        return _update_obj(result.position, result.suppressed, result.reason)

    async def map_remove(self, req: MapRemoveRequest) -> dict[str, Any]:
        maps, mopts = self._map(req.channel)
        result = await maps.remove(req.channel, req.key, mopts, idempotency_key=req.idempotency_key)
        self._node.metrics.map_write(req.channel, remove=True, reason=result.reason)
        return _update_obj(result.position, result.suppressed, result.reason)

    async def map_read_state(self, req: MapReadStateRequest) -> dict[str, Any]:
        maps, mopts = self._map(req.channel)
        revision = None
        if req.revision_offset or req.revision_epoch:
            revision = StreamPosition(req.revision_offset, req.revision_epoch)
        try:
            page = await maps.read_state(
                req.channel, mopts, cursor=req.cursor, limit=_limit(req.limit), revision=revision, key=req.key
            )
        except PositionLost:
            raise ApiError(codes.ERROR_UNRECOVERABLE_POSITION) from None
        obj: dict[str, Any] = {
            "entries": [entry_obj(p) for p in page.publications],
            "offset": page.position.offset,
            "epoch": page.position.epoch,
        }
        if page.cursor:
            obj["cursor"] = page.cursor
        return obj

    async def map_read_stream(self, req: MapReadStreamRequest) -> dict[str, Any]:
        maps, mopts = self._map(req.channel)
        since = None
        if req.since_offset or req.since_epoch:
            since = StreamPosition(req.since_offset, req.since_epoch)
        try:
            read = await maps.read_stream(
                req.channel, mopts, since=since, limit=_limit(req.limit), reverse=req.reverse
            )
        except PositionLost:
            raise ApiError(codes.ERROR_UNRECOVERABLE_POSITION) from None
        return {
            "entries": [entry_obj(p) for p in read.publications],
            "offset": read.position.offset,
            "epoch": read.position.epoch,
        }

    async def map_stats(self, req: MapStatsRequest) -> dict[str, Any]:
        maps, mopts = self._map(req.channel)
        return {"num_keys": await maps.stats(req.channel, mopts)}

    async def map_clear(self, req: MapClearRequest) -> dict[str, Any]:
        maps, _ = self._map(req.channel)
        await maps.clear(req.channel)
        return {}


def _update_obj(position: StreamPosition, suppressed: bool, reason: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"offset": position.offset, "epoch": position.epoch}
    if suppressed:
        obj["suppressed"] = True
        obj["suppress_reason"] = reason
    return obj
