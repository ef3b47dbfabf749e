"""``Webhooks``: the ``LifecycleHooks`` of a gateway with ``webhooks`` configured. Turns each hook
call into events for the webhooks that select them (type and channel namespace), encoded once and
offered to each one's bounded queue, and runs the occupancy loop that reports this node's
channel memberships to the ``OccupancyStore`` and emits ``channel_occupied`` / ``channel_vacated``
for the transitions the store decides here.

A hook call never awaits and never raises into the connection: the events go to the queues at
once, the occupancy changes to a pending table the loop sends (coalesced: a channel that was
joined and left between two updates reports only its last state, so a sub-millisecond
occupation is no transition). Must not import gateway/connection, the transports or the node.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence

import httpx

from gateway.config.schema import Settings
from gateway.engine.base import EngineError
from gateway.engine.failures import FailureRun
from gateway.protocol.codes import Disconnect
from gateway.protocol.messages import ClientInfo
from gateway.webhooks.delivery import WebhookSender
from gateway.webhooks.events import Event, EventType, Selection, encode
from gateway.webhooks.metrics import WebhookMetrics
from gateway.webhooks.store import OccupancyStore
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.webhooks")

_OCCUPANCY_TYPES = (EventType.CHANNEL_OCCUPIED, EventType.CHANNEL_VACATED)


class Webhooks:
    """Lifecycle webhooks of one node (``LifecycleHooks``).

    Args:
        settings: The gateway settings (``webhooks``, ``occupancy``, the namespaces).
        node: This node's uid (the events' ``node``, its occupancy membership).
        metrics: Registered on the gateway's registry.
        occupancy: Where occupancy is decided; None: no webhook selects occupancy events.
        http: The client the POSTs go through (owned: closed by ``close``).
        clock: Wall clock for event times and signature timestamps, seconds.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        node: str,
        metrics: WebhookMetrics,
        occupancy: OccupancyStore | None,
        http: httpx.AsyncClient,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self.node = node
        self._clock = clock
        self._http = http
        self.senders = [WebhookSender(hook, http, metrics, clock=clock) for hook in settings.webhooks]
        self.selection = Selection(settings.webhooks)
        self._wants = {t: self.selection.wants(t) for t in EventType}
        self._store = occupancy if any(self._wants[t] for t in _OCCUPANCY_TYPES) else None
        self._metrics = metrics
        self._pending: dict[str, bool] = {}
        """channel -> whether this node holds it now, not yet sent to the store."""
        self._held: set[str] = set()
        """The channels this node holds (what a reset sends)."""
        self._wake = asyncio.Event()
        self._failures = FailureRun("webhook occupancy", log, level=logging.WARNING)

    @staticmethod
    def needs_occupancy(settings: Settings) -> bool:
        """Whether any webhook selects ``channel_occupied`` or ``channel_vacated``."""
        selection = Selection(settings.webhooks)
        return any(selection.wants(t) for t in _OCCUPANCY_TYPES)

    # --- events --------------------------------------------------------------------------------

    def _namespace(self, channel: str) -> str | None:
        opts = self._settings.channel_options(channel)
        return None if opts is None else opts.name

    def _emit(
        self,
        type: EventType,
        channel: str = "",
        info: ClientInfo | None = None,
        *,
        transport: str = "",
        code: int = 0,
        reason: str = "",
    ) -> None:
        if not self._wants[type]:
            return
        if channel:
            namespace = self._namespace(channel)
            if namespace is None:
                return
            targets = self.selection.targets(type, namespace)
        else:
            targets = self.selection.targets(type, "")
        if not targets:
            return
        event = Event(
            id=os.urandom(16).hex(),
            type=type,
            time_ms=int(self._clock() * 1000),
            node=self.node,
            channel=channel,
            client=info.client if info else "",
            user=info.user if info else "",
            conn_info=info.conn_info if info else None,
            chan_info=info.chan_info if info else None,
            transport=transport,
            code=code,
            reason=reason,
        )
        payload = encode(event)
        for index in targets:
            self.senders[index].offer(payload)

    def connected(self, info: ClientInfo, transport: str) -> None:
        self._emit(EventType.CONNECT, info=info, transport=transport)

    def disconnected(self, info: ClientInfo, disconnect: Disconnect) -> None:
        self._emit(EventType.DISCONNECT, info=info, code=disconnect.code, reason=disconnect.reason)

    def subscribed(self, channel: str, info: ClientInfo, presence: bool) -> None:
        self._emit(EventType.SUBSCRIBE, channel, info)
        if presence:
            self._emit(EventType.PRESENCE_JOIN, channel, info)

    def unsubscribed(self, channel: str, info: ClientInfo, presence: bool) -> None:
        if presence:
            self._emit(EventType.PRESENCE_LEAVE, channel, info)
        self._emit(EventType.UNSUBSCRIBE, channel, info)

    def occupied_here(self, channel: str) -> None:
        self._local(channel, True)

    def vacated_here(self, channel: str) -> None:
        self._local(channel, False)

    def _local(self, channel: str, held: bool) -> None:
        if self._store is None:
            return
        namespace = self._namespace(channel)
        if namespace is None or not any(self.selection.targets(t, namespace) for t in _OCCUPANCY_TYPES):
            return
        if held:
            self._held.add(channel)
        else:
            self._held.discard(channel)
        self._pending[channel] = held
        self._wake.set()

    # --- background ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Every sender's delivery loop and the occupancy loop, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for sender in self.senders:
                tg.create_task(sender.run())
            if self._store is not None:
                tg.create_task(self._occupancy_loop(self._store))

    async def _occupancy_loop(self, store: OccupancyStore) -> None:
        interval = self._settings.occupancy.sweep_interval
        reset = True
        while True:
            changes: Sequence[tuple[str, bool]]
            if reset:
                self._pending.clear()
                changes = [(channel, True) for channel in self._held]
            else:
                changes, self._pending = list(self._pending.items()), {}
            try:
                result = await store.update(self.node, changes, reset=reset)
            except Exception as exc:  # a task boundary: an engine outage or a bug, never fatal
                raise_if_cancelling()
                self._metrics.occupancy_errors.inc()
                self._failures.failed(str(exc), None if isinstance(exc, EngineError) else exc)
                reset = True
                await asyncio.sleep(interval)
                continue
            if result is None:  # the store forgot this node: send the whole membership
                reset = True
                continue
            reset = False
            self._failures.succeeded()
            for channel in result.occupied:
                self._emit(EventType.CHANNEL_OCCUPIED, channel)
            for channel in result.vacated:
                self._emit(EventType.CHANNEL_VACATED, channel)
            self._wake.clear()
            if not self._pending:
                try:
                    async with asyncio.timeout(interval):
                        await self._wake.wait()
                except TimeoutError:
                    raise_if_cancelling()

    async def close(self) -> None:
        """At shutdown (after the connections are gone): this node retires from occupancy, then
        each queue gets one last bounded delivery attempt."""
        if self._store is not None:
            try:
                async with asyncio.timeout(self._settings.occupancy.sweep_interval + 1.0):
                    await self._store.retire(self.node)
            except (EngineError, TimeoutError) as exc:
                log.info("occupancy not retired at shutdown: %s", exc)
            await self._store.close()
        for sender in self.senders:
            await sender.flush()
        await self._http.aclose()


__all__ = ["Webhooks"]
