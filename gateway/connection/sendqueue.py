"""The output side of a connection: the ``Transport`` protocol it writes to, its bounded
per-tick queue (``SendQueue``) and the per-node ``Flusher`` that writes every queue once per loop
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
call ``SendQueue.writable`` when they drain."""


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
        queued the same pushes: build its wire frame once (gateway/transports/framing.py).
        ``payloads`` is reused after the call returns: do not keep it."""
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


FLUSH_CHUNK = 512
"""Outboxes written per loop callback. A fan-out to more connections is written in chunks with a
turn of the event loop between them, so the publisher's requests and other sockets are served
while a hot channel's writes go out (and publications that arrive meanwhile join the writes of
the connections not yet written: still one write per connection)."""


class Flusher:
    """End-of-tick writes for one node: every send queue that got output is flushed by a loop
    callback (a publication to N subscribers costs N / ``chunk`` handles, not N), in the order
    the send queues got their first message, ``chunk`` send queues per callback, with one table of
    joined pushes per callback."""

    __slots__ = ("_chunk", "_dirty", "_scheduled", "stats")

    def __init__(self, chunk: int = FLUSH_CHUNK) -> None:
        self._dirty: list[SendQueue] = []
        self._scheduled = False
        self._chunk = max(1, chunk)
        self.stats = HoldStats()
        """Node-wide figures of held output (``/metrics``)."""

    def schedule(self, send_queue: SendQueue) -> None:
        """``send_queue`` has output to write (called once until it is flushed)."""
        self._dirty.append(send_queue)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        dirty = self._dirty
        chunk = self._chunk
        if len(dirty) <= chunk:
            self._dirty = []
            batch = dirty
        else:
            batch = dirty[:chunk]
            del dirty[:chunk]
        frames: dict[tuple[SharedPush, ...], SharedPush] = {}
        for send_queue in batch:
            send_queue.flush(frames)
        if self._dirty:
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._scheduled = False


class SendQueue:
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
        "_all_shared",
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
        "_spare_pending",
        "_spare_pushes",
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
        self._pushes: list[SharedPush] = []
        """The shared pushes behind ``_pending`` (meaningful while ``_all_shared``)."""
        self._all_shared = True
        """Every message queued this tick is a shared push."""
        self._spare_pending: list[bytes] = []
        self._spare_pushes: list[SharedPush] = []
        self._bytes = 0
        self._base = 0
        self._closed = False

    def put(self, payload: bytes, shared: SharedPush | None = None) -> None:
        """Queue one message. The first message of a tick schedules the flush and samples the
        transport's unsent bytes; the sum of both is bounded by ``limit_bytes`` (overflow ⇒
        3008, PROTOCOL.md §2.3). Allocates nothing in the common case (it runs per delivery)."""
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
            self._all_shared = True
            self._flusher.schedule(self)
        self._bytes += len(payload) + 1
        if self._limit and self._bytes + self._base > self._limit:
            self._on_failure(codes.DISCONNECT_SLOW)
            return
        pending.append(payload)
        if self._all_shared:
            if shared is None:
                self._all_shared = False
            else:
                self._pushes.append(shared)

    def put_now(self, payload: bytes, shared: SharedPush) -> None:
        """``put`` for the only subscriber of a channel (gateway/hub.py): written at once when
        nothing is queued or held and the transport has no unsent bytes (no per-tick queue and
        flush round for a personal channel's publication); otherwise queued as by ``put``, so
        the connection's messages keep their order. Fan-out to many subscribers always goes
        through ``put`` (one write per connection per tick)."""
        if self._pending or self._held is not None or self._closed:
            self.put(payload, shared)
            return
        if self.transport.buffered_bytes() or (self._limit and len(payload) + 1 > self._limit):
            self.put(payload, shared)
            return
        spare = self._spare_pending
        spare.append(payload)
        try:
            self._write(spare, shared)
        finally:
            spare.clear()

    def flush(self, frames: dict[tuple[SharedPush, ...], SharedPush] | None = None) -> None:
        """Write everything queued in one transport write. ``frames`` is shared by the send queues
        flushed in the same callback: connections that queued the same sequence of shared pushes
        (a hot channel) reuse one joined push instead of building their own. Held output is
        written first, whatever the transport's state (the connection is closing)."""
        if self._held is not None and not self._closed:
            self._release()
        pending = self._pending
        if not pending or self._closed:
            return
        pushes = self._pushes
        # The queues are swapped with empty spares before the write (a failing write may
        # re-enter through ``on_failure``) and cleared after it: no list per tick.
        self._pending, self._spare_pending = self._spare_pending, pending
        self._pushes, self._spare_pushes = self._spare_pushes, pushes
        self._bytes = 0
        shared: SharedPush | None = None
        if self._all_shared:
            if len(pushes) == 1:
                shared = pushes[0]
            elif frames is not None:
                # Pushes of different codecs are different objects: the key is per protocol
                # (the pushes themselves, compared by identity, alive while the table is).
                key = tuple(pushes)
                shared = frames.get(key)
                if shared is None:
                    shared = frames[key] = SharedPush(self._separator.join(pending))
        try:
            self._write(pending, shared)
        finally:
            pending.clear()
            pushes.clear()

    def close(self) -> None:
        """Drop whatever is queued; later puts and flushes do nothing."""
        self._closed = True
        self._pending.clear()
        self._pushes.clear()
        self._bytes = 0
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
        # Only the payload is kept: a held push's SharedPush also references the channel's
        # previous publication (``prev``, for delta variants that are already encoded by now)
        # and its variants, which would double what a held message costs. Held output is
        # released per connection, so it has no wire frame to share anyway.
        held.push(payload, None, shared.conflation if shared is not None else None)
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
        self._drop_held()  # before take(): the node's held-bytes figure drops by what was held
        payloads, pushes = held.take()
        if not payloads:
            return
        self._write(payloads, pushes[0] if len(pushes) == 1 else None)

    def _write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        """The one transport write: a transport that fails closes the connection with 3009
        (write error) instead of raising into the caller."""
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
