"""The state of one shared-poll channel on one node: per tracked key, the version the node last
delivered (the backend's in ``versioned`` mode; a counter of its own in ``versionless`` mode,
where a change is found by the content's digest), and the channel's epoch. It decides what a
backend answer or a ``shared_poll_publish`` changes; the manager (gateway/sharedpoll/manager.py)
fans the result out. Pure: no I/O, no clock.

Versioned mode: an item whose version is not above the key's is no change; an answer or a
publication whose epoch differs from the channel's resets every key (versions 0) and reports
the flip, after which the manager unsubscribes the channel's connections (2500: they
resubscribe and track again from scratch). Versionless mode: the epoch is the node's own, drawn
when the state is created, so versions from an earlier state are never compared with these.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gateway.protocol.messages import KeyedPublication

__all__ = ["Applied", "ChannelState", "RefreshItem"]


@dataclass(frozen=True, slots=True)
class RefreshItem:
    """One item of a backend answer."""

    key: str
    data: bytes = b""
    version: int = 0
    removed: bool = False


@dataclass(slots=True)
class _Entry:
    version: int = 0
    digest: bytes = b""
    needs_broadcast: bool = False
    """A connection joined holding nothing newer: the next answer is delivered even unchanged."""
    fresh: bool = False
    """Set by a publication: the next timer poll skips the key once."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What an answer or a publication changed."""

    updates: list[KeyedPublication] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    epoch_changed: bool = False


class ChannelState:
    """One channel's tracked keys (see the module docstring)."""

    def __init__(self, *, versionless: bool) -> None:
        self.versionless = versionless
        self.epoch = secrets.token_hex(4) if versionless else ""
        self.entries: dict[str, _Entry] = {}
        self._counter = 0

    def track(self, key: str) -> tuple[bool, int]:
        """Start (or keep) tracking ``key``: (it is new on this node, its current version)."""
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = _Entry()
            return True, 0
        return False, entry.version

    def untrack(self, key: str) -> None:
        self.entries.pop(key, None)

    def mark_needs_broadcast(self, keys: Iterable[str]) -> list[str]:
        """Flag keys a connection joined without their data; returns those not yet flagged
        (each needs one poll)."""
        flagged = []
        for key in keys:
            entry = self.entries.get(key)
            if entry is not None and not entry.needs_broadcast:
                entry.needs_broadcast = True
                flagged.append(key)
        return flagged

    def due(self) -> list[str]:
        """The keys a timer poll asks for (sorted); a key fresh from a publication is skipped
        once."""
        keys = []
        for key, entry in self.entries.items():
            if entry.fresh:
                entry.fresh = False
                continue
            keys.append(key)
        keys.sort()
        return keys

    def request_items(self, keys: Sequence[str]) -> list[tuple[str, int]]:
        """``(key, version)`` of a poll: the version held (0 when a broadcast is owed, and
        always 0 in versionless mode); keys no longer tracked are left out."""
        items = []
        for key in keys:
            entry = self.entries.get(key)
            if entry is None:
                continue
            version = 0 if self.versionless or entry.needs_broadcast else entry.version
            items.append((key, version))
        return items

    def _flip(self, epoch: str) -> bool:
        if self.versionless or epoch == self.epoch:
            return False
        self.epoch = epoch
        for entry in self.entries.values():
            entry.version, entry.digest, entry.fresh, entry.needs_broadcast = 0, b"", False, False
        return True

    def apply(self, items: Sequence[RefreshItem], epoch: str) -> Applied:
        """A backend answer: the keys' changes (and the ones owed a broadcast), removals."""
        applied = Applied(epoch_changed=self._flip(epoch))
        for item in items:
            entry = self.entries.get(item.key)
            if item.removed:
                if entry is not None:
                    del self.entries[item.key]
                    applied.removed.append(item.key)
                continue
            if entry is None:
                continue
            if self.versionless and item.version == 0:
                digest = hashlib.blake2b(item.data, digest_size=16).digest()
                if entry.version and digest == entry.digest:
                    if entry.needs_broadcast:
                        entry.needs_broadcast = False
                        applied.updates.append(KeyedPublication(item.key, entry.version, item.data))
                    continue
                self._counter += 1
                entry.version, entry.digest, entry.needs_broadcast = self._counter, digest, False
                applied.updates.append(KeyedPublication(item.key, entry.version, item.data))
                continue
            if item.version <= entry.version:
                if entry.needs_broadcast and entry.version and item.version == entry.version:
                    entry.needs_broadcast = False
                    applied.updates.append(KeyedPublication(item.key, item.version, item.data))
                continue
            entry.version, entry.needs_broadcast = item.version, False
            applied.updates.append(KeyedPublication(item.key, item.version, item.data))
        return applied

    def publish(self, key: str, version: int, epoch: str, data: bytes) -> Applied:
        """A ``shared_poll_publish`` (versioned mode): applied when the key is tracked here and
        ``version`` is above the one held."""
        applied = Applied(epoch_changed=self._flip(epoch))
        entry = self.entries.get(key)
        if entry is None or version <= entry.version:
            return applied
        entry.version, entry.fresh = version, True
        applied.updates.append(KeyedPublication(key, version, data))
        return applied
