"""The memory engine as seen from one worker of ``taskcast gateway --workers N``:
``SharedMemoryBroker`` and ``SharedMemoryPresence`` forward every call over a Unix socket to the
one ``MemoryBroker`` / ``MemoryPresence`` in the supervisor (gateway/engine/shared_server.py).

So history, epochs, offsets, idempotency and presence are the memory engine's, shared by all
workers: a client recovering on another worker gets the same offsets, a publish on any worker
reaches subscribers on every worker, and the cluster's control messages (server API user
operations, emulation routing, node heartbeats) travel between workers as between nodes.

The link reconnects on its own (full-jitter backoff); while it is down calls raise
``EngineError`` (error 100 to clients, ``/health`` 503), and after a reconnect the channels are
re-subscribed and the handler's ``on_broker_reconnect`` runs (deliveries may have been lost),
as on the Redis engine. Must not import starlette or redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gateway.engine import shared_wire as wire
from gateway.engine.base import (
    BrokerEventHandler,
    EngineError,
    HistoryOptions,
    HistoryResult,
    PresenceStats,
    PublishResult,
)
from gateway.engine.failures import FailureRun
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.engine.shared")

CALL_TIMEOUT_SECONDS = 5.0
"""Bound on one call (and on waiting for the link to come up) before ``EngineError``."""
RECONNECT_BACKOFF_SECONDS = (0.05, 2.0)


class _Link:
    """One connection to the broker: numbered requests, replies matched to them, events handed
    to ``on_event`` in arrival order. ``run`` owns the connection and its reconnects."""

    def __init__(
        self,
        path: Path,
        on_event: Callable[[list[Any]], None],
        on_connected: Callable[[bool], Any],
        name: str,
    ) -> None:
        self.path = path
        self._on_event = on_event
        self._on_connected = on_connected
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self.up = asyncio.Event()
        self._failures = FailureRun(f"shared engine {name} {path}", log)

    async def run(self) -> None:
        first = True
        attempt = 0
        base, cap = RECONNECT_BACKOFF_SECONDS
        while True:
            if attempt:
                await asyncio.sleep(random.uniform(0, min(cap, base * 2 ** min(attempt, 16))))
            attempt += 1
            try:
                reader, writer = await asyncio.open_unix_connection(str(self.path))
            except OSError as exc:
                raise_if_cancelling(exc)
                self._failures.failed(f"connect: {exc}")
                continue
            self._writer = writer
            try:
                async with asyncio.TaskGroup() as tg:
                    reading = tg.create_task(self._read(reader))
                    await self._on_connected(first)
                    first = False
                    attempt = 0
                    self.up.set()
                    self._failures.succeeded()
                    await reading
            except* (OSError, EngineError, wire.WireError, asyncio.IncompleteReadError) as group:
                raise_if_cancelling(group)  # a child's error can replace the group's cancellation
                self._failures.failed(f"link lost: {group.exceptions[0]!r}")
            finally:
                self.up.clear()
                self._writer = None
                writer.transport.abort()
                self._fail_pending()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        pending = self._pending
        on_event = self._on_event
        while True:
            header = await reader.readexactly(wire.HEADER_BYTES)
            message = wire.decode(await reader.readexactly(wire.body_length(header)))
            kind = message[0]
            if kind == "r" or kind == "e":
                future = pending.pop(message[1], None)
                if future is not None and not future.done():
                    if kind == "r":
                        future.set_result(message[2])
                    else:
                        future.set_exception(EngineError(f"shared engine: {message[2]}"))
            else:
                on_event(message)

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(EngineError("shared engine: link lost"))

    async def call(self, op: str, *args: Any, during_connect: bool = False) -> Any:
        """One request; its reply value.

        Raises:
            EngineError: the link is down (longer than ``CALL_TIMEOUT_SECONDS``), lost during
                the call, or the broker refused the request.
        """
        try:
            async with asyncio.timeout(CALL_TIMEOUT_SECONDS):
                if not during_connect:
                    await self.up.wait()
                writer = self._writer
                if writer is None:
                    raise EngineError("shared engine: link down")
                rid = next(self._ids)
                frame = wire.encode([rid, op, *args])
                future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self._pending[rid] = future
                writer.write(frame)
                try:
                    return await future
                finally:
                    self._pending.pop(rid, None)
        except TimeoutError as exc:
            raise EngineError(f"shared engine: {op} timed out") from exc

    def close(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()


class SharedMemoryBroker:
    """A ``Broker`` forwarding to the supervisor's ``MemoryBroker`` (see the module docstring).

    Args:
        path: The supervisor's broker socket.
    """

    def __init__(self, path: Path) -> None:
        self._link = _Link(path, self._event, self._connected, "broker")
        self._handler: BrokerEventHandler | None = None
        self._channels: set[str] = set()
        self.node_id = ""
        self._handling = FailureRun("shared engine: handler", log)

    def set_node_id(self, node_id: str) -> None:
        """Use the node's uid for targeted control messages. Call before ``run``."""
        self.node_id = node_id

    async def call(self, op: str, *args: Any) -> Any:
        """One request to the supervisor's engine over this link (the map engine's,
        gateway/engine/map_shared.py); its reply value.

        Raises:
            EngineError: as every call on the link.
        """
        return await self._link.call(op, *args)

    def set_handler(self, handler: BrokerEventHandler) -> None:
        self._handler = handler

    async def _connected(self, first: bool) -> None:
        call = self._link.call
        await call("node", self.node_id, during_connect=True)
        for channel in list(self._channels):
            await call("subscribe", channel, during_connect=True)
        if not first and self._handler is not None:
            self._handler.on_broker_reconnect()

    def _event(self, message: list[Any]) -> None:
        handler = self._handler
        if handler is None:
            return
        kind = message[0]
        try:
            if kind == "p":
                handler.on_publication(message[1], message[2], message[3])
            elif kind == "j":
                handler.on_join(message[1], message[2])
            elif kind == "l":
                handler.on_leave(message[1], message[2])
            elif kind == "c":
                handler.on_control(message[1])
        except Exception as exc:
            self._handling.failed(f"{kind} event: {type(exc).__name__}: {exc}", exc)
        else:
            self._handling.succeeded()

    async def run(self) -> None:
        await self._link.run()

    async def publish(
        self,
        channel: str,
        pub: Publication,
        history: HistoryOptions,
        *,
        idempotency_key: str = "",
        idempotent_result_ttl_seconds: float = 300.0,
        version: int = 0,
        version_epoch: str = "",
    ) -> PublishResult:
        result: PublishResult = await self._link.call(
            "publish",
            channel,
            pub,
            history,
            idempotency_key,
            idempotent_result_ttl_seconds,
            version,
            version_epoch,
        )
        return result

    async def publish_join(self, channel: str, info: ClientInfo) -> None:
        await self._link.call("join", channel, info)

    async def publish_leave(self, channel: str, info: ClientInfo) -> None:
        await self._link.call("leave", channel, info)

    async def history(
        self,
        channel: str,
        history: HistoryOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult:
        result: HistoryResult = await self._link.call("history", channel, history, since, limit, reverse)
        return result

    async def remove_history(self, channel: str) -> None:
        await self._link.call("remove_history", channel)

    async def publish_control(self, data: bytes, *, node_id: str = "") -> None:
        await self._link.call("control", data, node_id)

    def healthy(self) -> bool:
        return self._link.up.is_set()

    async def subscribe(self, channel: str) -> None:
        self._channels.add(channel)
        await self._link.call("subscribe", channel)

    async def unsubscribe(self, channel: str) -> None:
        self._channels.discard(channel)
        with contextlib.suppress(EngineError):
            await self._link.call("unsubscribe", channel)

    async def close(self) -> None:
        self._handler = None
        self._link.close()


class SharedMemoryPresence:
    """A ``PresenceManager`` forwarding to the supervisor's ``MemoryPresence``: presence is the
    whole machine's, whichever worker holds a connection."""

    def __init__(self, path: Path) -> None:
        self._link = _Link(path, lambda _: None, self._connected, "presence")

    @staticmethod
    async def _connected(_: bool) -> None:
        return None

    async def run(self) -> None:
        await self._link.run()

    def healthy(self) -> bool:
        """Whether the link to the broker is up."""
        return self._link.up.is_set()

    async def add(self, channel: str, client_id: str, info: ClientInfo) -> None:
        await self._link.call("presence_add", channel, client_id, info)

    async def remove(self, channel: str, client_id: str) -> None:
        await self._link.call("presence_remove", channel, client_id)

    async def presence(self, channel: str) -> Mapping[str, ClientInfo]:
        found: dict[str, ClientInfo] = await self._link.call("presence", channel)
        return found

    async def stats(self, channel: str) -> PresenceStats:
        stats: PresenceStats = await self._link.call("presence_stats", channel)
        return stats

    async def close(self) -> None:
        self._link.close()
