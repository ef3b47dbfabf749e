"""One map channel's keyed state and change stream (pure; the memory engine's store).

The contract every engine keeps (the Redis scripts in gateway/engine/lua/map_*.lua follow it):

* A channel has an epoch and a top offset. In a stream-backed mode every change (an update or
  a removal) takes ``top + 1``, is written to the state and appended to the stream (trimmed to
  ``stream_size``; the whole stream expires ``stream_ttl`` after its last append) in one step,
  so the position a subscriber learns from a live change is the one the stream answers with.
  In ``ephemeral`` mode nothing is numbered: offsets stay 0.
* State entries are publications with ``key`` set and ``offset`` the offset of the change that
  wrote them. In an expiring mode a key lives ``key_ttl`` after its last write; an expired key
  is removed like ``remove`` would (a removal change), when the engine sweeps it.
* State pages are in key order: a page after ``cursor`` (the last key of the previous page,
  "" from the start) holds the next ``limit`` keys (-1: all, 0: none) and the cursor of the
  page after it ("" on the last page). Every page reports the current stream position.
* A read of a map that does not exist (never written, forgotten, cleared) mints its epoch, as
  centrifuge does (so a position taken on an empty map is tied to an epoch); a map never
  written is forgotten ``UNWRITTEN_META_TTL`` after its last use whatever its mode, so readers
  of arbitrary names keep nothing for ever. Removing from a missing map is ``key_not_found`` and
  creates nothing. An expiring map with no ``meta_ttl`` is forgotten a key TTL after its last
  use.
* A read at a position of another epoch, and a stream read from a position the stream no
  longer holds the continuation of, raise ``PositionLost`` (the client answers 112 and
  re-reads the state from scratch).
* Writes may be suppressed, changing nothing, with a reason (Centrifugo's): ``idempotency``
  (the key was used within its TTL: the first result is answered), ``version`` (per-key
  version not newer), ``key_exists`` (``if_new``), ``key_not_found`` (``if_exists``, or
  removing a missing key).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field, replace

from gateway.maps.options import MapOptions
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition

SUPPRESS_IDEMPOTENCY = "idempotency"
SUPPRESS_VERSION = "version"
SUPPRESS_KEY_EXISTS = "key_exists"
SUPPRESS_KEY_NOT_FOUND = "key_not_found"

KEY_MODES = ("", "if_new", "if_exists")

UNWRITTEN_META_TTL = 720 * 3600.0
"""How long a map that was only read keeps its epoch after its last use (engine/lua/map.lua has
the same 720 h, Centrifugo's default history meta TTL)."""


class PositionLost(Exception):
    """The position read from belongs to another epoch, or its continuation left the stream."""


@dataclass(frozen=True, slots=True)
class MapChange:
    """One write to a key (server API ``map_publish``, a client map publish)."""

    key: str
    data: bytes
    tags: dict[str, str] | None = None
    info: ClientInfo | None = None
    time: int = 0
    delta: bool = False
    version: int = 0
    version_epoch: str = ""
    key_mode: str = ""
    idempotency_key: str = ""
    idempotent_result_ttl: float = 300.0
    refresh_ttl_on_suppress: bool = False
    """With ``if_new`` on an existing key: its TTL is refreshed, nothing else changes (map
    presence keeps its entries alive this way without stream entries)."""


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """The outcome of a write: the stream position after it (or of the first write, for an
    idempotent repeat), whether it was suppressed and why."""

    position: StreamPosition
    suppressed: bool = False
    reason: str = ""


@dataclass(slots=True)
class _Entry:
    pub: Publication
    expires: float
    """When the key expires (monotonic seconds; inf: never)."""
    version: int = 0
    version_epoch: str = ""


def _deadline(now: float, ttl: float) -> float:
    return now + ttl if ttl > 0 else math.inf


@dataclass(slots=True)
class MapChannel:
    """The state and stream of one map channel (see the module contract)."""

    epoch: str
    top: int = 0
    entries: dict[str, _Entry] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    """Every key, sorted (pages are in key order)."""
    stream: deque[Publication] = field(default_factory=deque)
    stream_expire_at: float = math.inf
    meta_expire_at: float = math.inf
    results: dict[str, tuple[UpdateResult, float]] = field(default_factory=dict)
    """Idempotency key → (first result, expiry)."""
    next_key_expiry: float = math.inf
    """No key expires before this instant (a lower bound: sweeps skip the channel until then)."""
    written: bool = False
    """A change was written (a map only read is forgotten after ``UNWRITTEN_META_TTL``)."""

    @property
    def position(self) -> StreamPosition:
        return StreamPosition(self.top, self.epoch)

    def touch(self, opts: MapOptions, now: float) -> None:
        """A write or read keeps the epoch ``meta_ttl`` longer (at least a key TTL; a map never
        written: ``UNWRITTEN_META_TTL`` when that is 0)."""
        ttl = max(opts.meta_ttl, opts.key_ttl)
        self.meta_expire_at = _deadline(now, ttl if ttl > 0 or self.written else UNWRITTEN_META_TTL)

    def forgotten(self, now: float) -> bool:
        """The meta expired: the channel (epoch, top, state) is gone; a new epoch follows."""
        return self.meta_expire_at <= now

    # --- writes ----------------------------------------------------------------------------

    def _cached(self, key: str, now: float) -> UpdateResult | None:
        if not key:
            return None
        hit = self.results.get(key)
        if hit is None:
            return None
        if hit[1] <= now:
            del self.results[key]
            return None
        return replace(hit[0], suppressed=True, reason=SUPPRESS_IDEMPOTENCY)

    def _remember(self, key: str, ttl: float, result: UpdateResult, now: float) -> None:
        if key and ttl > 0:
            self.results[key] = (result, now + ttl)

    def _append(self, pub: Publication, opts: MapOptions, now: float) -> Publication:
        """Number a change and append it to the stream (stream-backed modes)."""
        if not self.written:
            self.written = True
            self.touch(opts, now)
        if not opts.has_stream:
            return pub
        self.top += 1
        pub = replace(pub, offset=self.top)
        self.stream.append(pub)
        while len(self.stream) > opts.stream_size:
            self.stream.popleft()
        self.stream_expire_at = _deadline(now, opts.stream_ttl)
        return pub

    def publish(
        self, change: MapChange, opts: MapOptions, now: float
    ) -> tuple[UpdateResult, Publication | None]:
        """Write ``change``; returns the result and the change to deliver (None: suppressed),
        which carries the key's previous value (``prev``) when the write allows delta and the
        key existed."""
        self.touch(opts, now)
        cached = self._cached(change.idempotency_key, now)
        if cached is not None:
            return cached, None
        entry = self.entries.get(change.key)
        if entry is not None and entry.expires <= now:
            entry = None  # expired, not yet swept: as absent
        reason = ""
        if change.key_mode == "if_new" and entry is not None:
            reason = SUPPRESS_KEY_EXISTS
            if change.refresh_ttl_on_suppress:
                entry.expires = _deadline(now, opts.key_ttl)
        elif change.key_mode == "if_exists" and entry is None:
            reason = SUPPRESS_KEY_NOT_FOUND
        elif (
            change.version
            and entry is not None
            and entry.version
            and (not change.version_epoch or change.version_epoch == entry.version_epoch)
            and entry.version >= change.version
        ):
            reason = SUPPRESS_VERSION
        if reason:
            return UpdateResult(self.position, True, reason), None
        pub = Publication(
            data=change.data,
            info=change.info,
            tags=change.tags or None,
            time=change.time,
            delta=change.delta,
            key=change.key,
        )
        pub = self._append(pub, opts, now)
        expire_at = _deadline(now, opts.key_ttl)
        if change.key not in self.entries:
            bisect.insort(self.keys, change.key)
        self.entries[change.key] = _Entry(pub, expire_at, change.version, change.version_epoch)
        self.next_key_expiry = min(self.next_key_expiry, expire_at)
        result = UpdateResult(self.position)
        self._remember(change.idempotency_key, change.idempotent_result_ttl, result, now)
        if change.delta and entry is not None:  # the key's previous value, for per-key delta
            return result, replace(pub, prev=entry.pub.data)
        return result, pub

    def remove(
        self,
        key: str,
        opts: MapOptions,
        now: float,
        *,
        idempotency_key: str = "",
        idempotent_result_ttl: float = 300.0,
        time: int = 0,
    ) -> tuple[UpdateResult, Publication | None]:
        """Remove ``key``; returns the result and the removal to deliver (None: suppressed)."""
        self.touch(opts, now)
        cached = self._cached(idempotency_key, now)
        if cached is not None:
            return cached, None
        entry = self.entries.get(key)
        if entry is None or entry.expires <= now:
            return UpdateResult(self.position, True, SUPPRESS_KEY_NOT_FOUND), None
        pub = self._drop(key, opts, now, time)
        result = UpdateResult(self.position)
        self._remember(idempotency_key, idempotent_result_ttl, result, now)
        return result, pub

    def _drop(self, key: str, opts: MapOptions, now: float, time: int) -> Publication:
        entry = self.entries.pop(key)
        index = bisect.bisect_left(self.keys, key)
        del self.keys[index]
        removal = Publication(data=b"", tags=entry.pub.tags, time=time, key=key, removed=True)
        return self._append(removal, opts, now)

    def expire_keys(self, opts: MapOptions, now: float, time: int = 0) -> list[Publication]:
        """Remove the keys whose TTL passed; returns their removals, to deliver."""
        if self.next_key_expiry > now:
            return []
        removals: list[Publication] = []
        upcoming = math.inf
        for key in [k for k, e in self.entries.items() if e.expires <= now]:
            removals.append(self._drop(key, opts, now, time))
        for entry in self.entries.values():
            upcoming = min(upcoming, entry.expires)
        self.next_key_expiry = upcoming
        for key in [k for k, (_, at) in self.results.items() if at <= now]:
            del self.results[key]
        return removals

    def clear(self) -> None:
        """Drop state and stream (the epoch is kept: ``map_clear`` forgets the channel)."""
        self.entries.clear()
        self.keys.clear()
        self.stream.clear()
        self.results.clear()

    # --- reads -----------------------------------------------------------------------------

    def read_state(
        self, cursor: str, limit: int, revision: StreamPosition | None = None, key: str = ""
    ) -> tuple[list[Publication], str]:
        """A page of the state after ``cursor`` (module contract) and the next cursor; with
        ``key``, only that key's entry (cursor and limit ignored).

        Raises:
            PositionLost: ``revision`` names another epoch.
        """
        if revision is not None and revision.epoch != self.epoch:
            raise PositionLost(revision.epoch)
        if key:
            entry = self.entries.get(key)
            return ([entry.pub] if entry is not None else []), ""
        start = bisect.bisect_right(self.keys, cursor) if cursor else 0
        if limit == 0:
            return [], ""
        stop = len(self.keys) if limit < 0 else min(len(self.keys), start + limit)
        page = [self.entries[k].pub for k in self.keys[start:stop]]
        return page, (self.keys[stop - 1] if stop < len(self.keys) and page else "")

    def read_stream(
        self, since: StreamPosition | None, limit: int, now: float, *, reverse: bool = False
    ) -> list[Publication]:
        """Changes after ``since`` (oldest first; ``reverse``: newest first, before ``since``
        when given), at most ``limit`` (-1: all, 0: none).

        Raises:
            PositionLost: ``since`` names another epoch, is past the top, or its continuation
                is no longer in the stream.
        """
        if self.stream_expire_at <= now:
            self.stream.clear()
        stream = self.stream
        if since is not None:
            if since.epoch and since.epoch != self.epoch:
                raise PositionLost(since.epoch)
            if since.offset > self.top:
                raise PositionLost(f"{since.offset} > {self.top}")
            first = stream[0].offset if stream else self.top + 1
            if not reverse and since.offset + 1 < first:
                raise PositionLost(f"{since.offset + 1} left the stream")
        if limit == 0:
            return []
        if reverse:
            pubs = [p for p in reversed(stream) if since is None or p.offset < since.offset]
        else:
            after = since.offset if since is not None else 0
            pubs = [p for p in stream if p.offset > after]
        return pubs if limit < 0 else pubs[:limit]
