"""Every Redis key and PUB/SUB channel name the Redis engine uses, and the shard of a channel.

The layout follows Centrifugo's (PROTOCOL.md §3.5) with the channel always wrapped in a hash tag
``{ch}``, so all keys of one channel hash to one Redis Cluster slot and a script may touch them
together. Pure: imports no redis or asyncio.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


def shard_index(channel: str, shards: int) -> int:
    """Client-side sharding (``engine.redis.address`` with several entries): crc32 of the
    channel modulo the number of shards, so a channel always lives on one shard."""
    if shards <= 1:
        return 0
    return zlib.crc32(channel.encode()) % shards


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key and channel names under ``prefix`` (``engine.redis.prefix``)."""

    prefix: str

    def stream(self, channel: str) -> str:
        return f"{self.prefix}.stream.{{{channel}}}"

    def meta(self, channel: str) -> str:
        return f"{self.prefix}.stream.meta.{{{channel}}}"

    def result(self, channel: str, idempotency_key: str) -> str:
        return f"{self.prefix}.result.{{{channel}}}.{idempotency_key}"

    def client_channel(self, channel: str) -> str:
        """PUB/SUB channel carrying publications, joins and leaves of ``channel``."""
        return f"{self.prefix}.client.{{{channel}}}"

    def presence_data(self, channel: str) -> str:
        return f"{self.prefix}.presence.data.{{{channel}}}"

    def presence_expire(self, channel: str) -> str:
        return f"{self.prefix}.presence.expire.{{{channel}}}"

    @property
    def control(self) -> str:
        """PUB/SUB channel every node listens to."""
        return f"{self.prefix}.control"

    def node(self, node_id: str) -> str:
        """PUB/SUB channel of one node (targeted control messages and its pub/sub probe)."""
        return f"{self.prefix}.node.{node_id}"

    def probe(self, node_id: str) -> tuple[str, str, str, str]:
        """Stream, meta, result key and PUB/SUB channel of one node's health probe: the publish
        script run on them proves publishing works (issue 13, defect 7). Outside every
        channel's names, so no client channel can collide with them."""
        tag = f"{{{node_id}}}"
        base = f"{self.prefix}.probe"
        return f"{base}.stream.{tag}", f"{base}.meta.{tag}", f"{base}.result.{tag}", f"{base}.{tag}"
