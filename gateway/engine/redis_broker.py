"""``RedisBroker``: history in Redis Streams and fan-out between nodes over Redis PUB/SUB.

Publishing is one Lua script (lua/publish.lua, PROTOCOL.md §3.5) that checks the idempotency key,
reads or mints the epoch, takes ``top + 1``, appends, trims, refreshes TTLs and PUBLISHes the
publication with its position, so offsets and deliveries cannot reorder. Each shard has one
PUB/SUB connection, read by one task (gateway/engine/redis_pubsub.py's ``PubSubListener``), so a
channel's deliveries arrive in offset order; this module decodes them for the node.

That connection is watched (reliability-notes §1.5): every ``probe_interval_seconds`` the broker
publishes a probe to its own node channel on every shard; a connection that hears nothing (no
probe, no publication) for ``probe_timeout_seconds`` is torn down and rebuilt by its listener.
After any rebuild, every channel is subscribed again and ``on_broker_reconnect`` tells the
node that deliveries may have been lost, so it re-checks positions against history. The probe
also runs the publish script on the node's own probe keys: ``healthy()`` follows what
publishing needs, so a Redis that still LOADs its dataset after a restart (PUBLISH and
SUBSCRIBE work, scripts do not) is unhealthy. Failures are logged once per state change
(``failures.FailureRun``). Must not import starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from gateway.engine.base import (
    BrokerEventHandler,
    EngineError,
    HistoryOptions,
    HistoryResult,
    PublishItem,
    PublishResult,
)
from gateway.engine.failures import FailureRun
from gateway.engine.memory import new_epoch
from gateway.engine.redis import Client, LuaScript, RedisShard
from gateway.engine.redis_batch import publish_many, publish_result
from gateway.engine.redis_codec import (
    JOIN,
    LEAVE,
    POSITIONED,
    POSITIONED_DELTA,
    PROBE,
    UNPOSITIONED,
    decode_info,
    decode_positioned,
    decode_positioned_delta,
    decode_publication,
    encode_info,
    encode_publication,
)
from gateway.engine.redis_keys import RedisKeys, shard_index
from gateway.engine.redis_pubsub import PubSubListener
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition
from httpwire.cancellation import raise_if_cancelling

logger = logging.getLogger(__name__)

PUBLISH = LuaScript("publish.lua")
HISTORY = LuaScript("history.lua")
PROBE_PUBLICATION = encode_publication(Publication(data=b"null"))


MAX_TOP_OFFSET = 2**63 - 1
"""No stream's top offset exceeds this: the meta's top is a Redis integer (HINCRBY)."""


def history_bounds(since: StreamPosition | None, limit: int, reverse: bool) -> tuple[int, int]:
    """history.lua's (since offset, limit) for any ints a client may have sent, selecting what
    the memory engine selects: an offset past every possible top reads nothing forward and
    everything in reverse; a negative offset reads like 0; a limit past 2^63-1 (Redis' COUNT
    range) or negative reads all. Both values end in [-1, 2^63-1], where ``since == -1`` means
    no ``since``."""
    if limit < 0 or limit > MAX_TOP_OFFSET:
        limit = -1
    if since is None:
        return -1, limit
    offset = max(since.offset, 0)
    if offset > MAX_TOP_OFFSET:
        return (-1, limit) if reverse else (MAX_TOP_OFFSET, 0)
    return offset, limit


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000)) if seconds > 0 else 0


class RedisBroker:
    """A ``Broker`` over one or more Redis shards (see ``gateway.engine.redis.build_shards``).

    Args:
        shards: Channels map to ``shards[shard_index(channel, len(shards))]``; control messages use
            ``shards[0]``. The broker owns them and closes them in ``close``.
        prefix: ``engine.redis.prefix``.
        node_id: This node's uid: targeted control messages for it arrive on
            ``<prefix>.node.<node_id>``. A random one if empty; ``set_node_id`` replaces it.
        epoch_factory: Mints the epoch a script uses when the stream meta is missing.
        probe_interval_seconds: Pause between PUB/SUB probes (and health checks) per shard.
        probe_timeout_seconds: Silence after which a PUB/SUB connection is rebuilt
            (default three probe intervals).
        reconnect_backoff_seconds: (base, cap) of the full-jitter reconnect backoff.
    """

    def __init__(
        self,
        shards: Sequence[RedisShard],
        *,
        prefix: str,
        node_id: str = "",
        epoch_factory: Callable[[], str] = new_epoch,
        probe_interval_seconds: float = 2.0,
        probe_timeout_seconds: float = 0.0,
        reconnect_backoff_seconds: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        if not shards:
            raise ValueError("RedisBroker needs at least one shard")
        self.shards = list(shards)
        self.keys = RedisKeys(prefix)
        self.node_id = node_id or str(uuid.uuid4())
        self._new_epoch = epoch_factory
        self.probe_interval_seconds = probe_interval_seconds
        self.probe_timeout_seconds = probe_timeout_seconds or 3 * probe_interval_seconds
        self._backoff = reconnect_backoff_seconds
        self._handler: BrokerEventHandler | None = None
        for shard in self.shards:
            shard.set_role("broker")
        self._listeners = [PubSubListener(self, shard) for shard in self.shards]
        self._handling = FailureRun("redis broker: handling PUB/SUB messages", logger)

    def set_node_id(self, node_id: str) -> None:
        """Use the node's uid for targeted control messages. Call before ``run``."""
        self.node_id = node_id

    def set_handler(self, handler: BrokerEventHandler) -> None:
        self._handler = handler

    def backoff(self, attempt: int) -> float:
        base, cap = self._backoff
        return random.uniform(base / 2, min(cap, base * 2 ** min(attempt, 20)))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for listener in self._listeners:
                group.create_task(listener.run())
            group.create_task(self._probe())

    async def _probe(self) -> None:
        while True:
            # Concurrently: a stalled shard must not delay the other shards' keep-alive PUBLISH.
            await asyncio.gather(*(self._probe_shard(shard) for shard in self.shards))
            raise_if_cancelling()  # a probe suppresses its EngineError, a converted cancel too
            await asyncio.sleep(self.probe_interval_seconds)

    async def _probe_shard(self, shard: RedisShard) -> None:
        """Keep the PUB/SUB connection talking (silence means deaf, §1.5), and run the publish
        script on this node's probe keys: health follows what publishing needs. A bare PUBLISH
        is answered while Redis still LOADs after a restart, when every publish fails.
        Failures are logged by the shard's ``FailureRun``."""
        node = self.keys.node(self.node_id)
        stream, meta, result, channel = self.keys.probe(self.node_id)
        ttl = _ms(max(self.probe_timeout_seconds, 1.0))
        args: list[str | bytes | int] = [PROBE_PUBLICATION, 1, ttl, channel, ttl, self._new_epoch(), 0]

        async def keep_alive() -> None:
            with contextlib.suppress(EngineError):
                await shard.call(lambda client: client.publish(node, PROBE), op="probe", proof=False)

        async def run(client: Client) -> Any:
            return await PUBLISH.run(client, [stream, meta, result], args)

        async def script() -> None:
            with contextlib.suppress(EngineError):
                await shard.call(run, op="probe")

        # Side by side: a slow script must not stretch the keep-alive period.
        await asyncio.gather(keep_alive(), script())

    def _shard(self, channel: str) -> RedisShard:
        return self.shards[shard_index(channel, len(self.shards))]

    async def publish(
        self,
        channel: str,
        pub: Publication,
        history: HistoryOptions,
        *,
        idempotency_key: str = "",
        idempotent_result_ttl_seconds: float = 300.0,
        version: int = 0,
        version_epoch: str = "",
    ) -> PublishResult:
        script_keys, args = self.publish_call(
            PublishItem(channel, pub, history, idempotency_key, version, version_epoch),
            idempotent_result_ttl_seconds,
        )

        async def run(client: Client) -> Any:
            return await PUBLISH.run(client, script_keys, args)

        return publish_result(await self._shard(channel).call(run, op="publish"))

    def publish_call(
        self, item: PublishItem, idempotent_result_ttl_seconds: float = 300.0
    ) -> tuple[list[str], list[str | bytes | int]]:
        """The keys and arguments of publish.lua for one publication."""
        keys = self.keys
        channel, history = item.channel, item.history
        enabled = history.enabled
        result_ttl = _ms(idempotent_result_ttl_seconds) if item.idempotency_key else 0
        script_keys = [keys.stream(channel), keys.meta(channel), keys.result(channel, item.idempotency_key)]
        args: list[str | bytes | int] = [
            encode_publication(item.pub),
            history.size if enabled else 0,
            _ms(history.ttl_seconds),
            keys.client_channel(channel),
            _ms(history.meta_ttl_seconds),
            self._new_epoch() if enabled else "",
            result_ttl,
            str(item.version),  # a string: Lua numbers are doubles, a uint64 version must compare exactly
            item.version_epoch,
        ]
        return script_keys, args

    async def publish_many(self, items: Sequence[PublishItem]) -> list[PublishResult | EngineError]:
        """``BatchBroker.publish_many``: one pipeline of publish.lua calls per shard
        (gateway/engine/redis_batch.py), the shards side by side."""
        shards = len(self.shards)
        calls = [(shard_index(item.channel, shards), *self.publish_call(item)) for item in items]
        return await publish_many(self.shards, calls, PUBLISH)

    async def publish_join(self, channel: str, info: ClientInfo) -> None:
        await self._publish(channel, JOIN + encode_info(info))

    async def publish_leave(self, channel: str, info: ClientInfo) -> None:
        await self._publish(channel, LEAVE + encode_info(info))

    async def _publish(self, channel: str, message: bytes) -> None:
        name = self.keys.client_channel(channel)
        await self._shard(channel).call(
            lambda client: client.publish(name, message), op="join_leave", proof=False
        )

    async def history(
        self,
        channel: str,
        history: HistoryOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult:
        keys = self.keys
        script_keys = [keys.stream(channel), keys.meta(channel)]
        since_offset, limit = history_bounds(since, limit, reverse)
        args: list[str | bytes | int] = [
            self._new_epoch(),
            _ms(history.meta_ttl_seconds),
            since_offset,
            limit,
            "1" if reverse else "0",
        ]

        async def run(client: Client) -> Any:
            return await HISTORY.run(client, script_keys, args)

        top, epoch, entries = await self._shard(channel).call(run, op="history")
        publications = [
            decode_publication(fields[1], int(entry_id.split(b"-", 1)[0])) for entry_id, fields in entries
        ]
        return HistoryResult(publications, StreamPosition(int(top), epoch.decode()))

    async def remove_history(self, channel: str) -> None:
        stream = self.keys.stream(channel)
        await self._shard(channel).call(lambda client: client.delete(stream), op="remove_history")

    async def publish_control(self, data: bytes, *, node_id: str = "") -> None:
        name = self.keys.node(node_id) if node_id else self.keys.control
        await self.shards[0].call(lambda client: client.publish(name, data), op="control", proof=False)

    def healthy(self) -> bool:
        return all(shard.ok for shard in self.shards) and all(lst.ready for lst in self._listeners)

    async def subscribe(self, channel: str) -> None:
        listener = self._listeners[shard_index(channel, len(self.shards))]
        await listener.subscribe(self.keys.client_channel(channel).encode(), channel)

    async def unsubscribe(self, channel: str) -> None:
        listener = self._listeners[shard_index(channel, len(self.shards))]
        await listener.unsubscribe(self.keys.client_channel(channel).encode())

    async def close(self) -> None:
        self._handler = None
        for listener in self._listeners:
            await listener.close()
        for shard in self.shards:
            with contextlib.suppress(Exception):
                await shard.close()

    # --- PubSubListener's Receiver ----------------------------------------------------------------

    def deliver(self, channel: str, message: bytes) -> None:
        handler = self._handler
        if handler is None:
            return
        try:
            if message.startswith(POSITIONED):
                pub, position = decode_positioned(message)
                handler.on_publication(channel, pub, position)
            elif message.startswith(POSITIONED_DELTA):
                pub, position = decode_positioned_delta(message)
                handler.on_publication(channel, pub, position)
            elif message.startswith(UNPOSITIONED):
                handler.on_publication(channel, decode_publication(message[len(UNPOSITIONED) :], 0), None)
            elif message.startswith(JOIN):
                handler.on_join(channel, decode_info(message[len(JOIN) :]))
            elif message.startswith(LEAVE):
                handler.on_leave(channel, decode_info(message[len(LEAVE) :]))
            else:
                self._handling.failed(f"unknown PUB/SUB message in {channel!r} ignored")
                return
        except Exception as exc:
            # Anyone can PUBLISH to these channels: a bad message is logged once per run, not
            # once per message, with the first one's traceback.
            self._handling.failed(f"a message in {channel!r} failed: {type(exc).__name__}: {exc}", exc)
            return
        self._handling.succeeded()

    def control(self, data: bytes) -> None:
        handler = self._handler
        if handler is not None:
            try:
                handler.on_control(data)
            except Exception as exc:
                self._handling.failed(f"a control message failed: {type(exc).__name__}: {exc}", exc)

    def reconnected(self) -> None:
        handler = self._handler
        if handler is not None:
            try:
                handler.on_broker_reconnect()
            except Exception:
                logger.exception("broker handler failed on reconnect")
