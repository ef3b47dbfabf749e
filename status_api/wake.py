"""The Status API's half of the post-commit wake-up (issue 16; docs/relay.md "Wake-up"): after a
transaction that wrote outbox rows commits, tell the relays so they claim at once instead of at
their next poll.

:class:`RedisWakePublisher` is the ``ServiceContext.on_commit`` hook when ``wake.redis_url`` is
set: ``PUBLISH <wake.channel> <rows>`` on Redis, which every subscribed relay receives. Contract:

* a hint, never the truth: the outbox rows are already committed when it is sent; a hint that is
  lost (Redis down, no relay subscribed, a relay busy) costs at most the relays' safety-net poll;
* never on the request path: :meth:`notify` only records that a wake-up is due and returns; one
  background task per process sends it, and commits made while a PUBLISH is in flight share the
  next one (at most one in flight, so a burst of 1,000 commits/s is a few hundred PUBLISHes at
  most, each a few bytes);
* never fails a request: Redis errors are logged once per outage (no traceback per request, no
  URL in the log: it may carry a password) and retried with the next commit.

The embedded default (``taskcast up``) does not use Redis: it hands ``relay.Relay.wake`` to the
Status API directly (same process, same loop).
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as redis

from status_api import redis_client
from status_api.storage.outbox import WAKE_CHANNEL

log = logging.getLogger("status_api.wake")

#: Bound on one PUBLISH (connect included): a slow Redis must not pile up wake-ups.
PUBLISH_TIMEOUT_SECONDS = 1.0


class RedisWakePublisher:
    """Coalescing ``PUBLISH`` of wake-up hints; :meth:`notify` is the post-commit hook."""

    def __init__(self, url: str, channel: str = WAKE_CHANNEL) -> None:
        self.channel = channel
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
                await self._redis.publish(self.channel, str(rows))
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

    async def aclose(self) -> None:
        """Let an in-flight hint finish (bounded by the publish timeout), then close the client."""
        if self._sender is not None and not self._sender.done():
            try:
                async with asyncio.timeout(2 * PUBLISH_TIMEOUT_SECONDS):
                    await self._sender
            except (TimeoutError, Exception):
                self._sender.cancel()
        await self._redis.aclose()
