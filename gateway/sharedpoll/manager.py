"""The node's shared-poll channels: who tracks which key, the polls of the backend and the
fan-out of each key's change.

A channel's state (gateway/sharedpoll/state.py) lives while a connection of this node is
subscribed to it or tracks one of its keys, and ``channel_shutdown_delay`` after. While it has
keys, one task per channel asks the channel's ``shared_poll_refresh`` proxy every
``refresh_interval`` for all of them (``refresh_batch_size`` keys per call, at most
``shared_poll.concurrency_limit`` calls in flight on the node), however many connections track
them: that is the point of shared polling. A key tracked for the first time, or by a connection
that holds none of its data, is polled at once (its keys coalesced per loop tick) instead of at
the next interval. A change is encoded once per protocol and queued to every connection
tracking the key (an answer's changes ``FAN_OUT_SLICE`` keys per loop step); each connection
drops what is not newer than the version it holds.

``shared_poll_publish`` (server API; versioned mode with ``publish_enabled``) reaches every node
over the cluster's control channel (``send``) and is applied by each node that tracks the key.
The proxy request is ``{"channel", "items": [{"key", "version"}]}`` and its answer
``{"result": {"items": [{"key", "data", "version", "removed"}], "epoch"}}``, as Centrifugo's;
an answer that fails or cannot be read is logged (rate-limited) and the next interval asks
again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from prometheus_client import Histogram

from gateway.config.schema import ChannelOptions, Settings
from gateway.log_limit import LogLimiter
from gateway.metrics import Metrics
from gateway.protocol import codes
from gateway.protocol.codec import Codec
from gateway.protocol.jsonbytes import dumps_kept
from gateway.protocol.messages import KeyedPublication
from gateway.proxy.caller import Proxies, Proxy
from gateway.proxy.replies import ProxyFailure
from gateway.sharedpoll.state import Applied, ChannelState, RefreshItem
from httpwire.cancellation import raise_if_cancelling

__all__ = ["DEFAULTS", "SharedPollManager", "Tracker"]

log = logging.getLogger("taskcast.gateway.sharedpoll")
_limited = LogLimiter(log)

KIND = "shared_poll_refresh"
FAN_OUT_SLICE = 64
"""Keys of one answer fanned out per loop step."""


@dataclass(frozen=True, slots=True)
class _Defaults:
    refresh_interval: float = 10.0
    refresh_batch_size: int = 1000
    max_keys_per_connection: int = 5000
    channel_shutdown_delay: float = 1.0
    track_expired_extra_delay: float = 25.0
    concurrency_limit: int = 64


DEFAULTS = _Defaults()
"""Centrifugo's value of each shared-poll option left at 0."""


class Tracker(Protocol):
    """One connection's side of its shared-poll subscriptions (gateway/connection/shared_poll.py)."""

    codec: Codec

    def deliver(self, channel: str, item: KeyedPublication, push: bytes) -> None:
        """A key's change (``push`` already encoded for ``codec``); returns at once."""
        ...

    def drop_channel(self, channel: str, unsubscribe: codes.Unsubscribe) -> None:
        """End the subscription (an epoch flip: 2500); returns at once."""
        ...

    def expire_keys(self, channel: str, now: float) -> None:
        """Untrack the keys whose signature expired past the grace; returns at once."""
        ...


@dataclass(slots=True)
class _Channel:
    opts: ChannelOptions
    state: ChannelState
    proxy: Proxy
    subscribers: set[Tracker] = field(default_factory=set)
    keys: dict[str, set[Tracker]] = field(default_factory=dict)
    worker: asyncio.Task[None] | None = None
    urgent: set[str] = field(default_factory=set)
    urgent_task: asyncio.Task[None] | None = None
    shutdown: asyncio.TimerHandle | None = None


class SharedPollManager:
    """This node's shared-poll channels (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        proxies: Proxies,
        metrics: Metrics,
        *,
        send: Callable[[bytes], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.proxies = proxies
        self.send = send
        self.clock = clock
        self.channels: dict[str, _Channel] = {}
        limit = settings.shared_poll.concurrency_limit or DEFAULTS.concurrency_limit
        self.slots = asyncio.Semaphore(limit)
        buckets = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
        self.request_items = Histogram(
            "centrifugo_shared_poll_proxy_request_items",
            "Number of items per shared poll proxy request.",
            ["name"],
            buckets=buckets,
            registry=metrics.registry,
        )
        self.response_items = Histogram(
            "centrifugo_shared_poll_proxy_response_items",
            "Number of items per shared poll proxy response.",
            ["name"],
            buckets=buckets,
            registry=metrics.registry,
        )

    # --- options -----------------------------------------------------------------------------

    def options(self, channel: str) -> ChannelOptions | None:
        """The channel's namespace options when it is a shared-poll namespace, else None."""
        opts = self.settings.channel_options(channel)
        return opts if opts is not None and opts.subscription_type == "shared_poll" else None

    def max_keys(self, opts: ChannelOptions) -> int:
        return opts.shared_poll.max_keys_per_connection or DEFAULTS.max_keys_per_connection

    def grace(self, opts: ChannelOptions) -> float:
        return opts.shared_poll.track_expired_extra_delay or DEFAULTS.track_expired_extra_delay

    def _channel(self, channel: str, opts: ChannelOptions) -> _Channel:
        ch = self.channels.get(channel)
        if ch is None:
            proxy = self.proxies.for_shared_poll(opts)
            versionless = opts.shared_poll.mode in ("", "versionless")
            ch = self.channels[channel] = _Channel(opts, ChannelState(versionless=versionless), proxy)
        if ch.shutdown is not None:
            ch.shutdown.cancel()
            ch.shutdown = None
        return ch

    # --- connections -------------------------------------------------------------------------

    def subscribe(self, channel: str, opts: ChannelOptions, tracker: Tracker) -> str:
        """A connection subscribed: the channel's epoch for its subscribe reply."""
        ch = self._channel(channel, opts)
        ch.subscribers.add(tracker)
        self._ensure_worker(channel, ch)  # its interval also ends subscriptions whose token expired
        return ch.state.epoch

    def unsubscribe(self, channel: str, tracker: Tracker, keys: Iterable[str]) -> None:
        """A connection left the channel (it tracked ``keys``)."""
        ch = self.channels.get(channel)
        if ch is None:
            return
        self.untrack(channel, tracker, keys)
        ch.subscribers.discard(tracker)
        self._maybe_shutdown(channel, ch)

    def peek(self, channel: str, keys: Iterable[str]) -> dict[str, tuple[bool, int]]:
        """Per key: (not tracked on this node yet, the version it has here). Changes nothing."""
        ch = self.channels.get(channel)
        entries = ch.state.entries if ch is not None else {}
        out = {}
        for key in keys:
            entry = entries.get(key)
            out[key] = (True, 0) if entry is None else (False, entry.version)
        return out

    def join(self, channel: str, tracker: Tracker, cold: list[str], warm: list[str]) -> None:
        """The connection's track reply is queued: it receives the keys' changes from now on.
        ``cold`` keys are new on this node, ``warm`` ones are known but the connection holds
        none of their current data: both are polled at once."""
        ch = self._channel(channel, self.channels[channel].opts)
        for key in (*cold, *warm):
            ch.state.track(key)  # untracked meanwhile by another connection: tracked again
            ch.keys.setdefault(key, set()).add(tracker)
        urgent = [*cold, *ch.state.mark_needs_broadcast(warm)]
        self._ensure_worker(channel, ch)
        if urgent:
            self._poll_soon(channel, ch, urgent)

    def join_quiet(self, channel: str, tracker: Tracker, keys: Iterable[str]) -> None:
        """Join keys the connection already holds current: no poll owed."""
        ch = self.channels[channel]
        for key in keys:
            ch.state.track(key)
            ch.keys.setdefault(key, set()).add(tracker)
        self._ensure_worker(channel, ch)

    def untrack(self, channel: str, tracker: Tracker, keys: Iterable[str]) -> None:
        ch = self.channels.get(channel)
        if ch is None:
            return
        for key in keys:
            holders = ch.keys.get(key)
            if holders is None:
                continue
            holders.discard(tracker)
            if not holders:
                del ch.keys[key]
                ch.state.untrack(key)
        self._maybe_shutdown(channel, ch)

    def num_keys(self) -> int:
        return sum(len(ch.keys) for ch in self.channels.values())

    # --- lifecycle ---------------------------------------------------------------------------

    def _maybe_shutdown(self, channel: str, ch: _Channel) -> None:
        if ch.keys or ch.subscribers:
            return
        for task in (ch.worker, ch.urgent_task):
            if task is not None:
                task.cancel()
        ch.worker = ch.urgent_task = None
        delay = ch.opts.shared_poll.channel_shutdown_delay or DEFAULTS.channel_shutdown_delay
        if delay < 0:
            self.channels.pop(channel, None)
            return
        if ch.shutdown is None:
            loop = asyncio.get_running_loop()
            ch.shutdown = loop.call_later(delay, self._finish_shutdown, channel, ch)

    def _finish_shutdown(self, channel: str, ch: _Channel) -> None:
        ch.shutdown = None
        if not ch.keys and not ch.subscribers and self.channels.get(channel) is ch:
            del self.channels[channel]

    def close(self) -> None:
        """Stop every poll (the node is shutting down)."""
        for ch in self.channels.values():
            for task in (ch.worker, ch.urgent_task):
                if task is not None:
                    task.cancel()
            if ch.shutdown is not None:
                ch.shutdown.cancel()
        self.channels.clear()

    # --- polling -----------------------------------------------------------------------------

    def _ensure_worker(self, channel: str, ch: _Channel) -> None:
        if ch.worker is None or ch.worker.done():
            ch.worker = asyncio.get_running_loop().create_task(self._refresh_loop(channel, ch))

    def _poll_soon(self, channel: str, ch: _Channel, keys: list[str]) -> None:
        ch.urgent.update(keys)
        if ch.urgent_task is None or ch.urgent_task.done():
            ch.urgent_task = asyncio.get_running_loop().create_task(self._poll_urgent(channel, ch))

    async def _poll_urgent(self, channel: str, ch: _Channel) -> None:
        await asyncio.sleep(0)  # coalesce the keys joined in this loop tick
        while ch.urgent:
            keys, ch.urgent = sorted(ch.urgent), set()
            await self._poll(channel, ch, keys)

    async def _refresh_loop(self, channel: str, ch: _Channel) -> None:
        interval = ch.opts.shared_poll.refresh_interval or DEFAULTS.refresh_interval
        batch = ch.opts.shared_poll.refresh_batch_size or DEFAULTS.refresh_batch_size
        while self.channels.get(channel) is ch:
            await asyncio.sleep(interval)
            now = self.clock()
            for tracker in list(ch.subscribers):
                try:
                    tracker.expire_keys(channel, now)
                except Exception as exc:  # one connection's failure must not stop the channel's polls
                    _limited.log(logging.ERROR, f"{channel}:expire", "shared poll expiry failed: %r", exc)
            keys = ch.state.due()
            chunks = [keys[i : i + batch] for i in range(0, len(keys), batch)]
            await asyncio.gather(*(self._poll(channel, ch, chunk) for chunk in chunks))

    async def _poll(self, channel: str, ch: _Channel, keys: list[str]) -> None:
        """One proxy call for ``keys`` and its fan-out; never raises but cancellation (a bug
        is logged, rate-limited, and the next interval polls again)."""
        try:
            await self._poll_once(channel, ch, keys)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _limited.log(logging.ERROR, f"{channel}:bug", "shared poll of %s failed: %r", channel, exc)
        raise_if_cancelling()  # a transport may report the cancellation as a ProxyFailure

    async def _poll_once(self, channel: str, ch: _Channel, keys: list[str]) -> None:
        items = ch.state.request_items(keys)
        if not items:
            return
        proxy = ch.proxy
        request = {
            "channel": channel,
            "items": [{"key": k, "version": v} if v else {"key": k} for k, v in items],
        }
        self.request_items.labels(proxy.name).observe(len(items))
        try:
            async with self.slots:
                reply = await proxy.call(KIND, request, {})
            if reply.error is not None:
                raise ProxyFailure("error", reply.error.message)
            answer_items, epoch = parse_answer(reply.result, grpc=proxy.protocol == "grpc")
        except ProxyFailure as exc:
            _limited.log(
                logging.WARNING, f"{channel}:{exc.reason}", "shared poll refresh of %s: %s", channel, exc
            )
            return
        self.response_items.labels(proxy.name).observe(len(answer_items))
        if self.channels.get(channel) is not ch:
            return
        applied = ch.state.apply(answer_items, epoch)
        # A large answer is fanned out a slice at a time, letting the loop serve others between.
        for start in range(0, max(len(applied.updates), 1), FAN_OUT_SLICE):
            part = applied.updates[start : start + FAN_OUT_SLICE]
            self._fan_out(channel, ch, Applied(part, [], applied.epoch_changed and start == 0))
            if start + FAN_OUT_SLICE < len(applied.updates):
                await asyncio.sleep(0)
        self._fan_out(channel, ch, Applied([], applied.removed, False))

    # --- fan-out -----------------------------------------------------------------------------

    def _fan_out(self, channel: str, ch: _Channel, applied: Applied) -> None:
        if applied.epoch_changed:
            for tracker in list(ch.subscribers):
                tracker.drop_channel(channel, codes.UNSUBSCRIBE_INSUFFICIENT_STATE)
        for item in (*applied.updates, *(KeyedPublication(key, removed=True) for key in applied.removed)):
            holders = ch.keys.get(item.key)
            if not holders:
                continue
            encoded: dict[str, bytes] = {}
            for tracker in list(holders):
                codec = tracker.codec
                push = encoded.get(codec.name)
                if push is None:
                    push = encoded[codec.name] = codec.encode_keyed_publication(channel, item)
                tracker.deliver(channel, item, push)
            if item.removed:
                ch.keys.pop(item.key, None)

    # --- server API --------------------------------------------------------------------------

    async def publish(self, channel: str, key: str, version: int, epoch: str, data: bytes) -> None:
        """``shared_poll_publish``: every node applies it (over the control channel when the
        cluster has one, else here only).

        Raises:
            EngineError: the control channel is unavailable.
        """
        if self.send is None:
            self.apply_publication(channel, key, version, epoch, data)
            return
        message = {"channel": channel, "key": key, "version": version, "epoch": epoch}
        message["b64data"] = base64.b64encode(data).decode()
        await self.send(orjson.dumps(message))

    def on_control(self, message: Mapping[str, Any]) -> None:
        """A ``shared_poll_publish`` from the control channel (any node). Malformed: dropped."""
        channel, key, version, epoch = (message.get(k) for k in ("channel", "key", "version", "epoch"))
        if not (isinstance(channel, str) and isinstance(key, str) and isinstance(epoch, str)):
            return
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            return
        try:
            data = base64.b64decode(str(message.get("b64data", "")), validate=True)
        except (binascii.Error, ValueError):
            return
        self.apply_publication(channel, key, version, epoch, data)

    def apply_publication(self, channel: str, key: str, version: int, epoch: str, data: bytes) -> None:
        ch = self.channels.get(channel)
        if ch is not None:
            self._fan_out(channel, ch, ch.state.publish(key, version, epoch, data))


def parse_answer(result: Mapping[str, Any] | None, *, grpc: bool) -> tuple[list[RefreshItem], str]:
    """The items and epoch of a ``shared_poll_refresh`` result (``data`` raw JSON over HTTP,
    bytes over gRPC).

    Raises:
        ProxyFailure: "malformed" when the result cannot be read.
    """
    if result is None:
        return [], ""
    raw_items = result.get("items") or []
    epoch = result.get("epoch") or ""
    if not isinstance(raw_items, list) or not isinstance(epoch, str):
        raise ProxyFailure("malformed", "shared_poll_refresh result")
    items = []
    for raw in raw_items:
        if not isinstance(raw, dict) or not isinstance(raw.get("key"), str) or not raw["key"]:
            raise ProxyFailure("malformed", "shared_poll_refresh item")
        version = raw.get("version", 0)
        with contextlib.suppress(TypeError, ValueError):
            version = int(version)  # uint64 comes as a string from protobuf's JSON form
        if not isinstance(version, int) or version < 0:
            raise ProxyFailure("malformed", "shared_poll_refresh item version")
        data = raw.get("data")
        if grpc:
            try:
                payload = base64.b64decode(data) if isinstance(data, str) else b""
            except (binascii.Error, ValueError):
                raise ProxyFailure("malformed", "shared_poll_refresh item data") from None
        else:
            payload = data if isinstance(data, bytes) else dumps_kept(data) if data is not None else b""
        items.append(RefreshItem(raw["key"], payload, version, bool(raw.get("removed"))))
    return items, epoch
