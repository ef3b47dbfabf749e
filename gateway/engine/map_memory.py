"""In-process map engine: ``MemoryMapBroker`` keeps every map channel in a ``MapChannel``
(gateway/maps/state.py) and delivers changes straight to the node's handler (one process, no
PUB/SUB). Expiry is lazy on every access plus a bounded periodic sweep (``run``) that removes
expired keys (delivering their removals) and forgets channels whose meta expired.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.engine.base import BrokerEventHandler
from gateway.engine.failures import FailureRun
from gateway.engine.map_base import MapStateResult, MapStreamResult
from gateway.engine.memory import new_epoch
from gateway.maps.options import MapOptions
from gateway.maps.state import SUPPRESS_KEY_NOT_FOUND, MapChange, MapChannel, UpdateResult
from gateway.protocol.messages import Publication, StreamPosition

logger = logging.getLogger(__name__)


class MemoryMapBroker:
    """``MapBroker`` in one process.

    Args:
        now: Monotonic clock (seconds) for every expiry.
        wall: Unix clock (seconds) for the publication time of removals by TTL.
        epoch_factory: Mints epochs.
        sweep_interval_seconds: Pause between sweeps in ``run``.
    """

    def __init__(
        self,
        *,
        now: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        epoch_factory: Callable[[], str] = new_epoch,
        sweep_interval_seconds: float = 1.0,
    ) -> None:
        self._now = now
        self._wall = wall
        self._new_epoch = epoch_factory
        self._sweep_interval = sweep_interval_seconds
        self._channels: dict[str, tuple[MapChannel, MapOptions]] = {}
        self._handler: BrokerEventHandler | None = None
        self._handling = FailureRun("memory map broker: handler", logger, now=now)

    def set_handler(self, handler: BrokerEventHandler) -> None:
        self._handler = handler

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()

    def sweep(self) -> int:
        """Expire keys (delivering removals) and forget channels whose meta expired; returns how
        many keys and channels went."""
        now, gone = self._now(), 0
        for channel, (state, opts) in list(self._channels.items()):
            if state.forgotten(now):
                del self._channels[channel]
                gone += 1
                continue
            removals = state.expire_keys(opts, now, int(self._wall() * 1000))
            gone += len(removals)
            self._deliver(channel, state, removals)
        return gone

    def _channel(self, channel: str, opts: MapOptions, *, create: bool = True) -> MapChannel:
        """The channel's state (created with a new epoch when missing or forgotten, unless not
        ``create``: then an empty state with no epoch, kept nowhere), its expired keys removed
        (their removals delivered)."""
        now = self._now()
        held = self._channels.get(channel)
        if held is None or held[0].forgotten(now):
            if not create:  # removing from a missing map creates nothing
                self._channels.pop(channel, None)
                return MapChannel("")
            state = MapChannel(self._new_epoch())
            state.touch(opts, now)
        else:
            state = held[0]
            removals = state.expire_keys(opts, now, int(self._wall() * 1000))
            self._deliver(channel, state, removals)
        self._channels[channel] = (state, opts)
        return state

    def _deliver(self, channel: str, state: MapChannel, pubs: list[Publication]) -> None:
        handler = self._handler
        if handler is None:
            return
        for pub in pubs:
            position = StreamPosition(pub.offset, state.epoch) if pub.offset else None
            try:
                handler.on_publication(channel, pub, position)
            except Exception as exc:
                self._handling.failed(f"map change in {channel!r}: {type(exc).__name__}: {exc}", exc)

    async def publish(self, channel: str, change: MapChange, opts: MapOptions) -> UpdateResult:
        state = self._channel(channel, opts)
        result, pub = state.publish(change, opts, self._now())
        if pub is not None:
            self._deliver(channel, state, [pub])
        return result

    async def remove(
        self, channel: str, key: str, opts: MapOptions, *, idempotency_key: str = ""
    ) -> UpdateResult:
        state = self._channel(channel, opts, create=False)
        if not state.epoch:  # a missing map: nothing to remove, nothing created
            return UpdateResult(state.position, True, SUPPRESS_KEY_NOT_FOUND)
        result, pub = state.remove(
            key, opts, self._now(), idempotency_key=idempotency_key, time=int(self._wall() * 1000)
        )
        if pub is not None:
            self._deliver(channel, state, [pub])
        return result

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
        state = self._channel(channel, opts)
        state.touch(opts, self._now())
        pubs, next_cursor = state.read_state(cursor, limit, revision, key)
        return MapStateResult(pubs, state.position, next_cursor)

    async def read_stream(
        self,
        channel: str,
        opts: MapOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = -1,
        reverse: bool = False,
    ) -> MapStreamResult:
        state = self._channel(channel, opts)
        now = self._now()
        state.touch(opts, now)
        return MapStreamResult(state.read_stream(since, limit, now, reverse=reverse), state.position)

    async def stats(self, channel: str, opts: MapOptions) -> int:
        return len(self._channel(channel, opts).entries)

    async def clear(self, channel: str) -> None:
        self._channels.pop(channel, None)

    async def close(self) -> None:
        self._handler = None
