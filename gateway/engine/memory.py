"""In-process engine: ``MemoryBroker`` and ``MemoryPresence``, the embedded default for one node.

They mirror the Redis semantics of PROTOCOL.md §3.5 (epoch and top offset in a meta record with
its own TTL, whole-stream history TTL, idempotent result cache) with plain dicts and deques, so the
contract suite in tests/contracts holds for both engines. Expiry is computed lazily from an
injected clock; ``run()`` adds a bounded periodic sweep that reclaims idle channels. This module
must not import starlette or redis.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import os
import string
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from itertools import islice
from typing import ClassVar

from gateway.engine.base import (
    BrokerEventHandler,
    HistoryOptions,
    HistoryResult,
    PresenceStats,
    PublishItem,
    PublishResult,
)
from gateway.engine.failures import FailureRun
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition

logger = logging.getLogger(__name__)

Clock = Callable[[], float]

_LETTERS = string.ascii_letters
_EPOCH_LETTERS = bytes(ord(_LETTERS[b % len(_LETTERS)]) for b in range(256))
"""Each byte value's letter: ``bytes.translate`` turns random bytes into letters in one call."""


def new_epoch() -> str:
    """A fresh epoch: 8 random ASCII letters, like centrifuge's (from ``os.urandom``; each byte
    mapped to one of 52 letters, about 45.5 bits in all). Cheap: the Redis engine mints one for
    every publish, in case the script finds the stream's meta missing."""
    return os.urandom(8).translate(_EPOCH_LETTERS).decode()


def _expiry(now: float, ttl_seconds: float) -> float:
    # A non-positive TTL means "never expires", as an EXPIRE that the Lua scripts skip.
    return now + ttl_seconds if ttl_seconds > 0 else math.inf


@dataclass(slots=True)
class _Stream:
    """One channel's stream. ``entries`` hold publications with their offsets set; their offsets
    are contiguous and end at ``top`` (appends take ``top + 1``, trims and clears remove from the
    left or everything), so an offset maps to an index by subtraction. ``entries`` is None while
    empty: a deque costs ~760 bytes, and a meta outlives its entries by default (720h vs. the
    history TTL), so idle channels keep only epoch and top."""

    epoch: str
    top: int
    entries: deque[Publication] | None
    expires_at: float
    meta_expires_at: float
    version: int = 0
    version_epoch: str = ""


class _Cursor:
    """Round-robin over a dict's keys with bounded work per step, tolerant of mutation."""

    __slots__ = ("_keys", "_pos")

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._pos = 0

    def take(self, source: Mapping[str, object], budget: int) -> list[str]:
        if self._pos >= len(self._keys):
            self._keys = list(source)
            self._pos = 0
        batch = self._keys[self._pos : self._pos + budget]
        self._pos += len(batch)
        return batch


UNPOSITIONED = PublishResult(None)
"""The result of every publish to a channel without history (immutable: shared)."""


class MemoryBroker:
    """A ``Broker`` for one process: history, idempotency and delivery to this node's handler.

    ``publish`` delivers synchronously, before it returns and without awaiting in between, so a
    publication's offset and its delivery are one atomic step and handlers see offset order.
    A handler exception is logged (once per run of failures) and does not fail the publish (on
    Redis the handler runs in the PUB/SUB reader, far from the publisher; the publication is
    stored either way).
    A ``meta_ttl_seconds`` of 0 keeps the meta forever; an ``idempotent_result_ttl_seconds`` of 0
    caches no result. Without ``run()``, idle channels are reclaimed only when next used.

    Args:
        now: Monotonic clock in seconds, used for every expiry.
        epoch_factory: Mints epochs (tests inject deterministic ones).
        sweep_interval_seconds: Pause between sweeps in ``run()``.
        sweep_batch: Most channels (and idempotency results) examined per sweep.
    """

    publishes_inline: ClassVar[bool] = True
    """``publish`` never suspends and ``publish_now`` is the same step without a coroutine: the
    node publishes through ``publish_now`` (gateway/node.py), and a server API publish may run
    outside any task (httpwire/inline.py). A subclass that overrides ``publish`` gets False
    (its override is then what every publish goes through) unless it sets the attribute itself."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "publish" in cls.__dict__ and "publishes_inline" not in cls.__dict__:
            cls.publishes_inline = False

    def __init__(
        self,
        *,
        now: Clock = time.monotonic,
        epoch_factory: Callable[[], str] = new_epoch,
        sweep_interval_seconds: float = 1.0,
        sweep_batch: int = 1000,
    ) -> None:
        self._now = now
        self._new_epoch = epoch_factory
        self._sweep_interval = sweep_interval_seconds
        self._sweep_batch = sweep_batch
        self._handler: BrokerEventHandler | None = None
        self._subscribed: set[str] = set()
        self._streams: dict[str, _Stream] = {}
        self._results: dict[tuple[str, str], tuple[PublishResult, float]] = {}
        self._result_expiries: list[tuple[float, str, str]] = []
        self._cursor = _Cursor()
        self._handling = FailureRun("memory broker: handler", logger, now=now)

    def set_handler(self, handler: BrokerEventHandler) -> None:
        self._handler = handler

    def _handler_failed(self, what: str, exc: Exception) -> None:
        # Logged once per run of failures with the first traceback, not per message (FailureRun).
        self._handling.failed(f"{what}: {type(exc).__name__}: {exc}", exc)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()

    def sweep(self) -> int:
        """Reclaim expired state, examining at most ``sweep_batch`` channels and results.

        Returns the number of channels and results dropped. Channels are visited round-robin,
        so every idle channel is reclaimed within ``channels / sweep_batch`` sweeps.
        """
        now = self._now()
        dropped = self._expire_results(now, self._sweep_batch)
        streams = self._streams
        for channel in self._cursor.take(streams, self._sweep_batch):
            stream = streams.get(channel)
            if stream is not None and self._live_stream(channel, stream, now) is None:
                dropped += 1
        return dropped

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
        return self._publish(
            channel, pub, history, idempotency_key, idempotent_result_ttl_seconds, version, version_epoch
        )

    def publish_now(self, item: PublishItem) -> PublishResult:
        """``publish`` of one item, synchronously (``InlineBroker``)."""
        return self._publish(
            item.channel,
            item.pub,
            item.history,
            item.idempotency_key,
            300.0,
            item.version,
            item.version_epoch,
            item.write_now,
        )

    def _publish(
        self,
        channel: str,
        pub: Publication,
        history: HistoryOptions,
        idempotency_key: str,
        idempotent_result_ttl_seconds: float,
        version: int,
        version_epoch: str,
        write_now: bool = False,
    ) -> PublishResult:
        now = self._now()
        if idempotency_key:
            cached = self._results.get((channel, idempotency_key))
            if cached is not None:
                if now < cached[1]:
                    return cached[0]
                del self._results[(channel, idempotency_key)]

        position: StreamPosition | None = None
        if history.enabled:
            stream = self._streams.get(channel)
            if stream is not None:
                stream = self._live_stream(channel, stream, now)
            if stream is None:
                stream = _Stream(self._new_epoch(), 0, None, 0.0, 0.0)
                self._streams[channel] = stream
            if version:
                if (
                    stream.version
                    and version_epoch in ("", stream.version_epoch)
                    and stream.version >= version
                ):
                    return PublishResult(StreamPosition(stream.top, stream.epoch), suppressed=True)
                stream.version, stream.version_epoch = version, version_epoch
            entries = stream.entries
            if entries is None or entries.maxlen != history.size:
                entries = stream.entries = deque(entries or (), maxlen=history.size)
            stream.top += 1
            pub = replace(pub, offset=stream.top)
            entries.append(pub)
            stream.expires_at = now + history.ttl_seconds
            stream.meta_expires_at = _expiry(now, history.meta_ttl_seconds)
            position = StreamPosition(stream.top, stream.epoch)
        elif pub.offset:
            pub = replace(pub, offset=0)

        handler = self._handler
        if handler is not None and channel in self._subscribed:
            try:
                handler.on_publication(channel, pub, position, write_now)
            except Exception as exc:
                self._handler_failed(f"publication in {channel!r}", exc)
            else:
                self._handling.succeeded()

        if idempotency_key and idempotent_result_ttl_seconds > 0:
            expires_at = now + idempotent_result_ttl_seconds
            self._results[(channel, idempotency_key)] = (PublishResult(position, suppressed=True), expires_at)
            heapq.heappush(self._result_expiries, (expires_at, channel, idempotency_key))
            # Bound the cache even when run() is not sweeping.
            self._expire_results(now, 2)
        return PublishResult(position) if position is not None else UNPOSITIONED

    async def publish_join(self, channel: str, info: ClientInfo) -> None:
        handler = self._handler
        if handler is not None and channel in self._subscribed:
            try:
                handler.on_join(channel, info)
            except Exception as exc:
                self._handler_failed(f"join in {channel!r}", exc)

    async def publish_leave(self, channel: str, info: ClientInfo) -> None:
        handler = self._handler
        if handler is not None and channel in self._subscribed:
            try:
                handler.on_leave(channel, info)
            except Exception as exc:
                self._handler_failed(f"leave in {channel!r}", exc)

    async def history(
        self,
        channel: str,
        history: HistoryOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult:
        now = self._now()
        stream = self._streams.get(channel)
        if stream is not None:
            stream = self._live_stream(channel, stream, now)
        if stream is None:
            # §3.1: the first read creates the meta, so an empty channel has an epoch and top 0.
            # The stream expiry stays in the past: a read never extends history_ttl.
            stream = _Stream(self._new_epoch(), 0, None, 0.0, 0.0)
            self._streams[channel] = stream
        stream.meta_expires_at = _expiry(now, history.meta_ttl_seconds)
        top = StreamPosition(stream.top, stream.epoch)
        if limit == 0 or stream.entries is None:
            return HistoryResult([], top)
        return HistoryResult(_select(stream.entries, stream.top, since, limit, reverse), top)

    async def remove_history(self, channel: str) -> None:
        stream = self._streams.get(channel)
        if stream is not None:
            stream.entries = None

    async def publish_control(self, data: bytes, *, node_id: str = "") -> None:
        """One process is the whole cluster: control messages loop back to this node."""
        handler = self._handler
        if handler is not None:
            try:
                handler.on_control(data)
            except Exception as exc:
                self._handler_failed("a control message", exc)

    def healthy(self) -> bool:
        return True

    async def subscribe(self, channel: str) -> None:
        self._subscribed.add(channel)

    async def unsubscribe(self, channel: str) -> None:
        self._subscribed.discard(channel)

    async def close(self) -> None:
        self._subscribed.clear()
        self._handler = None

    def _live_stream(self, channel: str, stream: _Stream, now: float) -> _Stream | None:
        """Apply lazy expiry: drop the whole stream when its meta expired (the next use mints a new
        epoch), or only its entries when history_ttl passed without a publish."""
        if now >= stream.meta_expires_at:
            del self._streams[channel]
            return None
        if stream.entries is not None and now >= stream.expires_at:
            stream.entries = None
        return stream

    def _expire_results(self, now: float, budget: int) -> int:
        heap = self._result_expiries
        results = self._results
        dropped = 0
        while heap and budget > 0 and heap[0][0] <= now:
            _, channel, key = heapq.heappop(heap)
            budget -= 1
            cached = results.get((channel, key))
            # A key re-published after expiry has a newer entry; only drop the expired one.
            if cached is not None and cached[1] <= now:
                del results[(channel, key)]
                dropped += 1
        return dropped


def _select(
    entries: deque[Publication], top: int, since: StreamPosition | None, limit: int, reverse: bool
) -> list[Publication]:
    count = len(entries)
    first = top - count + 1
    if not reverse:
        start = 0 if since is None else max(since.offset + 1 - first, 0)
        if start >= count:
            return []
        stop = count if limit < 0 else min(count, start + limit)
        return _slice(entries, start, stop)
    last = count - 1 if since is None else min(since.offset - 1 - first, count - 1)
    if last < 0:
        return []
    take = last + 1 if limit < 0 else min(limit, last + 1)
    selected = _slice(entries, last + 1 - take, last + 1)
    selected.reverse()
    return selected


def _slice(entries: deque[Publication], start: int, stop: int) -> list[Publication]:
    # Deques index in O(n) from the nearer end: walk from whichever end is closer to the slice,
    # since recovery reads usually want the newest few of a long history.
    count = len(entries)
    if start <= count - stop:
        return list(islice(entries, start, stop))
    selected = list(islice(reversed(entries), count - stop, count - start))
    selected.reverse()
    return selected


class MemoryPresence:
    """A ``PresenceManager`` for one process. Entries expire ``ttl_seconds`` after their last
    ``add`` (connections re-add themselves periodically, §3.6); expiry is lazy on read, plus a
    bounded sweep in ``run()`` for channels nobody reads.

    Args:
        ttl_seconds: Lifetime of an entry after ``add`` (``engine.redis.presence_ttl``, 60s).
        now: Monotonic clock in seconds.
        sweep_interval_seconds: Pause between sweeps in ``run()``.
        sweep_batch: Most channels examined per sweep.
    """

    def __init__(
        self,
        *,
        ttl_seconds: float = 60.0,
        now: Clock = time.monotonic,
        sweep_interval_seconds: float = 10.0,
        sweep_batch: int = 1000,
    ) -> None:
        self._ttl = ttl_seconds
        self._now = now
        self._sweep_interval = sweep_interval_seconds
        self._sweep_batch = sweep_batch
        self._channels: dict[str, dict[str, tuple[ClientInfo, float]]] = {}
        self._cursor = _Cursor()

    async def add(self, channel: str, client_id: str, info: ClientInfo) -> None:
        clients = self._channels.get(channel)
        if clients is None:
            clients = self._channels[channel] = {}
        clients[client_id] = (info, self._now() + self._ttl)

    async def remove(self, channel: str, client_id: str) -> None:
        clients = self._channels.get(channel)
        if clients is not None:
            clients.pop(client_id, None)
            if not clients:
                del self._channels[channel]

    async def presence(self, channel: str) -> Mapping[str, ClientInfo]:
        clients = self._live(channel, self._now())
        return {client_id: info for client_id, (info, _) in clients.items()}

    async def stats(self, channel: str) -> PresenceStats:
        clients = self._live(channel, self._now())
        return PresenceStats(
            num_clients=len(clients),
            num_users=len({info.user for info, _ in clients.values()}),
        )

    async def close(self) -> None:
        self._channels.clear()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()

    def sweep(self) -> int:
        """Drop expired entries in at most ``sweep_batch`` channels; returns entries dropped."""
        now = self._now()
        dropped = 0
        for channel in self._cursor.take(self._channels, self._sweep_batch):
            clients = self._channels.get(channel)
            if clients is not None:
                before = len(clients)
                dropped += before - len(self._live(channel, now))
        return dropped

    def _live(self, channel: str, now: float) -> dict[str, tuple[ClientInfo, float]]:
        clients = self._channels.get(channel)
        if clients is None:
            return {}
        expired = [client_id for client_id, (_, expires_at) in clients.items() if now >= expires_at]
        for client_id in expired:
            del clients[client_id]
        if not clients:
            del self._channels[channel]
        return clients
