"""Overload that keeps the truth (seed §13.3): which queued publications a backed-up connection
may drop, and the held queue that drops them.

Rule: a publication is *conflatable* when its channel's namespace names a ``conflation_tag``
(e.g. ``task``), the publication carries that tag with a non-empty value, and it is not marked
``conflate: never``. Its conflation key is ``(channel, tag value)``: of the conflatable
publications queued for one connection, only the newest per key is kept (complete state, so the
newest version is all a client needs). Everything else — publications without the tag, those
marked never (the Status API marks terminal states, notices, new tasks and new attempts), join
and leave pushes, replies — is never dropped and keeps its order.

The Status API's relay sets the tags (status_api/storage/outbox.py ``publication_tags``); the
gateway applies the rule only while a connection's output is held (gateway/connection/sendqueue.py).
Pure: imports no asyncio.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.hub import SharedPush

NEVER_TAG = "conflate"
NEVER_VALUE = "never"
"""``tags["conflate"] == "never"`` marks a publication that no conflation may drop."""

COMPACT_MIN_SLOTS = 64


def conflation_key(channel: str, tags: Mapping[str, str] | None, tag: str) -> str | None:
    """The conflation key of a publication in ``channel`` with these tags, under its namespace's
    ``conflation_tag`` (``""``: the namespace does not conflate); None = never drop it."""
    if not tag or not tags:
        return None
    value = tags.get(tag)
    if not value or tags.get(NEVER_TAG) == NEVER_VALUE:
        return None
    return f"{channel}\x00{value}"


class HeldQueue:
    """A connection's output while its transport is backed up, in order, with the newest entry
    per conflation key only. ``bytes`` counts what a write would send (payloads + separators);
    ``conflated`` counts the entries dropped for a newer one. Dropped entries leave a hole that
    is compacted away once holes outnumber live entries, so a long stream of replacements keeps
    the queue's memory proportional to what it holds."""

    __slots__ = ("_holes", "_index", "_items", "bytes", "conflated")

    def __init__(self) -> None:
        self._items: list[tuple[bytes, SharedPush | None] | None] = []
        self._index: dict[str, int] = {}
        self._holes = 0
        self.bytes = 0
        self.conflated = 0

    def __len__(self) -> int:
        return len(self._items) - self._holes

    def push(self, payload: bytes, shared: SharedPush | None, key: str | None) -> None:
        """Append one message; with a key, drop the older entry of that key first."""
        items = self._items
        if key is not None:
            old = self._index.get(key)
            if old is not None:
                entry = items[old]
                if entry is not None:
                    items[old] = None
                    self._holes += 1
                    self.bytes -= len(entry[0]) + 1
                    self.conflated += 1
            self._index[key] = len(items)
        items.append((payload, shared))
        self.bytes += len(payload) + 1
        if self._holes > COMPACT_MIN_SLOTS and self._holes > len(items) // 2:
            self._compact()

    def take(self) -> tuple[list[bytes], list[SharedPush | None]]:
        """Everything held, oldest first (payloads and their shared pushes); the queue empties."""
        payloads: list[bytes] = []
        pushes: list[SharedPush | None] = []
        for entry in self._items:
            if entry is not None:
                payloads.append(entry[0])
                pushes.append(entry[1])
        self._items, self._index, self._holes, self.bytes = [], {}, 0, 0
        return payloads, pushes

    def _compact(self) -> None:
        live = [(i, e) for i, e in enumerate(self._items) if e is not None]
        moved = {old: new for new, (old, _) in enumerate(live)}
        self._items = [e for _, e in live]
        self._index = {key: moved[i] for key, i in self._index.items() if i in moved}
        self._holes = 0
