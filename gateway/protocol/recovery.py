"""Recovery decisions on subscribe, and the merge of recovered history with buffered live publications.

Pure functions over values from ``gateway.protocol.messages`` (PROTOCOL.md §3.3): the node reads
history and buffers PUB/SUB publications; this module decides what the subscribe reply may claim.
It must not import asyncio, redis, starlette or read a clock, so every edge case is testable as a
plain table (tests/gateway/test_recovery.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.protocol.messages import Publication, StreamPosition


class NotRecoveredReason(StrEnum):
    """Why a recovery failed. For logs and metrics only: every reason leads to the same reply
    (``recovered: false`` with the current top, or error 112 when the client set flag bit 2)."""

    EPOCH_CHANGED = "epoch_changed"
    """The client's epoch names another incarnation of the stream (§3.1)."""
    AHEAD = "ahead"
    """Same epoch, but the client claims an offset the stream never reached."""
    GAP = "gap"
    """Publications the client missed are no longer retained (trimmed or expired)."""
    TOO_MANY = "too_many"
    """The client missed more publications than the recovery read may return
    (``client.recovery_max_publication_limit``)."""
    EMPTY = "empty"
    """Cache mode: there is no latest publication to recover from."""


@dataclass(frozen=True, slots=True)
class Recovered:
    """Recovery succeeded. ``publications`` are to be sent in the subscribe reply, oldest first,
    with offsets contiguous from ``requested.offset + 1`` (stream mode); possibly empty."""

    publications: list[Publication]


@dataclass(frozen=True, slots=True)
class NotRecovered:
    """Recovery failed: reply ``recovered: false`` with no publications and the current top."""

    reason: NotRecoveredReason


def recover_stream(
    requested: StreamPosition,
    history: list[Publication],
    top: StreamPosition,
    *,
    limit_reached: bool,
) -> Recovered | NotRecovered:
    """Decide a stream-mode recovery (PROTOCOL.md §3.3, steps 2-3).

    Args:
        requested: The position the client sent (``offset``, ``epoch``). An empty epoch skips
            the epoch check: this is what ``since: {}`` relies on.
        history: The forward history read with ``since=requested``, i.e. publications with
            ``offset > requested.offset``, oldest first, as the broker returned them.
        top: The stream's current position, returned by that same history read.
        limit_reached: Whether the read returned as many publications as its limit allowed.
            It only chooses the reason of a failure (``TOO_MANY`` rather than ``GAP``): when the
            limit was reached but the publications still end at the top, nothing was missed
            and recovery succeeds, as in Centrifugo.

    Returns:
        ``Recovered(history)`` iff the epoch matches (or was not given) and ``history`` holds
        exactly the offsets ``requested.offset + 1 … top.offset``, which includes the case of no
        publications with ``requested.offset == top.offset``. Centrifugo checks only the first
        and last offsets; checking every offset is equivalent for a broker's contiguous output
        and also rejects a malformed list. ``history`` is returned as is, not copied.
        Otherwise ``NotRecovered`` with ``EPOCH_CHANGED``, ``AHEAD`` (requested offset beyond
        the top), ``TOO_MANY`` or ``GAP``.
    """
    if requested.epoch and requested.epoch != top.epoch:
        return NotRecovered(NotRecoveredReason.EPOCH_CHANGED)
    if requested.offset > top.offset:
        return NotRecovered(NotRecoveredReason.AHEAD)
    if len(history) == top.offset - requested.offset and _contiguous(history, requested.offset + 1):
        return Recovered(history)
    if limit_reached:
        return NotRecovered(NotRecoveredReason.TOO_MANY)
    return NotRecovered(NotRecoveredReason.GAP)


def recover_cache(
    requested: StreamPosition,
    latest: list[Publication],
    top: StreamPosition,
) -> Recovered | NotRecovered:
    """Decide a cache-mode recovery (PROTOCOL.md §3.3, "Cache mode").

    Cache mode treats the channel as a key whose value is its latest publication, so the client
    needs at most that one publication, whatever it missed.

    Args:
        requested: The position the client sent.
        latest: The reverse history read with ``limit=1`` (zero or one publication).
        top: The stream's current position from that same read.

    Returns:
        ``Recovered([])`` when the client already holds the top (``requested.offset > 0``, equal
        to ``top.offset``, same epoch). Otherwise ``Recovered([pub])`` when the latest
        publication exists and is the top, even across an epoch change. Otherwise
        ``NotRecovered(EMPTY)`` when the history is empty, or ``NotRecovered(GAP)`` when the
        publication given is not the top (a broker never returns that).
        If ``latest`` holds more than one publication only the newest (the first, as a reverse
        read returns them) is considered.
    """
    if requested.offset > 0 and requested.offset == top.offset and requested.epoch == top.epoch:
        return Recovered([])
    if not latest:
        return NotRecovered(NotRecoveredReason.EMPTY)
    newest = latest[0]
    if newest.offset != top.offset:
        return NotRecovered(NotRecoveredReason.GAP)
    return Recovered([newest])


def merge(
    recovered: list[Publication],
    buffered: list[Publication],
    *,
    after: int,
) -> tuple[list[Publication], bool]:
    """Merge recovered history with publications buffered from PUB/SUB while it was read (§3.3 step 6).

    The node starts buffering live publications of the channel before it reads history, so the
    two lists overlap in any way: a publication may be in both, only in one, or arrive in the
    buffer out of order relative to the read. Both lists must come from the same epoch; the
    caller checks the epochs of buffered positions before merging.

    Args:
        recovered: Publications from the history read (usually oldest first, not required).
        buffered: Publications received live during the read, in arrival order.
        after: The offset the client already has: publications with ``offset <= after`` are
            dropped (stale duplicates). Use the requested offset when recovering, or the top
            reported in the reply when not.

    Returns:
        ``(merged, ok)``. ``merged`` holds each offset ``> after`` once (the first occurrence
        wins, ``recovered`` before ``buffered``), sorted by offset. ``ok`` is True iff the
        offsets of ``merged`` are exactly ``after + 1, after + 2, …`` — an empty result is ok.
        ``ok`` False means a publication in between was lost: the caller must not deliver
        ``merged`` and instead disconnects with 3010 (server-side subscription) or sends
        unsubscribe 2500 (client-side), so the client resubscribes and recovers.

    Publications without an offset (``offset == 0``, channels without history) are always
    dropped since ``after >= 0``; merging only makes sense in recoverable channels.
    """
    by_offset: dict[int, Publication] = {}
    for pubs in (recovered, buffered):
        for pub in pubs:
            if pub.offset > after and pub.offset not in by_offset:
                by_offset[pub.offset] = pub
    offsets = sorted(by_offset)
    merged = [by_offset[offset] for offset in offsets]
    ok = not offsets or offsets[-1] - after == len(offsets)
    return merged, ok


def settle(
    outcome: Recovered, buffered: list[Publication], *, after: int, cache: bool
) -> list[Publication] | None:
    """Merge a successful recovery with the live publications buffered while it was read.

    Args:
        outcome: The recovery decision (``recover_stream`` / ``recover_cache``).
        buffered: Live publications of the stream's current epoch, in arrival order.
        after: The offset the client asked to recover from.
        cache: Cache mode: continuity starts before the latest publication, which the reply
            alone carries (the caller sends ``merged[-1:]``).

    Returns:
        The merged publications (oldest first), or None when a publication in between was lost:
        the recovery then fails like any other.
    """
    if cache and outcome.publications:
        after = outcome.publications[0].offset - 1
    merged, ok = merge(outcome.publications, buffered, after=after)
    return merged if ok else None


def _contiguous(pubs: list[Publication], first: int) -> bool:
    return all(pub.offset == first + i for i, pub in enumerate(pubs))
