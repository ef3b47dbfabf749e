"""The engine seam: ``Broker`` and ``PresenceManager`` Protocols and their value types.

A Broker owns both fan-out between nodes and the per-channel history stream, because appending
a publication to history and publishing it must be one atomic step (PROTOCOL.md §3.5): the
position a subscriber learns from a live publication is the one history will answer with.
Implementations: ``memory.MemoryBroker`` (one process) and ``redis_broker.RedisBroker``.
This module must not import asyncio-specific I/O, starlette or redis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway.protocol.messages import ClientInfo, Publication, StreamPosition


class EngineError(Exception):
    """A temporary engine failure (Redis unreachable, timeout): callers answer error 100."""


@dataclass(frozen=True, slots=True)
class HistoryOptions:
    """History settings of a channel, resolved from its namespace. ``size == 0`` or ``ttl == 0``
    means the channel keeps no history (publications get no offset)."""

    size: int = 0
    ttl_seconds: float = 0.0
    meta_ttl_seconds: float = 720 * 3600.0

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.ttl_seconds > 0


@dataclass(frozen=True, slots=True)
class PublishResult:
    """``position`` is None for channels without history. ``suppressed`` is True when an
    idempotency key matched an earlier publish: nothing was published and ``position`` is the
    first publish's result."""

    position: StreamPosition | None
    suppressed: bool = False


@dataclass(frozen=True, slots=True)
class HistoryResult:
    """Publications (oldest first unless reverse was asked) and the stream's current top."""

    publications: list[Publication]
    position: StreamPosition


@dataclass(slots=True)
class PublishItem:
    """One prepared publish (the arguments of ``Broker.publish``; ``Node.publish_item`` builds
    it) for ``BatchBroker.publish_many`` and ``InlineBroker.publish_now``. Not frozen (built per
    publication on the hot path); nothing changes it once built."""

    channel: str
    pub: Publication
    history: HistoryOptions
    idempotency_key: str = ""
    version: int = 0
    version_epoch: str = ""
    write_now: bool = False
    """The publication is alone in its loop tick (a lone server API publish): an engine that
    delivers while it publishes (``InlineBroker.publish_now``) hands it on to
    ``BrokerEventHandler.on_publication``, so a channel's only local subscriber may be written at
    once instead of at the end of the tick. Others ignore it (their deliveries arrive in bursts)."""


@runtime_checkable
class InlineBroker(Protocol):
    """A broker whose publish completes without suspending (the memory engine, when its
    ``publishes_inline`` is True): the node publishes through ``publish_now``, which may run
    outside any task, with ``publish``'s semantics (idempotency results cached for the default
    300 s), delivering with the item's ``write_now``."""

    publishes_inline: bool

    def publish_now(self, item: PublishItem) -> PublishResult: ...


@runtime_checkable
class BatchBroker(Protocol):
    """A broker that publishes many publications in one round trip (the Redis engine: one
    pipeline per shard). The server API's sequential ``batch`` uses it for runs of publishes."""

    async def publish_many(self, items: Sequence[PublishItem]) -> list[PublishResult | EngineError]:
        """Publish every item, in order per channel (and per shard), as ``publish`` would; one
        result per item: its ``PublishResult``, or the ``EngineError`` it failed with (a
        shard's failure fails each of its items; the others are unaffected). Never raises
        ``EngineError`` itself."""
        ...


class BrokerEventHandler(Protocol):
    """What a Broker calls when a publication (or join/leave) for a channel this node
    subscribed to arrives. Called on the event loop, in offset order per channel."""

    def on_publication(
        self, channel: str, pub: Publication, position: StreamPosition | None, write_now: bool = False
    ) -> None:
        """``write_now``: the publication is alone in its loop tick (``PublishItem.write_now``)."""
        ...

    def on_join(self, channel: str, info: ClientInfo) -> None: ...

    def on_leave(self, channel: str, info: ClientInfo) -> None: ...

    def on_control(self, data: bytes) -> None:
        """A control message from ``publish_control`` (any node, this one included)."""
        ...

    def on_broker_reconnect(self) -> None:
        """The PUB/SUB connection was re-established: deliveries may have been lost meanwhile.
        The node checks its positioned subscriptions against history."""
        ...


class Broker(Protocol):
    """PUB/SUB between nodes plus bounded history with epoch/offset.

    Contract (the contract suite in tests/contracts checks every implementation):

    * ``publish`` with history enabled assigns ``offset = top + 1`` and appends, trims to
      ``size``, refreshes the stream TTL (``ttl_seconds``, whole stream) and the meta TTL, and
      delivers the publication to every node's handler (including this node's) with that
      position — all as one atomic step per channel. Offsets start at 1 in a fresh epoch.
    * When the stream meta (epoch + top) is missing — never created, expired, evicted — a new
      random epoch is minted and offsets restart; old entries are dropped.
    * ``idempotency_key``: a second publish with the same key on the same channel within
      ``idempotent_result_ttl_seconds`` returns the first result with ``suppressed=True`` and
      neither delivers nor consumes an offset.
    * ``version`` (> 0, history enabled only): a publish whose version is not greater than the
      last one stored for the channel, when ``version_epoch`` is empty or equal to the stored
      one, is dropped: ``suppressed=True``, ``position`` the current top, nothing delivered or
      stored. Otherwise the version (and its epoch) is remembered with the stream meta, so a
      new stream epoch forgets it. This is centrifuge's ``PublishOptions.Version``.
    * ``history`` creates the meta if missing (so an empty channel has an epoch and top 0) and
      refreshes the meta TTL. ``since`` selects publications strictly after ``since.offset``
      (forward) or strictly before it (reverse); ``limit`` 0 returns none, -1 all.
      ``since.epoch`` is not checked here; callers compare it with the returned position.
      Any ints are answered, never an error: an offset past the top selects nothing forward
      and everything in reverse, a negative one reads like 0, any negative limit reads all
      (bounding client values is the protocol parsers' job; Redis once failed from 10^14 on).
    * ``remove_history`` drops entries but keeps epoch and top offset.

    Raises:
        EngineError: on a temporary failure of the underlying store.
    """

    def set_handler(self, handler: BrokerEventHandler) -> None: ...

    async def run(self) -> None:
        """Background work (PUB/SUB reader, TTL sweeps) until cancelled."""
        ...

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
    ) -> PublishResult: ...

    async def publish_join(self, channel: str, info: ClientInfo) -> None: ...

    async def publish_leave(self, channel: str, info: ClientInfo) -> None: ...

    async def history(
        self,
        channel: str,
        history: HistoryOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult: ...

    async def remove_history(self, channel: str) -> None: ...

    async def publish_control(self, data: bytes, *, node_id: str = "") -> None:
        """Send a control message to every node (``node_id == ""``) or to one node. Delivered
        to ``on_control`` of the receiving nodes' handlers, this node included when targeted."""
        ...

    def healthy(self) -> bool:
        """Whether a publish can succeed now (``/health`` answers 503 when not): False while the
        store is unreachable, and after a lost connection until publishing works again (a Redis
        restarting from disk accepts connections long before it accepts scripts)."""
        ...

    async def subscribe(self, channel: str) -> None:
        """Start receiving this channel's publications on this node."""
        ...

    async def unsubscribe(self, channel: str) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PresenceStats:
    num_clients: int
    num_users: int


class PresenceManager(Protocol):
    """Who is subscribed to a channel, across nodes. Entries expire after ``ttl_seconds``
    unless re-added (each connection re-adds itself every ``client.presence_update_interval``)."""

    async def run(self) -> None:
        """Background expiry sweeps until cancelled."""
        ...

    async def add(self, channel: str, client_id: str, info: ClientInfo) -> None: ...

    async def remove(self, channel: str, client_id: str) -> None: ...

    async def presence(self, channel: str) -> Mapping[str, ClientInfo]: ...

    async def stats(self, channel: str) -> PresenceStats: ...

    async def close(self) -> None: ...
