"""The ``redis_stream`` consumer: a Redis consumer group over one or more streams.

Each stream gets ``num_workers`` readers (``XREADGROUP GROUP <consumer_group> <node> ... >``,
blocking up to 2 s, which bounds how long a stop waits) and one reclaimer. The consumer's name
in the group is the gateway node's id, unique per process start, so a crashed node's messages
stay pending under its name: every ``min(5 s, visibility_timeout)`` the reclaimer of each live
node claims the entries idle longer than ``visibility_timeout`` (``XAUTOCLAIM``) and runs them
(``visibility_timeout: 0`` turns reclaiming off, as in Centrifugo). A message done or skipped
is acknowledged (``XACK``); one failing with error 100 is left pending, to be reclaimed: at
least once.

A message's command is the ``payload_value`` field, its method the ``method_value`` field
(absent: the payload is a ``{"method", "payload"}`` document); in publication data mode the
payload is the data and ``publication_data_mode``'s fields name the channels (comma-separated),
idempotency key, delta flag, version, version epoch and tags (``tags_value_prefix`` + name).
The group is created at start (``MKSTREAM``, from ``$``) and again when the stream was deleted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gateway.config import redis_address
from gateway.config.sections.consumers import RedisStreamConsumerSettings
from gateway.consumers.dispatch import (
    Dispatcher,
    RetryLater,
    SkipReason,
    Verdict,
    backoff,
    parse_flag,
)
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.consumers")

BLOCK_SECONDS = 2.0
RECLAIM_INTERVAL_SECONDS = 5.0
RECLAIM_BATCH = 100

Fields = dict[bytes, bytes]


class RedisStreamConsumer:
    """Consumes ``streams`` in ``consumer_group`` as ``node_id`` until cancelled."""

    def __init__(
        self, name: str, settings: RedisStreamConsumerSettings, dispatcher: Dispatcher, node_id: str
    ) -> None:
        self.name = name
        self.settings = settings
        self.dispatcher = dispatcher
        self.consumer = node_id
        parsed = redis_address.parse(settings.address[0])  # checked at load (consumer_checks)
        ((host, port),) = parsed.hosts[:1]
        self.redis = aioredis.Redis(
            host=host,
            port=port,
            db=parsed.db if parsed.db is not None else settings.db,
            username=parsed.user or settings.user or None,
            password=parsed.password or settings.password or None,
            client_name=settings.client_name or None,
            socket_connect_timeout=parsed.connect_timeout or settings.connect_timeout,
            socket_timeout=(parsed.io_timeout or settings.io_timeout) + BLOCK_SECONDS,
        )

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for stream in self.settings.streams:
                    for _ in range(self.settings.num_workers):
                        tg.create_task(self._read(stream))
                    if self.settings.visibility_timeout > 0:
                        tg.create_task(self._reclaim(stream))
        finally:
            await self.redis.aclose()

    async def _ensure_group(self, stream: str) -> None:
        try:
            await self.redis.xgroup_create(stream, self.settings.consumer_group, id="$", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _read(self, stream: str) -> None:
        retries = 0
        ready = False
        while True:
            raise_if_cancelling()
            try:
                if not ready:
                    await self._ensure_group(stream)
                    ready = True
                found: Any = await self.redis.xreadgroup(
                    self.settings.consumer_group,
                    self.consumer,
                    {stream: ">"},
                    count=1,
                    block=int(BLOCK_SECONDS * 1000),
                )
                if isinstance(found, dict):  # RESP3 shape
                    found = list(found.items())
                for _stream, entries in found or ():
                    for entry_id, fields in entries:
                        await self.handle(stream, entry_id, fields)
                retries = 0
            except RetryLater as exc:  # left pending: reclaimed after visibility_timeout
                retries += 1
                self.dispatcher.failed("command failed, left pending", exc)
                await asyncio.sleep(backoff(retries))
            except Exception as exc:  # the reader's boundary: logged, counted, retried, never fatal
                raise_if_cancelling(exc)
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    ready = False  # the stream (and its group) was deleted: create them again
                retries += 1
                self.dispatcher.failed(f"error reading stream {stream}", exc)
                await asyncio.sleep(backoff(retries))

    async def _reclaim(self, stream: str) -> None:
        visibility_ms = int(self.settings.visibility_timeout * 1000)
        interval = min(RECLAIM_INTERVAL_SECONDS, self.settings.visibility_timeout)
        while True:
            await asyncio.sleep(interval)
            start = "0-0"
            try:
                while True:
                    raise_if_cancelling()
                    reply: Any = await self.redis.xautoclaim(
                        stream,
                        self.settings.consumer_group,
                        self.consumer,
                        min_idle_time=visibility_ms,
                        start_id=start,
                        count=RECLAIM_BATCH,
                    )
                    start = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
                    for entry_id, fields in reply[1]:
                        if fields is not None:  # None: deleted from the stream meanwhile
                            await self.handle(stream, entry_id, fields)
                    if start == "0-0" or not reply[1]:
                        break
            except RetryLater as exc:
                self.dispatcher.failed("reclaimed command failed, left pending", exc)
            except Exception as exc:  # the reclaimer's boundary: tried again next interval
                raise_if_cancelling(exc)
                self.dispatcher.failed(f"error reclaiming stream {stream}", exc)

    async def handle(self, stream: str, entry_id: bytes, fields: Fields) -> None:
        """Run one entry and acknowledge it unless it must be retried.

        Raises:
            RetryLater: left pending.
        """
        await self._verdict(fields)
        await self.redis.xack(stream, self.settings.consumer_group, entry_id)
        self.dispatcher.metrics.processed.labels(self.name).inc()

    async def _verdict(self, fields: Fields) -> Verdict:
        settings = self.settings
        payload = fields.get(settings.payload_value.encode())
        mode = settings.publication_data_mode
        if not mode.enabled:
            return await self.dispatcher.command(_text(fields, settings.method_value), payload)
        if payload is None:
            return self.dispatcher.skip(SkipReason.NO_PAYLOAD, f"no {settings.payload_value!r} field")
        try:
            delta = parse_flag(_text(fields, mode.delta_value))
            version = int(_text(fields, mode.version_value) or 0)
        except ValueError as exc:
            return self.dispatcher.skip(SkipReason.MALFORMED, f"bad delta or version field ({exc})")
        prefix = mode.tags_value_prefix.encode()
        tags = (
            {
                key[len(prefix) :].decode(errors="replace"): value.decode(errors="replace")
                for key, value in fields.items()
                if key.startswith(prefix)
            }
            if prefix
            else {}
        )
        return await self.dispatcher.publication(
            _text(fields, mode.channels_value).split(","),
            payload,
            idempotency_key=_text(fields, mode.idempotency_key_value),
            delta=delta,
            tags=tags,
            version=version,
            version_epoch=_text(fields, mode.version_epoch_value),
        )


def _text(fields: Fields, name: str) -> str:
    if not name:
        return ""
    value = fields.get(name.encode())
    return value.decode(errors="replace") if value is not None else ""


__all__ = ["RedisStreamConsumer"]
