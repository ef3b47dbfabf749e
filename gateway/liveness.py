"""Timers of one connection: the stale-connect deadline, server pings and the pong deadline
(PROTOCOL.md §1.4), connection expiry (§5.4, 3005) and subscription expiry (2501 / 3006).

Timers run on the event loop's monotonic clock while expiries are wall-clock instants from
tokens: a timer that fires a hair early re-arms instead of acting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.protocol import codec, codes
from gateway.protocol.session import State, Subscription

if TYPE_CHECKING:
    from gateway.client import Client


class Liveness:
    """The named timers of a connection; all are cancelled when it closes."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.settings = client.settings.client
        self.timers: dict[str, asyncio.TimerHandle] = {}

    def set(self, name: str, delay: float, callback: Callable[[], None]) -> None:
        self.cancel(name)
        self.timers[name] = self.client.loop.call_later(delay, callback)

    def cancel(self, name: str) -> None:
        handle = self.timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()

    # --- connect deadline and pings --------------------------------------------------------

    def start(self) -> None:
        """No connect within ``client.stale_close_delay`` ⇒ 3502."""
        self.set("stale", self.settings.stale_close_delay, self._on_stale)

    def _on_stale(self) -> None:
        self.timers.pop("stale", None)
        if self.client.session.state is State.CONNECTING:
            self.client.disconnect(codes.DISCONNECT_STALE)

    def start_pings(self, first_delay: float) -> None:
        self.set("ping", first_delay, self._on_ping)

    def _on_ping(self) -> None:
        self.timers.pop("ping", None)
        client = self.client
        client.send(codec.PING)
        if not client.transport.unidirectional and self.settings.pong_timeout > 0:
            client.session.ping_sent()
            self.set("pong", self.settings.pong_timeout, self._on_pong_timeout)
        self.set("ping", self.settings.ping_interval, self._on_ping)

    def _on_pong_timeout(self) -> None:
        self.timers.pop("pong", None)
        if self.client.session.ping_outstanding:
            self.client.disconnect(codes.DISCONNECT_NO_PONG)

    # --- connection expiry -----------------------------------------------------------------

    def schedule_expiry(self) -> None:
        """(Re-)arm the expiry check after connect, refresh or a server API refresh."""
        self.cancel("expire")
        expire_at = self.client.expire_at
        if expire_at is not None:
            delay = max(0.0, expire_at - self.client.clock()) + self.settings.expired_close_delay
            self.set("expire", delay, self._on_expire)

    def _on_expire(self) -> None:
        self.timers.pop("expire", None)
        client = self.client
        if client.expire_at is None:
            return
        if client.expire_at + self.settings.expired_close_delay <= client.clock():
            client.disconnect(codes.DISCONNECT_EXPIRED)
        else:
            self.schedule_expiry()  # refreshed meanwhile, or the timer fired a little early

    # --- subscription expiry ---------------------------------------------------------------

    def set_sub_timer(self, sub: Subscription) -> None:
        name = f"sub:{sub.channel}"
        self.cancel(name)
        if sub.expire_at is not None:
            delay = max(0.0, sub.expire_at - self.client.clock()) + self.settings.expired_sub_close_delay
            self.set(name, delay, lambda: self._on_sub_expire(sub.channel))

    def _on_sub_expire(self, channel: str) -> None:
        self.timers.pop(f"sub:{channel}", None)
        client = self.client
        sub = client.session.subscriptions.get(channel)
        if sub is None or sub.expire_at is None:
            return
        if sub.expire_at + self.settings.expired_sub_close_delay > client.clock():
            self.set_sub_timer(sub)  # refreshed meanwhile, or the timer fired a little early
            return
        if sub.server_side:
            client.disconnect(codes.DISCONNECT_SUB_EXPIRED)
        else:
            client.spawn(lambda: client.unsubscribe(channel, codes.UNSUBSCRIBE_EXPIRED))
