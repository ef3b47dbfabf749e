"""What one HTTP/1.1 connection may send, and how it is refused past a bound: the ``Limits`` of a
server (head bytes, body bytes, the request deadline) with the canned answer of each, and
``RequestBounds``, the connection's request deadline and refusal steps (a mixin of
httpwire/protocol.py's ``HttpProtocol``, which counts the bytes and calls them).

A request must be delivered whole (head and body) within ``Limits.request_timeout`` of its first
byte; one timer serves many keep-alive requests. Every refusal writes its canned response
(unless a response is in progress on the wire: then the connection is just closed),
half-closes, discards what still arrives for ``LINGER_SECONDS`` or ``LINGER_BYTES`` (so the peer
reads the answer instead of a reset) and closes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["LINGER_BYTES", "LINGER_SECONDS", "MAX_HEAD_BYTES", "Limits", "RequestBounds", "canned"]

MAX_HEAD_BYTES = 1 << 20
"""Largest request head (request line + headers) accepted by default: Go's
``http.DefaultMaxHeaderBytes``, which Centrifugo's HTTP server uses."""


LINGER_SECONDS = 0.5
"""After a refusal: how long input is still read (and discarded) before the close."""


LINGER_BYTES = 16 * 1024 * 1024
"""After a refusal: how much input is discarded at most before the close (reading and dropping
costs a few ms of CPU and no memory); a peer that keeps sending past it is closed at once."""


def canned(status: bytes, text: bytes, content_type: bytes = b"text/plain; charset=utf-8") -> bytes:
    """A whole ``connection: close`` response: ``status`` (e.g. ``b"431 Request Header Fields Too
    Large"``) with ``text`` as its body."""
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
        status,
        content_type,
        len(text),
        text,
    )


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection may send, and the answers past each bound."""

    max_head_bytes: int = MAX_HEAD_BYTES
    max_body_bytes: int = 0
    """0: no bound here (the app bounds its bodies)."""
    request_timeout: float = 0.0
    """Seconds to deliver one whole request; 0: no deadline."""
    head_too_large: bytes = canned(b"431 Request Header Fields Too Large", b"request header fields too large")
    body_too_large: bytes = canned(b"413 Content Too Large", b"request entity too large")
    timed_out: bytes = canned(b"408 Request Timeout", b"request timeout")
    bad_request: bytes = canned(b"400 Bad Request", b"Invalid HTTP request received.")


class RequestBounds:
    """Mixin state and steps: the connection arms the deadline (``_arm``) at a request's first
    byte, cancels it (``_cancel_deadline``) when the request is whole, and ``_refuse``s what
    breaks a bound."""

    limits: ClassVar[Limits] = Limits()

    _refused: bool
    _linger: asyncio.TimerHandle | None
    _deadline: asyncio.TimerHandle | None
    _request_open: bool
    _request_began: float

    if TYPE_CHECKING:  # the connection's state and steps (httpwire/protocol.py)
        transport: asyncio.Transport
        loop: asyncio.AbstractEventLoop
        cycle: Any
        pipeline: Any
        head_done: bool

    def _arm(self) -> None:
        """Start a request's deadline (unless one runs). One timer serves many requests: it is
        created only when none is pending and, when it fires, re-armed for what is left of the
        open request's deadline (no timer per keep-alive request)."""
        timeout = self.limits.request_timeout
        if timeout > 0 and not self._request_open:
            self._request_open = True
            self._request_began = self.loop.time()
            if self._deadline is None:
                self._deadline = self.loop.call_later(timeout, self._timed_out)

    def _cancel_deadline(self) -> None:
        self._request_open = False
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if not self._request_open:
            return
        left = self._request_began + self.limits.request_timeout - self.loop.time()
        if left > 0:
            self._deadline = self.loop.call_later(left, self._timed_out)
            return
        self._request_open = False
        if self.head_done:  # a stalled body: no answer
            self._refused = True
            self._abandon_cycle()
            if self._mine():
                self.transport.close()
        else:
            self._refuse(self.limits.timed_out)

    def _mine(self) -> bool:
        """Whether the transport is open and still this connection's (not handed to a
        WebSocket protocol)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        protocol: object = transport.get_protocol()
        return protocol is self

    def _abandon_cycle(self) -> bool:
        """Tell the app its request is gone; True when no response is in progress on the wire
        (a refusal may be written)."""
        cycle = self.cycle
        quiet = not self.pipeline
        if cycle is not None and not cycle.response_complete:
            if getattr(cycle, "response_started", True):
                quiet = False
            cycle.disconnected = True
            cycle.message_event.set()
        return quiet

    def _refuse(self, response: bytes) -> None:
        """Answer ``response`` (unless a response is in progress), half-close, discard input for
        ``LINGER_SECONDS`` (``LINGER_BYTES`` at most), close."""
        self._refused = True
        self._cancel_deadline()
        quiet = self._abandon_cycle()
        if not self._mine():
            return
        transport = self.transport
        if not quiet:
            transport.close()
            return
        transport.write(response)
        if transport.can_write_eof():
            # Closing with unread input makes the kernel send RST, which can destroy the answer
            # before the peer reads it: half-close, discard the rest for a moment, then close
            # (what Go's server does for the same reason).
            transport.write_eof()
            self._linger = self.loop.call_later(LINGER_SECONDS, transport.close)
        else:
            transport.close()
