"""Stream positions of this node's subscribers (PROTOCOL.md §3.2–§3.3): where a new positioned
subscription starts (the stream top, or the client's position recovered from history and merged
with what arrived meanwhile) and whether live subscribers kept up with their channel's stream
(a check against each stream top: on idle channels every
``client.channel_position_check_delay``, on every channel after a broker reconnect, when
deliveries may have been lost).

The seam: the node (gateway/node.py) publishes, delivers and links channels; this module reads
streams through it (``Streams``: history with the node's metrics, the map change streams) and
tells subscribers through the hub's ``Connection.check_position``, which decides per
subscription (gateway/connection/delivery.py). The recovery decisions themselves are the pure
gateway/protocol/recovery.py's. Imports no connection or transport.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.config.schema import ChannelOptions, Settings
from gateway.engine.base import HistoryResult
from gateway.engine.map_base import MapBroker
from gateway.hub import Hub
from gateway.maps.options import resolve as map_options
from gateway.metrics import Metrics
from gateway.protocol import recovery
from gateway.protocol.messages import Publication, StreamPosition, SubscribeRecovery
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.node")

__all__ = ["Positioned", "Positions", "Streams"]


@dataclass(frozen=True, slots=True)
class Positioned:
    """The outcome of ``Positions.start``."""

    start: StreamPosition
    """The position the subscription continues from (live publications are checked against it)."""
    reply: StreamPosition
    """The epoch and offset written in the subscribe reply."""
    recovered: bool = False
    publications: list[Publication] | None = None
    """Recovered publications for the reply (None unless recovered)."""


class Streams(Protocol):
    """The streams positions are read from (the node): channel history, and map channels'
    change streams (``maps``: None when no map broker is attached)."""

    maps: MapBroker | None

    async def history(
        self,
        channel: str,
        opts: ChannelOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult: ...


class Positions:
    """The stream positions of one node's subscribers.

    Args:
        streams: Where streams are read (the node).
        hub: This node's subscribers, told of each stream top checked.
        settings: ``client.channel_position_check_delay``, ``client.recovery_max_publication_limit``
            and the channels' options.
        metrics: Where recoveries are counted.
        clock: Unix seconds.
        background: Runs a task the node owns (the check after a broker reconnect).
    """

    def __init__(
        self,
        streams: Streams,
        hub: Hub,
        settings: Settings,
        metrics: Metrics,
        clock: Callable[[], float],
        background: Callable[[Coroutine[Any, Any, Any]], None],
    ) -> None:
        self._streams = streams
        self._hub = hub
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._background = background
        self.last_pub_at: dict[str, float] = {}
        """Per channel: when it last received a publication with a position (unix seconds;
        the node writes it per delivery). Channels without local subscribers are dropped at
        each check."""

    def after_broker_reconnect(self) -> None:
        """Deliveries may have been lost while PUB/SUB was down: check every positioned
        subscription against its stream top (the SDKs then recover from history)."""
        self._background(self._check_after_reconnect())

    async def start(
        self,
        channel: str,
        opts: ChannelOptions,
        wanted: SubscribeRecovery | None,
        buffered: Sequence[tuple[Publication, str, object]],
    ) -> Positioned:
        """Where a new positioned subscription starts (§3.3): the stream top, or — when
        ``wanted`` asks to recover — the history since the client's position merged with the
        live publications ``buffered`` meanwhile (the subscriber is already in the hub, so
        ``buffered`` keeps growing while history is read; it is read once the read is done).

        Raises:
            EngineError: the history read failed.
        """
        if wanted is None or not wanted.recover:
            top = (await self._streams.history(channel, opts, limit=0)).position
            return Positioned(top, top)
        requested = StreamPosition(wanted.offset, wanted.epoch)
        cache = opts.force_recovery_mode == "cache"
        outcome: recovery.Recovered | recovery.NotRecovered
        if cache:
            hist = await self._streams.history(channel, opts, limit=1, reverse=True)
            outcome = recovery.recover_cache(requested, hist.publications, hist.position)
        else:
            cap = self._settings.client.recovery_max_publication_limit
            limit = cap if cap > 0 else -1
            since = StreamPosition(wanted.offset, "")
            hist = await self._streams.history(channel, opts, since=since, limit=limit)
            outcome = recovery.recover_stream(
                requested,
                hist.publications,
                hist.position,
                limit_reached=limit > 0 and len(hist.publications) >= limit,
            )
        top = hist.position
        if isinstance(outcome, recovery.Recovered):
            live = [pub for pub, epoch, _ in buffered if epoch == top.epoch]
            merged = recovery.settle(outcome, live, after=wanted.offset, cache=cache)
            if merged is not None:
                self._metrics.recover.labels("yes", "", "yes" if merged else "no").inc()
                start = StreamPosition(
                    merged[-1].offset if merged else max(wanted.offset, top.offset), top.epoch
                )
                reply = StreamPosition(wanted.offset, top.epoch)
                return Positioned(start, reply, recovered=True, publications=merged[-1:] if cache else merged)
        self._metrics.recover.labels("no", "", "no").inc()
        return Positioned(top, top)

    async def _check_after_reconnect(self, attempts: int = 10) -> None:
        """Right after a reconnect the store may still refuse reads: retry the whole check
        with backoff until one pass reads every channel."""
        delay = 0.2
        for _ in range(attempts):
            if await self.check(idle_for=0.0) >= 0:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        log.warning("positions not checked after a broker reconnect: the store keeps failing")

    async def check(self, *, idle_for: float) -> int:
        """Compare positioned subscribers of channels that received no publication for
        ``idle_for`` seconds with their stream top; returns how many channels were checked, or
        -1 when a history read failed (the channels that could be read were still checked)."""
        now = self._clock()
        checked = 0
        failed = False
        for channel in list(self._hub.channels):
            if idle_for and now - self.last_pub_at.get(channel, 0.0) < idle_for:
                continue
            opts = self._settings.channel_options(channel)
            if opts is None:
                continue
            try:
                top = await self._stream_top(channel, opts)
            except Exception as exc:
                raise_if_cancelling(exc)
                log.debug("position check of %s failed: %s", channel, exc)
                failed = True
                continue
            if top is None:
                continue
            checked += 1
            for client in list(self._hub.subscribers(channel)):
                client.check_position(channel, top)
        for channel in [ch for ch in self.last_pub_at if ch not in self._hub.channels]:
            del self.last_pub_at[channel]
        return -1 if failed else checked

    async def _stream_top(self, channel: str, opts: ChannelOptions) -> StreamPosition | None:
        """The top of the channel's stream: its history, or its map's change stream; None when
        it keeps none."""
        if opts.is_map:
            mopts = map_options(opts.map)
            if self._streams.maps is None or not mopts.has_stream:
                return None
            return (await self._streams.maps.read_stream(channel, mopts, limit=0)).position
        if not (opts.history_size > 0 and opts.history_ttl > 0):
            return None
        return (await self._streams.history(channel, opts, limit=0)).position

    async def check_loop(self) -> None:
        """Check idle channels every ``client.channel_position_check_delay`` seconds (0: never)."""
        delay = self._settings.client.channel_position_check_delay
        if delay <= 0:
            return
        while True:
            await asyncio.sleep(delay)
            await self.check(idle_for=delay)
