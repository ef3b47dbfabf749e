"""Handshake admission of every connection endpoint (WebSocket, SSE / HTTP-streaming, their
unidirectional forms): whether a new connection may start, or the Retry-After seconds of an
HTTP 503 — shutting down, ``client.connection_limit``, ``client.handshake_limit``,
``client.connection_rate_limit`` (a token bucket). A 503 is what Centrifugo answers, and the
SDKs retry it with backoff (a close after connect would be terminal).

Knows the node only through two counts the composition root passes in; imports only the
settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config.schema import ClientSettings

__all__ = ["Admission", "RateLimiter"]


class RateLimiter:
    """Token bucket for ``client.connection_rate_limit`` (new connections per second per node)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.clock = clock
        self.updated = clock()

    def take(self) -> float | None:
        """None when admitted; else seconds until a token is available."""
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


class Admission:
    """The admission decision of one node.

    Args:
        cfg: The ``client`` section (the limits).
        connections: How many connections the node holds (connected ones).
        connecting: How many are still in their handshake (no connect reply yet).
    """

    def __init__(
        self, cfg: ClientSettings, connections: Callable[[], int], connecting: Callable[[], int]
    ) -> None:
        self._cfg = cfg
        self._connections = connections
        self._connecting = connecting
        self.rate_limiter = RateLimiter(cfg.connection_rate_limit) if cfg.connection_rate_limit > 0 else None
        self.shutting_down = False
        """Set when graceful shutdown begins: every new connection is refused from then on."""

    def admit(self) -> int | None:
        """None to accept, or the Retry-After seconds of an HTTP 503."""
        if self.shutting_down:
            return 1
        cfg = self._cfg
        if cfg.connection_limit and self._connections() >= cfg.connection_limit:
            return 1
        if cfg.handshake_limit and self._connecting() >= cfg.handshake_limit:
            return 1
        if self.rate_limiter is not None:
            wait = self.rate_limiter.take()
            if wait is not None:
                return max(1, int(wait + 0.999))
        return None
