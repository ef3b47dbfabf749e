"""The Status API's half of the post-commit wake-up (docs/relay.md "Wake-up"): after a
transaction that wrote outbox rows commits, tell the relays so they claim at once instead of at
their next poll.

:class:`RedisWakePublisher` is the ``ServiceContext.on_commit`` hook when ``wake.redis_url`` is
set: ``PUBLISH <rows>`` on Redis to ONE relay's own channel (``outbox.relay_wake_channel``), round-robin
over the relays subscribed (found by pattern, refreshed every second), or on ``wake.channel`` for
every relay when there is no relay channel or a relay listens on ``wake.channel`` alone (an older
relay). Contract:

* a hint, never the truth: the outbox rows are already committed when it is sent; a hint that is
  lost (Redis down, no relay subscribed, a relay busy) costs at most the relays' safety-net poll;
* never on the request path: :meth:`notify` only records that a wake-up is due and returns; one
  background task per process sends it, and commits made while a PUBLISH is in flight share the
  next one (at most one in flight, so a burst of 1,000 commits/s is a few hundred PUBLISHes at
  most, each a few bytes);
* never fails a request: Redis errors are logged once per outage (no traceback per request, no
  URL in the log: it may carry a password) and retried with the next commit;
* a hint reaches a relay that is subscribed when it is sent: ``PUBLISH`` answers how many
  subscribers got it, and a relay channel nobody listens on any more (the relay stopped or lost
  its connection) is dropped at once and the hint goes to the next relay, then to ``wake.channel``.

:class:`UdpWakeSender` is the hook when ``wake.udp_targets`` is set instead: a datagram to one
relay per commit burst, no Redis (docs/relay.md "Wake-up without Redis").

The embedded default (``taskcast up``) does not use Redis: it hands ``relay.Relay.wake`` to the
Status API directly (same process, same loop).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

import redis.asyncio as redis

from status_api import redis_client
from status_api.storage.outbox import RELAY_WAKE_INFIX, WAKE_CHANNEL, WAKE_UDP_HINT

log = logging.getLogger("status_api.wake")

#: Bound on one PUBLISH (connect included): a slow Redis must not pile up wake-ups.
PUBLISH_TIMEOUT_SECONDS = 1.0
#: How often the list of relay channels is read again (``PUBSUB CHANNELS``, ``PUBSUB NUMSUB``): a new
#: relay gets hints within this; a relay gone is noticed by the first hint sent to it.
RELAYS_REFRESH_SECONDS = 1.0


def _glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis glob pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


class RedisWakePublisher:
    """Coalescing ``PUBLISH`` of wake-up hints; :meth:`notify` is the post-commit hook."""

    def __init__(
        self, url: str, channel: str = WAKE_CHANNEL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.channel = channel
        self._pattern = _glob_escape(channel + RELAY_WAKE_INFIX) + "*"
        self._relays: list[str] = []
        self._next = 0
        self._refresh_at = 0.0
        self._clock = clock
        self._redis = redis_client.client(
            url, socket_timeout=PUBLISH_TIMEOUT_SECONDS, socket_connect_timeout=PUBLISH_TIMEOUT_SECONDS
        )
        self._pending = 0
        self._sender: asyncio.Task[None] | None = None
        self._failing = False
        #: Counters (tests, logs): PUBLISHes sent, failed, and notifies that rode on another one.
        self.sent = 0
        self.failed = 0

    def notify(self, outbox_rows: int) -> None:
        """Record that ``outbox_rows`` rows just committed; a background task sends the hint.
        Called on the event loop; never blocks, never raises."""
        self._pending += outbox_rows
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send(), name="wake-publish")

    async def _send(self) -> None:
        while self._pending:
            rows, self._pending = self._pending, 0
            try:
                await self._deliver(str(rows))
            except (redis.RedisError, OSError, TimeoutError) as exc:
                self.failed += 1
                if not self._failing:
                    self._failing = True
                    log.warning(
                        "wake-up hint not sent (%s); relays publish at their next poll until Redis is back",
                        type(exc).__name__,
                    )
                return  # the next commit tries again; the rows wait for the poll meanwhile
            self.sent += 1
            if self._failing:
                self._failing = False
                log.info("wake-up hints flowing again")

    async def _deliver(self, hint: str) -> None:
        """PUBLISH ``hint`` to one subscribed relay channel, else on the shared channel."""
        if self._clock() >= self._refresh_at:
            await self._refresh()
        while self._relays:
            i = self._next % len(self._relays)
            self._next = i + 1
            if await self._redis.publish(self._relays[i], hint):
                return
            del self._relays[i]  # nobody listens there any more
        await self._redis.publish(self.channel, hint)

    async def _refresh(self) -> None:
        """Read the relay channels; none when a subscriber of the shared channel has none (an
        older relay, which must get every hint)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.pubsub_channels(self._pattern)
            pipe.pubsub_numsub(self.channel)
            channels, numsub = await pipe.execute()
        relays = sorted(c.decode() if isinstance(c, bytes) else str(c) for c in channels)
        shared = int(numsub[0][1]) if numsub else 0
        self._relays = relays if shared <= len(relays) else []
        self._refresh_at = self._clock() + RELAYS_REFRESH_SECONDS

    async def aclose(self) -> None:
        """Let an in-flight hint finish (bounded by the publish timeout), then close the client."""
        if self._sender is not None and not self._sender.done():
            try:
                async with asyncio.timeout(2 * PUBLISH_TIMEOUT_SECONDS):
                    await self._sender
            except (TimeoutError, Exception):
                self._sender.cancel()
        await self._redis.aclose()


#: How long a relay address that refused a hint (ICMP port unreachable) is skipped.
UDP_DOWN_SECONDS = 1.0


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) → (host, port).

    Raises:
        ValueError: not of that form, or the port is outside 1..65535.
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {text!r}")
    return host, int(port)


class UdpWakeSender:
    """Wake-up hints without Redis: one datagram per commit burst to ONE relay, round-robin over
    ``targets`` (each relay's ``wake_udp_listen``), so a hint makes one relay claim, not all.

    Same contract as :class:`RedisWakePublisher`: :meth:`notify` never blocks nor raises; commits
    of one loop tick share one datagram; a lost datagram costs at most the relays' poll. A target
    that answered the previous datagram with ICMP port unreachable (a relay down or restarting:
    the connected socket reports it as ``ECONNREFUSED`` on the next send) is skipped for
    :data:`UDP_DOWN_SECONDS` and the hint goes to the next one. Addresses are resolved once.
    """

    def __init__(self, targets: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._socks: list[socket.socket] = []
        for target in targets:
            host, port = parse_address(target)
            family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            sock.connect(addr)
            self._socks.append(sock)
        self._down_until = [0.0] * len(self._socks)
        self._next = 0
        self._scheduled = False
        self._clock = clock
        self.sent = 0
        self.failed = 0

    def notify(self, outbox_rows: int) -> None:
        """Record a commit of ``outbox_rows`` rows; the datagram leaves at the end of this tick."""
        if not self._scheduled and self._socks:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send)

    def _send(self) -> None:
        self._scheduled = False
        now = self._clock()
        n = len(self._socks)
        for _ in range(n):
            i, self._next = self._next, (self._next + 1) % n
            if self._down_until[i] > now:
                continue
            try:
                self._socks[i].send(WAKE_UDP_HINT)
            except ConnectionRefusedError:
                self._down_until[i] = now + UDP_DOWN_SECONDS
                continue
            except OSError:  # a full socket buffer or a route gone: the poll publishes
                self.failed += 1
                return
            self.sent += 1
            return
        self.failed += 1  # every relay refused: the poll publishes

    async def aclose(self) -> None:
        for sock in self._socks:
            sock.close()
