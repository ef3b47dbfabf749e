"""The node: publishes through the Broker, receives the Broker's deliveries and hands them to
the Hub, and keeps this node's broker subscriptions in step with local subscribers.

"Hub add + broker subscribe" of a channel is one awaited step that every concurrent joiner
shares (``add_subscriber``): the first joiner starts the channel's broker subscription, later
joiners await the same in-flight call, and a failure fails all of them — no subscriber is ever
told "subscribed" while the broker link of its channel is missing. Broker subscribe and
unsubscribe of one channel are serialized (an unsubscribe waits for the subscribe in flight, a
new subscribe waits for the unsubscribe in flight), as centrifuge's per-channel lock does.

Where subscriptions start and the checks of live ones against their stream tops are
gateway/positions.py's (``Node.positions``), over the node's history reads. Owns no connection
logic (gateway/connection/client.py), no output scheduling and no HTTP
(gateway/api/executor.py). The fast paths of the engines (inline publishes on the memory engine,
one round trip per run on Redis) are taken here, behind the engine seam: callers publish
``PublishItem``s and do not ask which engine they run on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypedDict, Unpack

from gateway.cleanup import EXPECTED, Cleanup
from gateway.cluster import Cluster
from gateway.config.schema import ChannelOptions, Settings
from gateway.conflation import conflation_key
from gateway.engine.base import (
    BatchBroker,
    Broker,
    EngineError,
    HistoryOptions,
    HistoryResult,
    InlineBroker,
    PresenceManager,
    PublishItem,
    PublishResult,
)
from gateway.engine.map_base import MapBroker
from gateway.hub import Connection, Hub
from gateway.metrics import Metrics
from gateway.positions import Positions
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition
from gateway.sharedpoll.manager import SharedPollManager
from gateway.webhooks.hooks import NO_HOOKS, LifecycleHooks

VERSION = "0.1.0"

NO_HISTORY = HistoryOptions()

PUBLISH_SLICE = 128
"""Publications ``publish_many`` publishes back to back on an engine that publishes inline
before it lets the loop serve others."""


class PublishOptions(TypedDict, total=False):
    """The options of one publish (``Node.publish`` / ``Node.publish_item``); absent = default."""

    info: ClientInfo | None
    """The publisher's client info (client-side publishes)."""
    tags: dict[str, str] | None
    skip_history: bool
    idempotency_key: str
    version: int
    version_epoch: str
    delta: bool
    """Delta-compress for subscribers that negotiated it (or the namespace's ``delta_publish``)."""


class PublishRun:
    """Consecutive publications published with the engine's cheapest path, in order: ``add``
    publishes at once on an engine that publishes inline and returns the result (nothing is held
    back); on any other engine it returns None and the item waits for ``flush``, which publishes
    every waiting item with ``Node.publish_many`` (one round trip on an engine that batches).

    Raises (``add``):
        EngineError: the inline publish failed.
    """

    __slots__ = ("_action", "_inline", "_node", "_waiting")

    def __init__(self, node: Node) -> None:
        self._node = node
        self._inline = node._inline
        self._action = node.metrics.action
        self._waiting: list[PublishItem] = []

    def add(self, item: PublishItem) -> PublishResult | None:
        inline = self._inline
        if inline is None:
            self._waiting.append(item)
            return None
        result = inline.publish_now(item)
        self._action("publish", item.channel)
        return result

    async def flush(self) -> list[PublishResult | EngineError]:
        """Publish the waiting items (the result of each, in ``add`` order); never raises
        ``EngineError``."""
        items, self._waiting = self._waiting, []
        return await self._node.publish_many(items) if items else []


log = logging.getLogger("taskcast.gateway.node")


class Node:
    """One gateway process in a (possibly single-node) cluster."""

    def __init__(
        self,
        settings: Settings,
        broker: Broker,
        presence: PresenceManager,
        metrics: Metrics,
        *,
        name: str,
        clock: Callable[[], float] = time.time,
        codec: Codec = JSON,
    ) -> None:
        self.settings = settings
        self.broker = broker
        self.presence = presence
        self.metrics = metrics
        self.hub = Hub(codec)
        self.uid = str(uuid.uuid4())
        self.name = name
        self.clock = clock
        self.started_at = clock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.cleanup = Cleanup(
            logging.getLogger("taskcast.gateway.cleanup"), expected=(EngineError, *EXPECTED)
        )
        """Runs the release steps of connections and subscriptions (hub, broker, presence, leave):
        each one runs whatever the others did, failures logged once per step and interval."""
        self._links: dict[str, asyncio.Future[None]] = {}
        """Per channel with local subscribers: its broker subscription in flight (a task), failed
        (that task), or done (``_linked``, one finished future shared by every such channel)."""
        self._linked: asyncio.Future[None] | None = None
        self._unlinks: dict[str, asyncio.Task[None]] = {}
        """Per channel: a broker unsubscribe in flight."""
        self._history_options: dict[int, tuple[ChannelOptions, HistoryOptions]] = {}
        self.connecting: set[object] = set()
        """Connections whose transport is open but whose connect has not completed."""
        self._inline: InlineBroker | None = (
            broker if isinstance(broker, InlineBroker) and broker.publishes_inline else None
        )
        """The broker, when it publishes inline (``InlineBroker``); publishes then take its
        synchronous ``publish_now``."""
        self._batching: BatchBroker | None = broker if isinstance(broker, BatchBroker) else None
        """The broker, when it publishes many in one call (``BatchBroker``): asked once, as a
        runtime protocol check costs microseconds."""
        self.maps: MapBroker | None = None
        """Map channels' state and streams (``attach_maps``); None: map subscriptions refused (108)."""
        self.cluster = Cluster(uid=self.uid, broker=broker, hub=self.hub, clock=clock, info=self.info)
        """The control channel: node registry, surveys, user-ops and routed emulation commands."""
        self.shared_poll: SharedPollManager | None = None
        """Shared-poll channels (gateway/sharedpoll/), set by the composition root."""
        self.lifecycle: LifecycleHooks = NO_HOOKS
        """Told of connections, subscriptions and this node's channels as they come and go."""
        self.positions = Positions(self, self.hub, settings, metrics, clock, self.background)
        """Where new subscriptions start; whether live ones kept up with their streams."""
        self._last_pub_at = self.positions.last_pub_at  # written per delivery
        broker.set_handler(self)

    def attach_maps(self, maps: MapBroker) -> None:
        """Keep map channels in ``maps``; their changes reach this node's subscribers here."""
        self.maps = maps
        maps.set_handler(self)

    def background(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run cleanup work that outlives a connection; owned here and awaited by ``drain``."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, EngineError):
            # The engine logs its failures once per state change: no traceback per task.
            log.debug("background task failed: %s", exc)
        elif exc is not None:
            log.warning("background task failed", exc_info=exc)

    async def presence_loop(self) -> None:
        """Every ``client.presence_update_interval``, each connection re-adds its presence entries
        (a lifespan loop of the composition root)."""
        interval = self.settings.client.presence_update_interval
        while True:
            await asyncio.sleep(interval)
            for conn in list(self.hub.clients.values()):
                conn.presence_tick()

    async def drain(self) -> None:
        """Wait for background cleanup (used at shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- options -----------------------------------------------------------------------------

    def history_options(self, opts: ChannelOptions) -> HistoryOptions:
        """The engine's history settings of a namespace (built once per options object: the
        settings are immutable and hold every ``ChannelOptions`` for the process lifetime)."""
        cached = self._history_options.get(id(opts))
        if cached is not None and cached[0] is opts:
            return cached[1]
        meta_ttl = opts.history_meta_ttl or self.settings.channel.history_meta_ttl
        history = HistoryOptions(opts.history_size, opts.history_ttl, meta_ttl)
        if len(self._history_options) >= 1024:  # options built outside the settings (tests)
            self._history_options.clear()
        self._history_options[id(opts)] = (opts, history)
        return history

    # --- BrokerEventHandler --------------------------------------------------------------------

    def on_publication(
        self, channel: str, pub: Publication, position: StreamPosition | None, write_now: bool = False
    ) -> None:
        if position is not None:
            self._last_pub_at[channel] = self.clock()
        conflation = None
        if pub.tags:
            opts = self.settings.channel_options(channel)
            if opts is not None and opts.conflation_tag:
                conflation = conflation_key(channel, pub.tags, opts.conflation_tag)
        n = self.hub.broadcast_publication(
            channel, pub, position.epoch if position else "", conflation, write_now=write_now
        )
        self.metrics.messages_sent(channel, n)
        if pub.time:
            self.metrics.observe_pub_lag(max(0.0, self.clock() - pub.time / 1000.0))

    def on_join(self, channel: str, info: ClientInfo) -> None:
        self.hub.broadcast_join_leave(channel, "join", info)

    def on_leave(self, channel: str, info: ClientInfo) -> None:
        self.hub.broadcast_join_leave(channel, "leave", info)

    def on_control(self, data: bytes) -> None:
        self.cluster.on_control(data)

    def on_broker_reconnect(self) -> None:
        self.positions.after_broker_reconnect()

    # --- operations --------------------------------------------------------------------------

    @property
    def publishes_inline(self) -> bool:
        """Whether a publish completes without suspending on this node's engine (the memory
        engine): a server API publish may then run outside any task."""
        return self._inline is not None

    async def publish(
        self, channel: str, opts: ChannelOptions, data: bytes, **options: Unpack[PublishOptions]
    ) -> PublishResult:
        """Publish ``data`` to ``channel`` (``options``: ``PublishOptions``)."""
        return await self.publish_prepared(self.publish_item(channel, opts, data, **options))

    async def publish_prepared(self, item: PublishItem) -> PublishResult:
        """``publish`` of an item ``publish_item`` built. On an engine that publishes inline
        (``publishes_inline``) this completes without suspending."""
        inline = self._inline
        if inline is not None:
            result = inline.publish_now(item)
        else:
            result = await self.broker.publish(
                item.channel,
                item.pub,
                item.history,
                idempotency_key=item.idempotency_key,
                version=item.version,
                version_epoch=item.version_epoch,
            )
        self.metrics.action("publish", item.channel)
        return result

    def publish_item(
        self,
        channel: str,
        opts: ChannelOptions,
        data: bytes,
        *,
        write_now: bool = False,
        **options: Unpack[PublishOptions],
    ) -> PublishItem:
        """What ``publish`` publishes, prepared (for ``publish_prepared`` and ``publish_many``).
        ``write_now``: the publication is alone in its loop tick (``PublishItem.write_now``)."""
        if not options:  # the common case: positional inits, no option lookups
            pub = Publication(data, 0, None, None, int(self.clock() * 1000), opts.delta_publish)
            return PublishItem(channel, pub, self.history_options(opts), write_now=write_now)
        history = NO_HISTORY if options.get("skip_history") else self.history_options(opts)
        delta = options.get("delta", False) or opts.delta_publish
        now = int(self.clock() * 1000)
        pub = Publication(data, 0, options.get("info"), options.get("tags") or None, now, delta)
        key, version = options.get("idempotency_key", ""), options.get("version", 0)
        return PublishItem(channel, pub, history, key, version, options.get("version_epoch", ""), write_now)

    async def publish_many(self, items: Sequence[PublishItem]) -> list[PublishResult | EngineError]:
        """``publish`` of every item, in order, with the engine's cheapest path: one round trip
        on an engine that batches (``BatchBroker.publish_many``); back to back without
        suspending on one that publishes inline, the loop served every ``PUBLISH_SLICE`` items;
        else one ``publish`` after another. One result per item: its ``PublishResult`` or the
        ``EngineError`` it failed with; never raises ``EngineError``."""
        results: list[PublishResult | EngineError]
        inline = self._inline
        action = self.metrics.action
        if inline is not None:
            results = []
            append = results.append
            for n, item in enumerate(items):
                if n and n % PUBLISH_SLICE == 0:
                    await asyncio.sleep(0)
                append(inline.publish_now(item))
                action("publish", item.channel)
            return results
        batching = self._batching
        if batching is not None:
            results = await batching.publish_many(items)
        else:
            results = []
            for item in items:
                try:
                    results.append(await self.publish_prepared(item))
                except EngineError as exc:
                    results.append(exc)
            return results  # counted by publish_prepared
        for item in items:
            action("publish", item.channel)
        return results

    def publish_run(self) -> PublishRun:
        """A run of publications (one sequential server API batch's consecutive publishes)."""
        return PublishRun(self)

    async def history(
        self,
        channel: str,
        opts: ChannelOptions,
        *,
        since: StreamPosition | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> HistoryResult:
        self.metrics.action("history", channel)
        return await self.broker.history(
            channel, self.history_options(opts), since=since, limit=limit, reverse=reverse
        )

    async def add_subscriber(self, channel: str, client: Connection) -> None:
        """Register a local subscriber and make sure the broker delivers the channel here.

        The hub registration comes first, so no publication is missed while the broker
        subscription is being set up (the client buffers until its reply is written). Every
        joiner awaits the channel's one broker subscription: the first joiner starts it,
        concurrent joiners share it. A joiner that arrives after a failed attempt starts a
        new one.

        Raises:
            Exception: the broker subscription failed (every joiner waiting for it gets the
                error); the joiner is no longer registered when this raises.
        """
        if self.hub.add_subscriber(channel, client):
            self.lifecycle.occupied_here(channel)
        link = self._links.get(channel)
        if link is None or (link.done() and (link.cancelled() or link.exception() is not None)):
            link = self._links[channel] = self._own(self._link(channel, self._unlinks.get(channel)))
            link.add_done_callback(lambda task: self._settle_link(channel, task))
        try:
            # Shielded: one joiner going away must not cancel the subscription others await.
            await asyncio.shield(link)
        except BaseException:
            await self.remove_subscriber(channel, client)
            raise

    async def remove_subscriber(self, channel: str, client: Connection) -> None:
        """Unregister a local subscriber; the last one out unsubscribes the broker (after any
        subscribe in flight, so the two never reorder)."""
        if not self.hub.remove_subscriber(channel, client):
            return
        self.lifecycle.vacated_here(channel)
        unlink = self._unlinks[channel] = self._own(self._unlink(channel, self._links.pop(channel, None)))
        await asyncio.shield(unlink)

    def _settle_link(self, channel: str, task: asyncio.Future[None]) -> None:
        """A broker subscription that succeeded is recorded by the shared finished future, not
        its task (a channel per connection: the task, its coroutine and context would stay
        for as long as the channel is occupied)."""
        if task.cancelled() or task.exception() is not None or self._links.get(channel) is not task:
            return
        linked = self._linked
        if linked is None:
            linked = self._linked = asyncio.get_running_loop().create_future()
            linked.set_result(None)
        self._links[channel] = linked

    async def _link(self, channel: str, unlink: asyncio.Task[None] | None) -> None:
        if unlink is not None:
            await asyncio.wait({unlink})
        await self.broker.subscribe(channel)

    async def _unlink(self, channel: str, link: asyncio.Future[None] | None) -> None:
        try:
            if link is not None:
                await asyncio.wait({link})
            await self.broker.unsubscribe(channel)
        finally:
            if self._unlinks.get(channel) is asyncio.current_task():
                del self._unlinks[channel]

    def _own(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A broker (un)subscribe task, owned by the node (awaited by ``drain``); its outcome
        belongs to whoever awaits it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._link_done)
        return task

    def _link_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the joiners that awaited it got (and handled) it

    def info(self) -> dict[str, Any]:
        """This node's entry in the server API ``info`` result."""
        hub = self.hub
        return {
            "uid": self.uid,
            "name": self.name,
            "version": VERSION,
            "num_clients": len(hub.clients),
            "num_users": len(hub.users),
            "num_channels": len(hub.channels),
            "num_subs": hub.num_subscriptions,
            "uptime": int(self.clock() - self.started_at),
        }
