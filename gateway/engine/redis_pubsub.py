"""``PubSubListener``: the PUB/SUB connection of one Redis shard, for ``RedisBroker``.

One connection per shard, read by one task, so a channel's deliveries arrive in offset order. It
(re)connects with the broker's backoff, subscribes this node's channel (and, on shard 0, the
control channel) and every channel subscribed on it, in bounded batches while confirmations are
read (a large resubscribe progresses as fast as Redis reads it, with no one deadline for all of
it), then reads and hands each message to its ``Receiver``. A connection that hears nothing (no
probe, no publication) for the broker's ``probe_timeout_seconds`` is torn down and rebuilt,
noticed within ``SILENCE_SLACK`` of a timeout more (reliability-notes §1.5); after a rebuild the
receiver is told (``reconnected``) once every channel is subscribed again.

Knows the broker only as a ``Receiver``; imports no other engine module but the shard, the key
names and the codec's probe marker. Must not import starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Protocol

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from gateway.engine.base import EngineError
from gateway.engine.failures import FailureRun
from gateway.engine.redis import RedisShard
from gateway.engine.redis_codec import PROBE
from gateway.engine.redis_keys import RedisKeys
from httpwire.cancellation import raise_if_cancelling

logger = logging.getLogger("gateway.engine.redis_broker")

SUBSCRIBE_BATCH = 512
SUBSCRIBE_WINDOW = 2 * SUBSCRIBE_BATCH
"""Most channels a (re)subscribing PUB/SUB connection has asked for and Redis not yet confirmed."""
SILENCE_SLACK = 0.25
"""A deaf PUB/SUB connection is noticed after a silence of between 1 and 1 + this many probe
timeouts."""

__all__ = ["SILENCE_SLACK", "SUBSCRIBE_BATCH", "SUBSCRIBE_WINDOW", "PubSubListener", "Receiver"]


class Receiver(Protocol):
    """What a listener needs of its broker: the key names and this node's id (its own channel),
    the silence after which a connection is deaf, the reconnect backoff, and where messages go:
    ``deliver`` a channel's message, ``control`` a control-channel message (anything on a name
    not subscribed as a channel, probes excepted), ``reconnected`` after a rebuild."""

    keys: RedisKeys
    node_id: str
    probe_timeout_seconds: float

    def backoff(self, attempt: int) -> float: ...

    def deliver(self, channel: str, message: bytes) -> None: ...

    def control(self, data: bytes) -> None: ...

    def reconnected(self) -> None: ...


class PubSubListener:
    """The PUB/SUB connection of one shard: (re)connects, subscribes, reads and dispatches."""

    def __init__(self, broker: Receiver, shard: RedisShard) -> None:
        self.broker = broker
        self.shard = shard
        self.channels: dict[bytes, str] = {}
        """PUB/SUB name of each subscribed channel -> the channel."""
        self.pending: dict[bytes, list[asyncio.Future[None]]] = {}
        self.conn: AbstractConnection | None = None
        self.ready = False
        self._awaiting: set[bytes] = set()
        """Names of the current (re)subscribe sent and not yet confirmed by Redis."""
        self._reconnected = False
        self.connects = 0
        self.failures = FailureRun(f"redis {shard.name} (PUB/SUB)", logger, level=logging.WARNING)

    def static_names(self) -> list[bytes]:
        keys = self.broker.keys
        names = [keys.node(self.broker.node_id).encode()]
        if self.shard.index == 0:
            names.append(keys.control.encode())
        return names

    async def run(self) -> None:
        attempt = 0
        while True:
            conn = self.shard.pubsub_connection()
            try:
                async with asyncio.timeout(self.shard.connect_timeout):
                    await conn.connect()  # type: ignore[no-untyped-call]  # unannotated in redis-py
                # No await between publishing the connection and taking the names: a concurrent
                # subscribe() either sees no connection (and is in the names) or sends itself.
                self.conn = conn
                names = [*self.static_names(), *self.channels]
                self._awaiting = set()
                self._reconnected = self.connects > 0
                self.connects += 1
                attempt = 0
                await self._read(conn, names)
            except (RedisError, OSError, TimeoutError, ValueError) as exc:
                raise_if_cancelling(exc)
                # Logged once per outage, not per reconnect attempt; the metric counts each.
                self.failures.failed(f"connection lost: {type(exc).__name__}: {exc}")
                self.shard.count_error("pubsub")
                self.shard.suspect()
            finally:
                self.conn = None
                self.ready = False
                with contextlib.suppress(Exception):
                    await conn.disconnect()
            await asyncio.sleep(self.broker.backoff(attempt))
            attempt += 1

    async def _read(self, conn: AbstractConnection, names: list[bytes]) -> None:
        """Subscribe ``names`` on the new connection ``conn``, then read and dispatch until it fails.

        SUBSCRIBE batches go out while confirmations are read (``_send_subscribes``), so a large
        resubscribe takes as long as Redis needs while it progresses; no one deadline covers it
        all. ``ready`` once Redis confirmed every name sent. Silence longer than the probe
        timeout means a deaf connection (§1.5): one deadline for the whole loop, at most
        ``SILENCE_SLACK`` timeouts past the last message and never less than a timeout after it.
        It moves only when a message finds less than a timeout left (once per slack of steady
        traffic, not once per message: a reschedule replaces the loop's timer).
        """
        loop = asyncio.get_running_loop()
        silence = self.broker.probe_timeout_seconds
        extended = silence * (1 + SILENCE_SLACK)
        static = set(self.static_names())
        async with asyncio.timeout(extended) as deadline:
            sent = await self._send_subscribes(conn, names, 0, static)
            while True:
                response = await conn.read_response(
                    timeout=math.inf, disconnect_on_error=False, push_request=True
                )
                now = loop.time()
                if (deadline.when() or now) - now < silence:
                    deadline.reschedule(now + extended)
                if not isinstance(response, list) or len(response) < 3:
                    continue
                kind = response[0]
                if kind == b"message":
                    self._message(response[1], response[2])
                elif kind == b"subscribe":
                    self._confirmed(response[1])
                    if not self.ready:
                        sent = await self._send_subscribes(conn, names, sent, static)
                        if sent == len(names) and not self._awaiting:
                            self._subscribed_all()

    async def _send_subscribes(
        self, conn: AbstractConnection, names: list[bytes], sent: int, static: set[bytes]
    ) -> int:
        """Send the SUBSCRIBE batches of ``names`` from index ``sent`` on while fewer than
        ``SUBSCRIBE_WINDOW`` names are unconfirmed, each batch within ``io_timeout``, skipping
        channels unsubscribed meanwhile; the new ``sent``."""
        while sent < len(names) and len(self._awaiting) < SUBSCRIBE_WINDOW:
            batch = [n for n in names[sent : sent + SUBSCRIBE_BATCH] if n in self.channels or n in static]
            sent = min(sent + SUBSCRIBE_BATCH, len(names))
            if batch:
                self._awaiting.update(batch)
                async with asyncio.timeout(self.shard.io_timeout):
                    await conn.send_command("SUBSCRIBE", *batch)
        return sent

    def _confirmed(self, name: bytes) -> None:
        for future in self.pending.pop(name, ()):
            if not future.done():
                future.set_result(None)
        self._awaiting.discard(name)

    def _subscribed_all(self) -> None:
        self.ready = True
        self.failures.succeeded()
        if self._reconnected:
            self._reconnected = False
            self.broker.reconnected()

    def _message(self, name: bytes, data: bytes) -> None:
        channel = self.channels.get(name)
        if channel is not None:
            self.broker.deliver(channel, data)
        elif not data.startswith(PROBE):
            self.broker.control(data)

    async def subscribe(self, name: bytes, channel: str) -> None:
        self.channels[name] = channel
        future = asyncio.get_running_loop().create_future()
        self.pending.setdefault(name, []).append(future)
        try:
            async with asyncio.timeout(self.shard.io_timeout):
                conn = self.conn
                if conn is not None:
                    with contextlib.suppress(RedisError, OSError):
                        # On failure the reader notices the broken connection and resubscribes.
                        await conn.send_command("SUBSCRIBE", name)
                await future
        except TimeoutError as exc:
            self.shard.count_error("subscribe")
            raise EngineError(f"redis {self.shard.name}: subscribe timed out") from exc
        finally:
            waiting = self.pending.get(name)
            if waiting is not None and future in waiting:
                waiting.remove(future)
                if not waiting:
                    del self.pending[name]

    async def unsubscribe(self, name: bytes) -> None:
        if self.channels.pop(name, None) is None:
            return
        conn = self.conn
        if conn is not None:
            # Best effort: a later message for it is dropped, a reconnect forgets it anyway.
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(self.shard.io_timeout):
                    await conn.send_command("UNSUBSCRIBE", name)

    async def close(self) -> None:
        conn = self.conn
        self.conn = None
        self.ready = False
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect()
