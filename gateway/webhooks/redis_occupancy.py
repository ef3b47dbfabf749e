"""``RedisOccupancy``: channel occupancy decided once across every node sharing a Redis
(gateway/engine/lua/occupancy.lua; the rules are ``OccupancyBook``'s).

Keys, all under one hash tag so the script may touch them together on Redis Cluster:
``{<prefix>.occupancy}.nodes`` (node uid -> last renewal, ms of Redis' clock), ``.node.<uid>``
(the node's channels), ``.ch.<channel>`` (the nodes holding it), ``.occupied`` and ``.vacating``
(channel -> end of its grace). Times come from Redis (``TIME``), so node clocks need not agree.
Must not import the connection package or httpx.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from gateway.engine.redis import Client, LuaScript, RedisShard
from gateway.webhooks.occupancy import Transitions

OCCUPANCY = LuaScript("occupancy.lua")
SWEEP_LIMIT = 1000
"""Dead nodes released and vacated channels popped per call at most (the rest: next call)."""


class RedisOccupancy:
    """An ``OccupancyStore`` in Redis (the first shard of ``engine.redis``; owned).

    Raises:
        EngineError: from ``update`` and ``retire``, on a Redis failure.
    """

    def __init__(self, shard: RedisShard, *, prefix: str, grace_seconds: float, node_ttl: float) -> None:
        self.shard = shard
        shard.set_role("occupancy")
        self.base = f"{{{prefix}.occupancy}}"
        self._grace_ms = max(0, round(grace_seconds * 1000))
        self._ttl_ms = max(1, round(node_ttl * 1000))

    async def _run(self, node: str, mode: str, changes: Sequence[tuple[str, bool]]) -> Any:
        args: list[str | bytes | int] = [node, self._grace_ms, self._ttl_ms, SWEEP_LIMIT, mode]
        for channel, joined in changes:
            args += [channel, "1" if joined else "0"]

        async def run(client: Client) -> Any:
            return await OCCUPANCY.run(client, [self.base], args)

        return await self.shard.call(run, op="occupancy")

    async def update(
        self, node: str, changes: Sequence[tuple[str, bool]], *, reset: bool = False
    ) -> Transitions | None:
        known, occupied, vacated = await self._run(node, "reset" if reset else "", changes)
        if not known and not reset:
            return None
        return Transitions([c.decode() for c in occupied], [c.decode() for c in vacated])

    async def retire(self, node: str) -> None:
        await self._run(node, "retire", ())

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.shard.close()


__all__ = ["RedisOccupancy"]
