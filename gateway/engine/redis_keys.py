"""Every Redis key and PUB/SUB channel name the Redis engine uses, and the shard of a channel.

The layout follows Centrifugo's (PROTOCOL.md §3.5) with the channel always wrapped in a hash tag
``{ch}``, so all keys of one channel hash to one Redis Cluster slot and a script may touch them
together. Pure: imports no redis or asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass


def shard_index(channel: str, shards: int) -> int:
    """Client-side sharding (``engine.redis.address`` with several entries), as centrifuge's
    ``consistentIndex`` does it: jump consistent hash (Lamping & Veach) of the channel's 64-bit
    FNV-1a, so a channel lives on the same shard as under Centrifugo and adding a shard moves
    only about 1/n of the channels."""
    if shards <= 1:
        return 0
    key = _FNV64_OFFSET
    for byte in channel.encode():
        key = ((key ^ byte) * _FNV64_PRIME) & _MASK64
    b, j = -1, 0
    while j < shards:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK64
        j = int(float(b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


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

    def map_keys(self, channel: str) -> list[str]:
        """The keys of a map channel, in gateway/engine/lua/map.lua's KEYS order (without the
        idempotency result, ``map_result``): state, key index, key expiry, stream, meta,
        removal payloads, per-key versions."""
        base, tag = f"{self.prefix}.map", f"{{{channel}}}"
        return [
            f"{base}.{part}.{tag}"
            for part in ("state", "index", "expire", "stream", "meta", "removal", "version")
        ]

    def map_result(self, channel: str, idempotency_key: str) -> str:
        return f"{self.prefix}.map.result.{{{channel}}}.{idempotency_key}"

    @property
    def control(self) -> str:
        """PUB/SUB channel every node listens to."""
        return f"{self.prefix}.control"

    def node(self, node_id: str) -> str:
        """PUB/SUB channel of one node (targeted control messages and its pub/sub probe)."""
        return f"{self.prefix}.node.{node_id}"

    def probe(self, node_id: str) -> tuple[str, str, str, str]:
        """Stream, meta, result key and PUB/SUB channel of one node's health probe: the publish
        script run on them proves publishing works (a bare PUBLISH does not). Outside every
        channel's names, so no client channel can collide with them."""
        tag = f"{{{node_id}}}"
        base = f"{self.prefix}.probe"
        return f"{base}.stream.{tag}", f"{base}.meta.{tag}", f"{base}.result.{tag}", f"{base}.{tag}"
