"""Where occupancy is decided: the ``OccupancyStore`` seam and its in-process implementation
(the memory engine; gateway/webhooks/redis_occupancy.py is the cluster's). Must not import
redis, httpx or the connection package.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.webhooks.occupancy import OccupancyBook, Transitions


class OccupancyStore(Protocol):
    """Decides occupancy transitions for every node that reports to it.

    ``update`` renews ``node``'s membership, applies its ``changes`` in order ((channel, True):
    its first local subscriber arrived; False: its last one left), releases the channels of
    nodes dead for longer than the node TTL, and returns the channels that became occupied and
    those whose vacated grace ended — each transition is returned by exactly one call across all
    nodes. ``reset=True``: ``changes`` are joins making up the node's whole membership. None: the
    store no longer knows ``node`` (it was released as dead, or the store lost its data) and
    nothing was applied; call again with ``reset=True``. ``retire`` releases everything of a
    node that is shutting down.

    Raises:
        EngineError: the store failed; the changes may or may not have been applied (reset next).
    """

    async def update(
        self, node: str, changes: Sequence[tuple[str, bool]], *, reset: bool = False
    ) -> Transitions | None: ...

    async def retire(self, node: str) -> None: ...

    async def close(self) -> None: ...


class MemoryOccupancy:
    """``OccupancyStore`` of one process (the memory engine): an ``OccupancyBook`` on a clock."""

    def __init__(
        self, grace_seconds: float, node_ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.book = OccupancyBook(grace_seconds, node_ttl)
        self._clock = clock

    async def update(
        self, node: str, changes: Sequence[tuple[str, bool]], *, reset: bool = False
    ) -> Transitions | None:
        now = self._clock()
        if not self.book.renew(node, now) and not reset:
            return None
        out = Transitions()
        if reset:
            self.book.reset(node, [channel for channel, joined in changes if joined], now, out)
        else:
            for channel, joined in changes:
                if joined:
                    self.book.join(node, channel, out)
                else:
                    self.book.leave(node, channel, now)
        self.book.sweep(now, out)
        return out

    async def retire(self, node: str) -> None:
        self.book.retire(node, self._clock())

    async def close(self) -> None:
        pass


__all__ = ["MemoryOccupancy", "OccupancyStore"]
