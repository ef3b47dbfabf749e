"""Many publish.lua calls in one round trip per Redis shard (the server API's ``batch`` of
publishes, gateway/api/executor.py): a non-transactional pipeline per shard, the shards side by side.

Redis runs a pipeline's scripts in order, so publications of one channel (one shard) keep their
order, as sequential publishes would. A pipeline answered NOSCRIPT (Redis restarted or failed
over and forgot the script) is answered again after loading it, for the calls that got it. A
shard that fails (unreachable, stalled past ``io_timeout``) fails each of its calls with the
``EngineError`` of ``RedisShard.call``; a call answered with an error fails alone.

On a standalone or Sentinel shard the pipeline is written as one RESP buffer packed here and its
replies read one by one on a connection taken from the shard's pool (redis-py's ``Pipeline``
costs as much again per run: its command stack, retry wrapper, per-argument encoder and reply
callbacks); a connection whose exchange fails or is cancelled midway is disconnected by redis-py
before it returns to the pool, so no reply is left for its next user. A Cluster shard keeps
redis-py's pipeline, which routes each call to its slot's node. Imports nothing from the
gateway but the engine's base types and shard.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from gateway.engine.base import EngineError, PublishResult
from gateway.engine.redis import Client, LuaScript, RedisShard
from gateway.protocol.messages import StreamPosition

Call = tuple[int, list[str], list[str | bytes | int]]
"""(shard index, script keys, script args) of one publication."""


def publish_result(reply: Any) -> PublishResult:
    """publish.lua's reply ``[offset, epoch, suppressed]`` as a ``PublishResult``."""
    offset, epoch, suppressed = reply
    position = StreamPosition(int(offset), epoch.decode()) if int(offset) > 0 else None
    return PublishResult(position, suppressed=bool(suppressed))


def _bulk(value: str | bytes | int) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_evalsha(sha: str, calls: Sequence[Call]) -> bytes:
    """``EVALSHA sha numkeys keys... args...`` of each call as one RESP buffer (strings as
    UTF-8, ints in decimal, bytes as they are: what redis-py's encoder sends)."""
    head = _bulk("EVALSHA") + _bulk(sha)
    parts = []
    for _, keys, args in calls:
        parts.append(b"*%d\r\n%s%s" % (3 + len(keys) + len(args), head, _bulk(len(keys))))
        parts += map(_bulk, keys)
        parts += map(_bulk, args)
    return b"".join(parts)


async def _exchange(client: Redis, script: LuaScript, calls: list[Call]) -> list[Any]:
    """The replies of the calls' EVALSHAs written as one buffer on one pooled connection (a
    reply that is an error is returned as its exception)."""
    pool = client.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]  # unannotated in redis-py
    try:
        await conn.send_packed_command(pack_evalsha(script.sha, calls), check_health=False)
        replies: list[Any] = []
        for _ in calls:
            try:
                # No timer per reply: RedisShard.call bounds the whole exchange (a cancelled read
                # disconnects the connection).
                replies.append(await conn.read_response(timeout=math.inf))
            except ResponseError as exc:
                replies.append(exc)
        return replies
    finally:
        await pool.release(conn)


async def _pipeline(client: Client, script: LuaScript, calls: list[Call]) -> list[Any]:
    def send(selected: list[Call]) -> Any:
        if type(client) is not RedisCluster:  # not isinstance: RedisCluster's is a Protocol check
            return _exchange(client, script, selected)  # type: ignore[arg-type]  # a Redis
        pipe = client.pipeline(transaction=False)
        for _, keys, args in selected:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        return pipe.execute(raise_on_error=False)

    replies: list[Any] = list(await send(calls))
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        await client.script_load(script.source)
        for i, reply in zip(missing, await send([calls[i] for i in missing]), strict=True):
            replies[i] = reply
    return replies


async def publish_many(
    shards: Sequence[RedisShard], calls: Sequence[Call], script: LuaScript
) -> list[PublishResult | EngineError]:
    """One result per call, in the calls' order (see the module docstring)."""
    results: list[PublishResult | EngineError | None] = [None] * len(calls)
    by_shard: dict[int, list[int]] = {}
    for position, call in enumerate(calls):
        by_shard.setdefault(call[0], []).append(position)

    async def one_shard(index: int, positions: list[int]) -> None:
        shard = shards[index]
        selected = [calls[p] for p in positions]

        async def run(client: Client) -> list[Any]:
            return await _pipeline(client, script, selected)

        try:
            replies = await shard.call(run, op="publish")
        except EngineError as exc:
            for p in positions:
                results[p] = exc
            return
        for p, reply in zip(positions, replies, strict=True):
            if isinstance(reply, Exception):
                shard.count_error("publish")
                results[p] = EngineError(f"redis {shard.name}: {type(reply).__name__}: {reply}")
            else:
                results[p] = publish_result(reply)

    if len(by_shard) == 1:
        await one_shard(*next(iter(by_shard.items())))  # the common case: no task per shard
    else:
        await asyncio.gather(*(one_shard(index, positions) for index, positions in by_shard.items()))
    return [r if r is not None else EngineError("not published") for r in results]
