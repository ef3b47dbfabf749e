"""The map engine seam: the ``MapBroker`` Protocol and its value types.

A MapBroker keeps map channels' keyed state and change streams (gateway/maps/state.py states
the contract every implementation keeps) and delivers each change, as one atomic step with the
state write and the stream append, through the same PUB/SUB path as the channel's ordinary
publications: ``BrokerEventHandler.on_publication`` on every node that subscribed the channel
through its ``Broker`` (``Node.add_subscriber``), with the change's stream position (None in
``ephemeral`` mode). Implementations: ``map_memory.MemoryMapBroker`` and
``map_redis.RedisMapBroker``. Must not import asyncio-specific I/O, starlette or redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.engine.base import BrokerEventHandler
from gateway.maps.options import MapOptions
from gateway.maps.state import MapChange, PositionLost, UpdateResult
from gateway.protocol.messages import Publication, StreamPosition

__all__ = ["MapBroker", "MapChange", "MapStateResult", "MapStreamResult", "PositionLost", "UpdateResult"]


@dataclass(frozen=True, slots=True)
class MapStateResult:
    """A state page: entries (``key`` and ``offset`` set), the stream position when read, and
    the cursor of the next page ("" on the last)."""

    publications: list[Publication]
    position: StreamPosition
    cursor: str = ""


@dataclass(frozen=True, slots=True)
class MapStreamResult:
    """Stream changes and the stream position when read."""

    publications: list[Publication]
    position: StreamPosition


class MapBroker(Protocol):
    """Keyed state and change streams of map channels (contract: gateway/maps/state.py).

    Raises (every method):
        EngineError: a temporary failure of the store.
        PositionLost: a read at a position of another epoch or past what the stream holds.
    """

    def set_handler(self, handler: BrokerEventHandler) -> None: ...

    async def run(self) -> None:
        """Background work (expiring keys of channels, dropping forgotten channels) until
        cancelled."""
        ...

    async def publish(self, channel: str, change: MapChange, opts: MapOptions) -> UpdateResult: ...

    async def remove(
        self, channel: str, key: str, opts: MapOptions, *, idempotency_key: str = ""
    ) -> UpdateResult: ...

    async def read_state(
        self,
        channel: str,
        opts: MapOptions,
        *,
        cursor: str = "",
        limit: int = -1,
        revision: StreamPosition | None = None,
        key: str = "",
    ) -> MapStateResult: ...

    async def read_stream(
        self,
        channel: str,
        opts: MapOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = -1,
        reverse: bool = False,
    ) -> MapStreamResult: ...

    async def stats(self, channel: str, opts: MapOptions) -> int:
        """The number of live keys."""
        ...

    async def clear(self, channel: str) -> None:
        """Forget the channel: state, stream and epoch (the next write mints a new epoch, so
        subscribers positioned in the old one re-read the state)."""
        ...

    async def close(self) -> None: ...
