"""The broker of the memory engine shared by the workers of one ``taskcast gateway --workers N``:
one ``MemoryBroker`` + ``MemoryPresence`` in the supervisor process, served over a Unix socket
to every worker (gateway/engine/shared_memory.py is the worker side, gateway/engine/shared_wire.py
the bytes).

Semantics are the memory engine's, unchanged, because there is still exactly one of it: a
publish appends to the one history and is delivered to every worker subscribed to the channel
in the same step (``MemoryBroker.publish`` does not await), so offsets and epochs are the same
whichever worker a client lands on. Per worker connection, events and replies leave in the order
they happened: a worker sees its own publication before the publish reply, as with one process.

A worker that stops reading (SIGSTOP, a wedged loop) is disconnected once its unsent bytes pass
``PEER_BUFFER_LIMIT_BYTES`` (Redis's ``client-output-buffer-limit pubsub`` does the same); it
reconnects and checks its positioned subscriptions, as after a Redis reconnect. Must not import
starlette or redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gateway.engine import shared_wire as wire
from gateway.engine.map_memory import MemoryMapBroker
from gateway.engine.map_shared import POSITION_LOST
from gateway.engine.memory import MemoryBroker, MemoryPresence
from gateway.maps.state import PositionLost
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition

log = logging.getLogger("taskcast.gateway.workers.broker")

PEER_BUFFER_LIMIT_BYTES = 256 << 20
"""Unsent bytes to one worker past which it is disconnected (it reconnects and recovers)."""


class _Peer:
    """One worker's connection: the channels it subscribed and its node id."""

    __slots__ = ("channels", "closed", "node_id", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.channels: set[str] = set()
        self.node_id = ""
        self.closed = False

    def send(self, message: list[Any]) -> None:
        if self.closed:
            return
        transport = self.writer.transport
        if transport.get_write_buffer_size() > PEER_BUFFER_LIMIT_BYTES:
            log.warning("shared engine: worker %s is not reading; disconnecting it", self.node_id or "?")
            self.closed = True
            transport.abort()
            return
        self.writer.write(wire.encode(message))


class BrokerServer:
    """Serves one memory engine on ``path`` until cancelled (``run``).

    Args:
        path: The Unix socket (created in a directory only this user can enter).
        presence_ttl_seconds: ``engine.redis.presence_ttl``, as for one process.
        now: Monotonic clock of the engine's expiries (tests inject one).
    """

    def __init__(
        self, path: Path, *, presence_ttl_seconds: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.broker = MemoryBroker(now=now)
        self.maps = MemoryMapBroker(now=now)
        self.maps.set_handler(self)  # map changes fan out to the workers like publications
        self.presence = MemoryPresence(ttl_seconds=presence_ttl_seconds, now=now)
        self.broker.set_handler(self)
        self._subs: dict[str, set[_Peer]] = {}
        self._peers: set[_Peer] = set()
        self.ready = asyncio.Event()

    # --- BrokerEventHandler: the one MemoryBroker delivers here; we fan out to the workers ----

    def on_publication(
        self, channel: str, pub: Publication, position: StreamPosition | None, write_now: bool = False
    ) -> None:
        message = ["p", channel, pub, position]
        for peer in tuple(self._subs.get(channel, ())):
            peer.send(message)

    def on_join(self, channel: str, info: ClientInfo) -> None:
        for peer in tuple(self._subs.get(channel, ())):
            peer.send(["j", channel, info])

    def on_leave(self, channel: str, info: ClientInfo) -> None:
        for peer in tuple(self._subs.get(channel, ())):
            peer.send(["l", channel, info])

    def on_control(self, data: bytes) -> None:
        self._control(data, "")

    def on_broker_reconnect(self) -> None:
        return None

    # --- serving -------------------------------------------------------------------------------

    async def run(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        os.chmod(self.path, 0o600)
        try:
            async with server, asyncio.TaskGroup() as tg:
                tg.create_task(self.broker.run())
                tg.create_task(self.maps.run())
                tg.create_task(self.presence.run())
                self.ready.set()
                await server.serve_forever()
        finally:
            for peer in list(self._peers):
                peer.writer.transport.abort()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(writer)
        self._peers.add(peer)
        try:
            while not peer.closed:
                header = await reader.readexactly(wire.HEADER_BYTES)
                body = await reader.readexactly(wire.body_length(header))
                request = wire.decode(body)
                rid, op, args = request[0], request[1], request[2:]
                try:
                    value = await self._dispatch(peer, str(op), args)
                except (TypeError, ValueError, KeyError, IndexError) as exc:
                    peer.send(["e", rid, f"{op}: {type(exc).__name__}: {exc}"])
                else:
                    peer.send(["r", rid, value])
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except wire.WireError as exc:
            log.warning("shared engine: dropping a worker connection: %s", exc)
        finally:
            writer.transport.abort()
            await self._drop(peer)

    async def _drop(self, peer: _Peer) -> None:
        peer.closed = True
        self._peers.discard(peer)
        channels, peer.channels = peer.channels, set()
        for channel in channels:
            await self._unsubscribe(peer, channel)

    async def _unsubscribe(self, peer: _Peer, channel: str) -> None:
        subs = self._subs.get(channel)
        if subs is None:
            return
        subs.discard(peer)
        if not subs:
            del self._subs[channel]
            await self.broker.unsubscribe(channel)

    def _control(self, data: bytes, node_id: str) -> None:
        for peer in tuple(self._peers):
            if not node_id or peer.node_id == node_id:
                peer.send(["c", data])

    async def _dispatch(self, peer: _Peer, op: str, args: list[Any]) -> Any:
        broker, presence = self.broker, self.presence
        if op == "publish":
            channel, pub, history, key, key_ttl, version, version_epoch = args
            return await broker.publish(
                channel,
                pub,
                history,
                idempotency_key=key,
                idempotent_result_ttl_seconds=key_ttl,
                version=version,
                version_epoch=version_epoch,
            )
        if op == "history":
            channel, history, since, limit, reverse = args
            return await broker.history(channel, history, since=since, limit=limit, reverse=reverse)
        if op == "subscribe":
            (channel,) = args
            self._subs.setdefault(channel, set()).add(peer)
            peer.channels.add(channel)
            await broker.subscribe(channel)
            return None
        if op == "unsubscribe":
            (channel,) = args
            peer.channels.discard(channel)
            await self._unsubscribe(peer, channel)
            return None
        if op == "join":
            await broker.publish_join(*args)
            return None
        if op == "leave":
            await broker.publish_leave(*args)
            return None
        if op == "remove_history":
            await broker.remove_history(*args)
            return None
        if op == "control":
            data, node_id = args
            self._control(data, node_id)
            return None
        if op == "node":
            (peer.node_id,) = args
            return None
        if op == "presence_add":
            await presence.add(*args)
            return None
        if op == "presence_remove":
            await presence.remove(*args)
            return None
        if op == "presence":
            found: Mapping[str, ClientInfo] = await presence.presence(*args)
            return dict(found)
        if op == "presence_stats":
            return await presence.stats(*args)
        if op.startswith("map_"):
            return await self._map(op, args)
        raise ValueError(f"unknown operation {op!r}")

    async def _map(self, op: str, args: list[Any]) -> Any:
        """A map engine operation (gateway/engine/map_shared.py); ``POSITION_LOST`` answers a
        read at a lost position."""
        maps = self.maps
        try:
            if op == "map_publish":
                return await maps.publish(*args)
            if op == "map_remove":
                channel, key, opts, idempotency_key = args
                return await maps.remove(channel, key, opts, idempotency_key=idempotency_key)
            if op == "map_state":
                channel, opts, cursor, limit, revision, key = args
                return await maps.read_state(
                    channel, opts, cursor=cursor, limit=limit, revision=revision, key=key
                )
            if op == "map_stream":
                channel, opts, since, limit, reverse = args
                return await maps.read_stream(channel, opts, since=since, limit=limit, reverse=reverse)
            if op == "map_stats":
                return await maps.stats(*args)
            if op == "map_clear":
                await maps.clear(*args)
                return None
        except PositionLost:
            return POSITION_LOST
        raise ValueError(f"unknown operation {op!r}")
