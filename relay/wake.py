"""The relay's half of the post-commit wake-up (docs/relay.md "Wake-up"): subscribe to
the Redis PUB/SUB channel the Status API publishes a hint on after each commit that wrote outbox
rows (``status_api/wake.py``), and call ``on_wake`` for every hint.

A hint is never the truth: the listener is a latency optimisation beside the relay's poll. While
Redis is unreachable it reconnects with full-jitter backoff (capped at 5 s) and the poll alone
publishes; after every (re)subscription it wakes the relay once, because hints sent while it was
not subscribed are lost (PUB/SUB keeps nothing). ``on_state(True)`` / ``on_state(False)`` report
each subscription and its loss (``Relay.hints_up``: the relay polls slower only while subscribed).
With ``own_channel`` (``outbox.relay_wake_channel``: the relay's own channel) it subscribes to that
channel too, where the Status API sends the hints meant for this relay alone (docs/relay.md "One
relay per hint"); hints on either channel call ``on_wake``.
The Redis URL (``redis://`` or, with Sentinel, ``redis+sentinel://``: status_api/redis_client.py)
may hold a password and is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import redis.asyncio as redis

from httpwire.cancellation import raise_if_cancelling
from relay.backoff import full_jitter
from relay.metrics import RelayMetrics
from status_api import redis_client

log = logging.getLogger("taskcast.relay.wake")

RECONNECT_BASE_SECONDS = 0.1
RECONNECT_CAP_SECONDS = 5.0
HEALTH_CHECK_SECONDS = 15
#: How long one ``get_message`` waits before looking at ``stop`` again.
READ_SLICE_SECONDS = 1.0


class RedisWakeListener:
    """Calls ``on_wake()`` on each hint published on ``channel``, until ``run``'s ``stop`` is set;
    ``on_state(subscribed)`` when the subscription starts and ends."""

    def __init__(
        self,
        url: str,
        channel: str,
        on_wake: Callable[[], None],
        metrics: RelayMetrics | None = None,
        rand: Callable[[], float] = random.random,
        on_state: Callable[[bool], None] | None = None,
        own_channel: str | None = None,
    ) -> None:
        self.url = url
        self.channel = channel
        self.channels = (channel,) if own_channel is None else (channel, own_channel)
        self.on_wake = on_wake
        self.on_state = on_state
        self.metrics = metrics or RelayMetrics()
        self.rand = rand
        #: Set while subscribed (tests wait on it before publishing).
        self.subscribed = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                await self._listen(stop)
                failures = 0
            except (redis.RedisError, OSError, TimeoutError) as exc:
                raise_if_cancelling(exc)
                failures += 1
                if failures == 1:
                    log.warning(
                        "wake-up channel unavailable (%s); publishing at the poll interval until it is back",
                        type(exc).__name__,
                    )
            finally:
                if self.subscribed.is_set() and self.on_state is not None:
                    self.on_state(False)
                self.subscribed.clear()
                self.metrics.wake_listener_up.set(0)
            if stop.is_set():
                return
            delay = full_jitter(failures, RECONNECT_BASE_SECONDS, RECONNECT_CAP_SECONDS, self.rand)
            try:
                async with asyncio.timeout(max(delay, RECONNECT_BASE_SECONDS)):
                    await stop.wait()
            except TimeoutError:
                pass

    async def _listen(self, stop: asyncio.Event) -> None:
        # The health check PINGs an idle subscription, so a half-open link is noticed and replaced.
        client = redis_client.client(
            self.url, socket_connect_timeout=RECONNECT_CAP_SECONDS, health_check_interval=HEALTH_CHECK_SECONDS
        )
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(*self.channels)
                self.subscribed.set()
                self.metrics.wake_listener_up.set(1)
                if self.on_state is not None:
                    self.on_state(True)
                log.info("subscribed to the wake-up channel %s", self.channel)
                self.on_wake()  # hints sent while we were not subscribed are lost: look once now
                while not stop.is_set():
                    msg = await pubsub.get_message(timeout=READ_SLICE_SECONDS)
                    if msg is not None and msg.get("type") == "message":
                        self.on_wake()
        finally:
            await client.aclose()
