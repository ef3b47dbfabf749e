"""Whether a channel is occupied (has a subscriber somewhere) and when it becomes vacated, as
pure state: ``OccupancyBook`` for the nodes of one process, with the same rules the Redis script
(gateway/engine/lua/occupancy.lua) applies across a cluster. No I/O, no clock reads (``now`` is
passed in, seconds).

Rules: a node joins a channel when its first local subscriber arrives and leaves it when its last
one goes. The first join of a channel that is not occupied makes it occupied (one
``channel_occupied``). When the last node leaves, the channel starts a grace period of
``grace_seconds``; a join within it cancels it (no event), and once it has passed ``due`` reports
the channel vacated exactly once. A node that stops renewing its membership for ``node_ttl``
seconds is dead (``sweep``): it leaves all its channels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Transitions:
    """The channels that became occupied and vacated in one update."""

    occupied: list[str] = field(default_factory=list)
    vacated: list[str] = field(default_factory=list)


class OccupancyBook:
    """Occupancy decisions over the nodes that report to it (the memory engine: one process)."""

    def __init__(self, grace_seconds: float, node_ttl: float) -> None:
        self.grace = grace_seconds
        self.node_ttl = node_ttl
        self._members: dict[str, set[str]] = {}
        """channel -> nodes holding a local subscriber."""
        self._node_channels: dict[str, set[str]] = {}
        self._seen: dict[str, float] = {}
        """node -> when it last renewed its membership."""
        self._occupied: set[str] = set()
        self._vacating: dict[str, float] = {}
        """channel -> when its grace period ends."""

    def renew(self, node: str, now: float) -> bool:
        """Record that ``node`` is alive; False when it was unknown (new, or swept as dead): its
        whole membership must then be reported with ``reset``."""
        known = node in self._seen
        self._seen[node] = now
        return known

    def join(self, node: str, channel: str, out: Transitions) -> None:
        self._members.setdefault(channel, set()).add(node)
        self._node_channels.setdefault(node, set()).add(channel)
        if self._vacating.pop(channel, None) is not None:
            return
        if channel not in self._occupied:
            self._occupied.add(channel)
            out.occupied.append(channel)

    def leave(self, node: str, channel: str, now: float) -> None:
        members = self._members.get(channel)
        if members is not None:
            members.discard(node)
            if not members:
                del self._members[channel]
        self._node_channels.get(node, set()).discard(channel)
        if channel not in self._members and channel in self._occupied:
            self._vacating[channel] = now + self.grace

    def reset(self, node: str, channels: Iterable[str], now: float, out: Transitions) -> None:
        """``node``'s membership is exactly ``channels`` (after a resync or a restart)."""
        for channel in list(self._node_channels.get(node, ())):
            self.leave(node, channel, now)
        for channel in channels:
            self.join(node, channel, out)

    def retire(self, node: str, now: float) -> None:
        """``node`` is shutting down: it leaves everything and is forgotten."""
        for channel in list(self._node_channels.pop(node, ())):
            self.leave(node, channel, now)
        self._seen.pop(node, None)

    def sweep(self, now: float, out: Transitions) -> None:
        """Release the channels of dead nodes, then report every channel whose grace ended."""
        for node, seen in list(self._seen.items()):
            if now - seen > self.node_ttl:
                self.retire(node, now)
        for channel, until in list(self._vacating.items()):
            if until <= now:
                del self._vacating[channel]
                if channel not in self._members:
                    self._occupied.discard(channel)
                    out.vacated.append(channel)

    def occupied(self, channel: str) -> bool:
        return channel in self._occupied


__all__ = ["OccupancyBook", "Transitions"]
