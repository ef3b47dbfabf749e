"""The output side of a connection: the ``Transport`` protocol it writes to, its bounded
per-tick queue (``Outbox``) and the per-node ``Flusher`` that writes every queue once per loop
tick.

Hot-path properties (PROTOCOL.md §2.3, STYLE.md "fan-out with a budget"): a publication's push is
encoded once (gateway/hub.py) and queued by reference; each connection writes everything it
queued in one tick with ONE ``transport.write``; connections that queued the same sequence of
shared pushes in a tick get the same joined ``SharedPush``, so their transports build one wire
frame between them (gateway/transports/framing.py). The queue is bounded in bytes together
with the transport's unsent bytes; overflow is reported, never blocks. Imports no transport.

Overload (seed §13.3): once the transport's unsent bytes pass ``client.queue_conflate_size``,
a connection's output is *held* instead of written (gateway/conflation.py ``HeldQueue``): held
conflatable publications keep only the newest per conflation key, nothing else is dropped, and
the held queue is written in one write as soon as the transport drains (``writable()`` from the
transport, else a poll every ``HOLD_RETRY_SECONDS``). Past ``client.queue_max_size`` (held +
unsent) the connection still gets 3008 and recovers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from gateway.conflation import HeldQueue
from gateway.hub import SharedPush
from gateway.protocol import codes

log = logging.getLogger("taskcast.gateway.client")

HOLD_RETRY_SECONDS = 0.25
"""While output is held: how often the transport is checked for room, for transports that do not
call ``Outbox.writable`` when they drain."""


class Transport(Protocol):
    """What a connection writes to. Adapters live in gateway/transports/."""

    name: str
    """The metrics label: websocket, sse, http_stream, uni_sse, uni_http_stream."""
    emulation: bool
    """SSE / HTTP-streaming with the /emulation endpoint: the connect reply carries session+node."""
    unidirectional: bool

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        """Write queued messages at once (one call per loop tick). When ``shared`` is set, its
        payload is exactly ``payloads`` joined with the connection's codec separator
        (``b"\\n"`` for JSON, nothing for Protobuf) and is shared by every connection that
        queued the same pushes: build its wire frame once (gateway/transports/framing.py)."""
        ...

    def buffered_bytes(self) -> int:
        """Bytes accepted by ``write`` but not yet sent to the peer."""
        ...

    def close(self, disconnect: codes.Disconnect) -> None:
        """Close with this disconnect (called at most once)."""
        ...


class HoldStats:
    """Held output across one node's connections: bytes and connections held now, publications
    dropped by conflation so far."""

    __slots__ = ("bytes", "conflated", "connections")

    def __init__(self) -> None:
        self.bytes = 0
        self.connections = 0
        self.conflated = 0


class Flusher:
    """End-of-tick writes for one node: every outbox that got output in a tick is flushed by ONE
    loop callback (a publication to N subscribers costs one handle, not N), with one shared
    table of joined pushes."""

    def __init__(self) -> None:
        self._dirty: list[Outbox] = []
        self.stats = HoldStats()
        """Node-wide figures of held output (``/metrics``)."""

    def schedule(self, outbox: Outbox) -> None:
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._flush)
        self._dirty.append(outbox)

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, []
        frames: dict[tuple[int, ...], SharedPush] = {}
        for outbox in dirty:
            outbox.flush(frames)


class Outbox:
    """One connection's queue of encoded messages for the end-of-tick write.

    Args:
        transport: Where the messages go.
        flusher: The node's per-tick flusher.
        limit_bytes: ``client.queue_max_size`` (0 = unbounded).
        hold_bytes: ``client.queue_conflate_size``: unsent transport bytes past which output is
            held and conflated (0 = never hold).
        on_failure: Called with 3008 when the bound is exceeded or 3009 when the transport's
            write raised; the connection then closes (it may ``flush`` what was queued before
            the overflowing message, then ``close``).
        separator: What joins the messages of one write (the codec's ``separator``).
    """

    __slots__ = (
        "_base",
        "_bytes",
        "_closed",
        "_flusher",
        "_held",
        "_hold_at",
        "_limit",
        "_on_failure",
        "_pending",
        "_pushes",
        "_retry",
        "_separator",
        "transport",
    )

    def __init__(
        self,
        transport: Transport,
        flusher: Flusher,
        *,
        limit_bytes: int,
        hold_bytes: int = 0,
        on_failure: Callable[[codes.Disconnect], None],
        separator: bytes = b"\n",
    ) -> None:
        self.transport = transport
        self._separator = separator
        self._flusher = flusher
        self._limit = limit_bytes
        self._hold_at = hold_bytes
        self._on_failure = on_failure
        self._held: HeldQueue | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._pending: list[bytes] = []
        self._pushes: list[SharedPush] | None = None
        """The shared pushes behind ``_pending`` while every queued item is one (else None)."""
        self._bytes = 0
        self._base = 0
        self._closed = False

    def put(self, payload: bytes, shared: SharedPush | None = None) -> None:
        """Queue one message. The first message of a tick schedules the flush and samples the
        transport's unsent bytes; the sum of both is bounded by ``limit_bytes`` (overflow ⇒
        3008, PROTOCOL.md §2.3)."""
        if self._closed:
            return
        if self._held is not None:
            self._hold(payload, shared)
            return
        pending = self._pending
        if not pending:
            base = self.transport.buffered_bytes()
            if self._hold_at and base > self._hold_at:
                self._start_holding(base)
                self._hold(payload, shared)
                return
            self._base = base
            self._pushes = []
            self._flusher.schedule(self)
        self._bytes += len(payload) + 1
        if self._limit and self._bytes + self._base > self._limit:
            self._on_failure(codes.DISCONNECT_SLOW)
            return
        pending.append(payload)
        pushes = self._pushes
        if pushes is not None:
            if shared is None:
                self._pushes = None
            else:
                pushes.append(shared)

    def flush(self, frames: dict[tuple[int, ...], SharedPush] | None = None) -> None:
        """Write everything queued in one transport write. ``frames`` is shared by all outboxes
        flushed in the same tick: connections that queued the same sequence of shared pushes (a
        hot channel) reuse one joined push instead of building their own. Held output is
        written first, whatever the transport's state (the connection is closing)."""
        if self._held is not None and not self._closed:
            self._release()
        pending = self._pending
        if not pending or self._closed:
            return
        pushes = self._pushes
        self._pending, self._pushes, self._bytes = [], None, 0
        shared: SharedPush | None = None
        if pushes:
            if len(pushes) == 1:
                shared = pushes[0]
            elif frames is not None:
                # Pushes of different codecs are different objects: the key is per protocol.
                key = tuple(map(id, pushes))
                shared = frames.get(key)
                if shared is None:
                    shared = frames[key] = SharedPush(self._separator.join(pending))
        try:
            self.transport.write(pending, shared)
        except Exception:
            log.debug("transport write failed", exc_info=True)
            self._on_failure(codes.DISCONNECT_WRITE_ERROR)

    def close(self) -> None:
        """Drop whatever is queued; later puts and flushes do nothing."""
        self._closed = True
        self._pending, self._pushes, self._bytes = [], None, 0
        self._drop_held()

    # --- held output (seed §13.3) ----------------------------------------------------------

    def writable(self) -> None:
        """The transport drained below its low-water mark: write held output now."""
        if self._held is not None and not self._closed:
            if self._retry is not None:
                self._retry.cancel()
            self._check_held()

    def _start_holding(self, base: int) -> None:
        self._held = HeldQueue()
        self._base = base
        self._flusher.stats.connections += 1
        self._retry = asyncio.get_running_loop().call_later(HOLD_RETRY_SECONDS, self._check_held)

    def _hold(self, payload: bytes, shared: SharedPush | None) -> None:
        held = self._held
        assert held is not None
        stats = self._flusher.stats
        before, dropped = held.bytes, held.conflated
        held.push(payload, shared, shared.conflation if shared is not None else None)
        stats.bytes += held.bytes - before
        stats.conflated += held.conflated - dropped
        if self._limit and held.bytes + self._base > self._limit:
            self._drop_held()
            self._on_failure(codes.DISCONNECT_SLOW)

    def _check_held(self) -> None:
        self._retry = None
        if self._held is None or self._closed:
            return
        base = self.transport.buffered_bytes()
        if base > self._hold_at:
            self._base = base
            self._retry = asyncio.get_running_loop().call_later(HOLD_RETRY_SECONDS, self._check_held)
            return
        self._release()

    def _release(self) -> None:
        """Write everything held in one transport write and stop holding."""
        held = self._held
        assert held is not None
        payloads, pushes = held.take()
        self._drop_held()
        if not payloads:
            return
        shared = pushes[0] if len(pushes) == 1 else None
        try:
            self.transport.write(payloads, shared)
        except Exception:
            log.debug("transport write failed", exc_info=True)
            self._on_failure(codes.DISCONNECT_WRITE_ERROR)

    def _drop_held(self) -> None:
        held = self._held
        if held is None:
            return
        self._held = None
        stats = self._flusher.stats
        stats.bytes -= held.bytes
        stats.connections -= 1
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
