"""The map engine as seen from one worker of ``taskcast gateway --workers N``:
``SharedMemoryMapBroker`` forwards every operation over the worker's shared engine link
(``SharedMemoryBroker.call``) to the one ``MemoryMapBroker`` in the supervisor
(gateway/engine/shared_server.py), whose changes reach every worker subscribed to the channel as
publications of the shared broker. So all workers see one state, one stream and one epoch per
map, as the nodes of a Redis cluster do.
"""

from __future__ import annotations

from typing import Any

from gateway.engine.base import BrokerEventHandler
from gateway.engine.map_base import MapStateResult, MapStreamResult
from gateway.engine.shared_memory import SharedMemoryBroker
from gateway.maps.options import MapOptions
from gateway.maps.state import MapChange, PositionLost, UpdateResult
from gateway.protocol.messages import StreamPosition

POSITION_LOST = "position_lost"
"""The supervisor's answer to a read at a lost position (raised here as ``PositionLost``)."""


class SharedMemoryMapBroker:
    """``MapBroker`` forwarding to the supervisor's memory map engine.

    Args:
        broker: The worker's shared engine broker (its link carries the calls).
    """

    def __init__(self, broker: SharedMemoryBroker) -> None:
        self._broker = broker

    def set_handler(self, handler: BrokerEventHandler) -> None:
        """Changes arrive through the shared broker's events: nothing to hold here."""

    async def run(self) -> None:
        """The supervisor sweeps expired keys: nothing runs here."""

    async def _call(self, op: str, *args: Any) -> Any:
        value = await self._broker.call(op, *args)
        if value == POSITION_LOST:
            raise PositionLost(op)
        return value

    async def publish(self, channel: str, change: MapChange, opts: MapOptions) -> UpdateResult:
        result: UpdateResult = await self._call("map_publish", channel, change, opts)
        return result

    async def remove(
        self, channel: str, key: str, opts: MapOptions, *, idempotency_key: str = ""
    ) -> UpdateResult:
        result: UpdateResult = await self._call("map_remove", channel, key, opts, idempotency_key)
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
        result: MapStateResult = await self._call("map_state", channel, opts, cursor, limit, revision, key)
        return result

    async def read_stream(
        self,
        channel: str,
        opts: MapOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = -1,
        reverse: bool = False,
    ) -> MapStreamResult:
        result: MapStreamResult = await self._call("map_stream", channel, opts, since, limit, reverse)
        return result

    async def stats(self, channel: str, opts: MapOptions) -> int:
        return int(await self._call("map_stats", channel, opts))

    async def clear(self, channel: str) -> None:
        await self._call("map_clear", channel)

    async def close(self) -> None:
        """The link is the shared broker's: it closes it."""
