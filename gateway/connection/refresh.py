"""Server-side refresh of one connection and of its subscriptions (Centrifugo's refresh and
sub_refresh proxies): when an ``expire_at`` the backend granted passes, ask the authorizer again
instead of the client, and extend, unsubscribe (2501) or disconnect (3005, or the backend's
disconnect) accordingly. The jobs run in the connection's command order (``Conn.spawn``); the
timers die with the connection (``close``).

Owns only its timers; the connection it serves is reached through the ``Conn`` protocol.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.connection.authorization import Authorizer, Caller
from gateway.errors import DisconnectError
from gateway.protocol import codes
from gateway.protocol.messages import SubRefreshRequest
from gateway.protocol.subscription import Subscription


class Conn(Protocol):
    """What the refresher needs of the client driver."""

    authorizer: Authorizer
    conn_info: bytes | None
    conn_meta: bytes | None

    @property
    def closed(self) -> bool: ...

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None: ...

    def disconnect(self, disconnect: codes.Disconnect) -> None: ...

    async def unsubscribe(self, channel: str, push: codes.Unsubscribe | None = None) -> None: ...

    def caller(self) -> Caller: ...

    def subscription(self, channel: str) -> Subscription | None: ...

    def update_channel_info(self, sub: Subscription, info: bytes) -> None:
        """New channel info for ``sub`` (nothing when it is no longer subscribed)."""
        ...


class ServerRefresher:
    """The refresh timers of one connection."""

    def __init__(self, conn: Conn, loop: asyncio.AbstractEventLoop, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.loop = loop
        self.clock = clock
        self._connection: asyncio.TimerHandle | None = None
        self._subs: dict[str, asyncio.TimerHandle] = {}

    def _arm(self, expire_at: int, job: Callable[[], Awaitable[object]]) -> asyncio.TimerHandle:
        return self.loop.call_later(max(0.0, expire_at - self.clock()), self.conn.spawn, job)

    def connection(self, expire_at: int | None) -> None:
        """(Re-)arm the connection's refresh for ``expire_at`` (None: never expires)."""
        if self._connection is not None:
            self._connection.cancel()
            self._connection = None
        if expire_at is not None and not self.conn.closed:
            self._connection = self._arm(expire_at, self._refresh)

    def subscription(self, channel: str, expire_at: int | None) -> None:
        """(Re-)arm a subscription's refresh; None cancels it (unsubscribed)."""
        old = self._subs.pop(channel, None)
        if old is not None:
            old.cancel()
        if expire_at is not None and not self.conn.closed:
            self._subs[channel] = self._arm(expire_at, functools.partial(self._sub_refresh, channel))

    def close(self) -> None:
        self.connection(None)
        for timer in self._subs.values():
            timer.cancel()
        self._subs.clear()

    async def _refresh(self) -> None:
        self._connection = None
        conn = self.conn
        try:
            grant = await conn.authorizer.refresh(conn.caller(), None)
        except DisconnectError as exc:
            conn.disconnect(exc.disconnect)
            return
        if grant.expired:
            conn.disconnect(codes.DISCONNECT_EXPIRED)
            return
        if grant.info is not None:
            conn.conn_info = grant.info
        if grant.meta is not None:
            conn.conn_meta = grant.meta
        self.connection(grant.expire_at)

    async def _sub_refresh(self, channel: str) -> None:
        self._subs.pop(channel, None)
        conn = self.conn
        sub = conn.subscription(channel)
        if sub is None:
            return
        try:
            grant = await conn.authorizer.sub_refresh(conn.caller(), SubRefreshRequest(channel, ""))
        except DisconnectError as exc:
            conn.disconnect(exc.disconnect)
            return
        if grant is None or grant.expired:
            await conn.unsubscribe(channel, codes.UNSUBSCRIBE_EXPIRED)
            return
        if grant.info is not None:
            conn.update_channel_info(sub, grant.info)
        self.subscription(channel, grant.expire_at)
