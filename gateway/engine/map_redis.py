"""Redis map engine: ``RedisMapBroker`` runs gateway/engine/lua/map.lua, which writes a change
to the state, appends it to the channel's stream and PUBLISHes it on the channel's PUB/SUB
channel (the one ``RedisBroker`` subscribes for local subscribers) in one call, so deliveries
reach every node through the ordinary broker path with their stream position.

Keys (``RedisKeys.map_keys``) share the channel's hash tag, so a map channel lives on one shard
(client-side sharding as for history) and one Redis Cluster slot. Expired keys are removed by
the script at the next operation on their channel, and by ``run`` for channels with local
subscribers (``watch``), so subscribers see removals by TTL without other traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gateway.engine.base import BrokerEventHandler, EngineError
from gateway.engine.map_base import MapStateResult, MapStreamResult
from gateway.engine.memory import new_epoch
from gateway.engine.redis import Client, LuaScript, RedisShard
from gateway.engine.redis_codec import decode_publication, encode_publication
from gateway.engine.redis_keys import RedisKeys, shard_index
from gateway.maps.options import MapOptions
from gateway.maps.state import MapChange, PositionLost, UpdateResult
from gateway.protocol.messages import Publication, StreamPosition
from httpwire.cancellation import raise_if_cancelling

MAP = LuaScript("map.lua")


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _entry(value: bytes) -> Publication:
    """A state value ``<offset>:<payload>``."""
    offset, payload = value.split(b":", 1)
    return decode_publication(payload, int(offset))


class RedisMapBroker:
    """``MapBroker`` on Redis shards (those of the node's ``RedisBroker``, which closes them).

    Args:
        shards: The shards; a channel lives on ``shard_index(channel)``.
        prefix: ``engine.redis.prefix``.
        watched: The channels to sweep in ``run`` (the node's channels with local subscribers).
        sweep_interval_seconds: Pause between sweeps.
    """

    def __init__(
        self,
        shards: Sequence[RedisShard],
        *,
        prefix: str,
        watched: Callable[[], Iterable[str]] = tuple,
        epoch_factory: Callable[[], str] = new_epoch,
        sweep_interval_seconds: float = 1.0,
    ) -> None:
        self.shards = list(shards)
        self.keys = RedisKeys(prefix)
        self._watched = watched
        self._new_epoch = epoch_factory
        self._sweep_interval = sweep_interval_seconds
        self._options: dict[str, MapOptions] = {}
        """Options of channels seen with an expiring mode (for the sweep)."""

    def set_handler(self, handler: BrokerEventHandler) -> None:
        """Deliveries come through the ``RedisBroker``'s PUB/SUB: nothing to hold here."""

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            for channel in list(self._watched()):
                opts = self._options.get(channel)
                if opts is not None:
                    with contextlib.suppress(EngineError):
                        await self.stats(channel, opts)  # the script removes expired keys first
                    raise_if_cancelling()  # the suppressed error may have been the cancellation

    async def _call(
        self,
        channel: str,
        opts: MapOptions,
        op: str,
        extra: Sequence[str | bytes | int],
        result_key: str = "",
    ) -> Any:
        if opts.has_expiry:
            if len(self._options) >= 10000:
                self._options.clear()
            self._options[channel] = opts
        keys = self.keys
        script_keys = [*keys.map_keys(channel), result_key or keys.map_result(channel, "")]
        args: list[str | bytes | int] = [
            op,
            self._new_epoch(),
            keys.client_channel(channel),
            "1" if opts.has_stream else "0",
            opts.stream_size,
            _ms(opts.stream_ttl),
            _ms(opts.meta_ttl),
            _ms(opts.key_ttl),
            *extra,
        ]

        async def run(client: Client) -> Any:
            return await MAP.run(client, script_keys, args)

        shard = self.shards[shard_index(channel, len(self.shards))]
        return await shard.call(run, op=f"map_{op}")

    async def publish(self, channel: str, change: MapChange, opts: MapOptions) -> UpdateResult:
        pub = Publication(
            data=change.data,
            info=change.info,
            tags=change.tags or None,
            time=change.time,
            delta=change.delta,
            key=change.key,
        )
        removal = Publication(b"", tags=change.tags or None, time=change.time, key=change.key, removed=True)
        idem = change.idempotency_key
        result_ttl = _ms(change.idempotent_result_ttl) if idem else 0
        reply = await self._call(
            channel,
            opts,
            "publish",
            [
                change.key,
                result_ttl,
                encode_publication(pub),
                encode_publication(removal),
                change.key_mode,
                str(change.version),
                change.version_epoch,
                "1" if change.refresh_ttl_on_suppress else "0",
                "1" if change.delta else "0",
            ],
            self.keys.map_result(channel, idem) if idem else "",
        )
        return _update(reply)

    async def remove(
        self, channel: str, key: str, opts: MapOptions, *, idempotency_key: str = ""
    ) -> UpdateResult:
        result_key = self.keys.map_result(channel, idempotency_key) if idempotency_key else ""
        reply = await self._call(channel, opts, "remove", [key, 300000 if idempotency_key else 0], result_key)
        return _update(reply)

    async def read_state(
        self,
        channel: str,
        opts: MapOptions,
        *,
        cursor: str = "",
        limit: int = -1,
        revision: StreamPosition | None = None,
        key: str = "",
    ) -> MapStateResult:
        extra: list[str | bytes | int] = [
            cursor,
            str(max(limit, -1)),
            key,
            "1" if revision is not None else "0",
            revision.epoch if revision is not None else "",
        ]
        top, epoch, lost, next_cursor, values = await self._call(channel, opts, "state", extra)
        position = StreamPosition(int(top), epoch.decode())
        if lost:
            raise PositionLost(revision.epoch if revision is not None else "")
        pubs = [_entry(value) for value in values if value]
        return MapStateResult(pubs, position, next_cursor.decode())

    async def read_stream(
        self,
        channel: str,
        opts: MapOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = -1,
        reverse: bool = False,
    ) -> MapStreamResult:
        extra: list[str | bytes | int] = [
            "1" if since is not None else "0",
            str(max(since.offset, 0)) if since is not None else "0",
            since.epoch if since is not None else "",
            str(max(limit, -1)),
            "1" if reverse else "0",
        ]
        top, epoch, lost, entries = await self._call(channel, opts, "stream", extra)
        position = StreamPosition(int(top), epoch.decode())
        if lost:
            raise PositionLost(since.epoch if since is not None else "")
        pubs = [
            decode_publication(fields[1], int(entry_id.split(b"-", 1)[0])) for entry_id, fields in entries
        ]
        return MapStreamResult(pubs, position)

    async def stats(self, channel: str, opts: MapOptions) -> int:
        (count,) = await self._call(channel, opts, "stats", [])
        return int(count)

    async def clear(self, channel: str) -> None:
        names = self.keys.map_keys(channel)
        shard = self.shards[shard_index(channel, len(self.shards))]
        await shard.call(lambda client: client.delete(*names), op="map_clear")

    async def close(self) -> None:
        """The shards are the ``RedisBroker``'s: it closes them."""


def _update(reply: Any) -> UpdateResult:
    offset, epoch, suppressed, reason = reply
    return UpdateResult(StreamPosition(int(offset), epoch.decode()), bool(suppressed), reason.decode())
