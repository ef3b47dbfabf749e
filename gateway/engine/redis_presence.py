"""``RedisPresence``: who is subscribed to a channel, shared by every node (PROTOCOL.md §3.6).

Per channel a hash ``<prefix>.presence.data.{ch}`` (client id -> msgpack ClientInfo) and a sorted
set ``<prefix>.presence.expire.{ch}`` (client id -> expire-at), both with a key TTL of
``presence_ttl`` refreshed by every ``add``. Reads drop expired entries first (lua/presence_get.lua),
so no sweep is needed. Must not import starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.engine.base import PresenceStats
from gateway.engine.redis import Client, LuaScript, RedisShard
from gateway.engine.redis_codec import decode_info, encode_info
from gateway.engine.redis_keys import RedisKeys, shard_index
from gateway.protocol.messages import ClientInfo

PRESENCE_ADD = LuaScript("presence_add.lua")
PRESENCE_GET = LuaScript("presence_get.lua")


class RedisPresence:
    """A ``PresenceManager`` in Redis.

    Args:
        shards: As for ``RedisBroker`` (a channel's presence lives on its shard); owned.
        prefix: ``engine.redis.prefix``.
        ttl_seconds: ``engine.redis.presence_ttl``.
        now: Wall clock for expire-at scores; every node must agree on it (Unix seconds).

    Raises:
        EngineError: from every method but ``run`` and ``close``, on a Redis failure.
    """

    def __init__(
        self,
        shards: Sequence[RedisShard],
        *,
        prefix: str,
        ttl_seconds: float = 60.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        if not shards:
            raise ValueError("RedisPresence needs at least one shard")
        self.shards = list(shards)
        for shard in self.shards:
            shard.set_role("presence")
        self.keys = RedisKeys(prefix)
        self._ttl = ttl_seconds
        self._now = now

    def _shard(self, channel: str) -> RedisShard:
        return self.shards[shard_index(channel, len(self.shards))]

    async def run(self) -> None:
        """Nothing to sweep: expiry happens on read and by key TTL."""
        await asyncio.Event().wait()

    async def add(self, channel: str, client_id: str, info: ClientInfo) -> None:
        keys = [self.keys.presence_data(channel), self.keys.presence_expire(channel)]
        args: list[str | bytes | int] = [
            client_id,
            encode_info(info),
            repr(self._now() + self._ttl),
            max(1, round(self._ttl * 1000)),
        ]

        async def run(client: Client) -> Any:
            return await PRESENCE_ADD.run(client, keys, args)

        await self._shard(channel).call(run, op="presence")

    async def remove(self, channel: str, client_id: str) -> None:
        data, expire = self.keys.presence_data(channel), self.keys.presence_expire(channel)

        async def run(client: Client) -> Any:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hdel(data, client_id)
                pipe.zrem(expire, client_id)
                return await pipe.execute()

        await self._shard(channel).call(run, op="presence")

    async def presence(self, channel: str) -> Mapping[str, ClientInfo]:
        keys = [self.keys.presence_data(channel), self.keys.presence_expire(channel)]
        now = repr(self._now())

        async def run(client: Client) -> Any:
            return await PRESENCE_GET.run(client, keys, [now])

        flat = await self._shard(channel).call(run, op="presence")
        return {flat[i].decode(): decode_info(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def stats(self, channel: str) -> PresenceStats:
        clients = await self.presence(channel)
        return PresenceStats(num_clients=len(clients), num_users=len({i.user for i in clients.values()}))

    async def close(self) -> None:
        for shard in self.shards:
            with contextlib.suppress(Exception):
                await shard.close()
