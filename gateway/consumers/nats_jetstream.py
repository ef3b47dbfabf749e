"""The ``nats_jetstream`` consumer: a durable pull consumer on a JetStream stream.

At start the durable consumer ``durable_consumer_name`` is created on ``stream_name`` (or
updated; explicit acks, ack wait 30 s, ``max_ack_pending``, ``deliver_policy`` ``new`` or
``all``, filtered by ``subjects``), or with ``use_existing_consumer`` looked up as it is. Messages
are fetched in batches; a message done or skipped is acknowledged; one failing with error 100
is negatively acknowledged with a delay that grows with its delivery count (Centrifugo's
backoff, capped at 5 s), so a failing message is redelivered without spinning: at least once.

A message's method is the ``method_header`` header (absent: the data is a ``{"method",
"payload"}`` document); in publication data mode the data is published and headers name the
channels (comma-separated), idempotency key, delta flag, version, version epoch and tags
(``tags_header_prefix`` + name). When the consumer or its stream disappears (deleted by an
operator, an in-memory stream lost in a restart) it is created again, with backoff; the NATS
connection reconnects forever.
"""

from __future__ import annotations

import asyncio
import logging

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.client import JetStreamContext

from gateway.config.sections.consumers import NatsJetStreamConsumerSettings
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

FETCH_SECONDS = 5.0
ACK_WAIT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_BATCH = 100


class NatsJetStreamConsumer:
    """Consumes one durable JetStream consumer until cancelled."""

    def __init__(self, name: str, settings: NatsJetStreamConsumerSettings, dispatcher: Dispatcher) -> None:
        self.name = name
        self.settings = settings
        self.dispatcher = dispatcher
        self.batch = max(1, min(settings.max_ack_pending, MAX_BATCH))

    async def run(self) -> None:
        retries = 0
        while True:
            nc: NatsClient | None = None
            try:
                nc = await self._connect()
                js = nc.jetstream()
                await self._consumer(js)
                retries = 0
                await self._consume(js)
            except Exception as exc:  # the consumer's boundary: logged, counted, retried, never fatal
                raise_if_cancelling(exc)
                retries += 1
                self.dispatcher.failed("NATS JetStream consumer failed, recreating", exc)
            finally:
                if nc is not None:
                    try:
                        await asyncio.wait_for(nc.close(), CONNECT_TIMEOUT_SECONDS)
                    except Exception:  # closing is best effort
                        log.debug("consumer %s: NATS close failed", self.name)
            await asyncio.sleep(backoff(retries))

    async def _connect(self) -> NatsClient:
        s = self.settings
        options: dict[str, object] = {
            "servers": [s.url],
            "max_reconnect_attempts": -1,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "allow_reconnect": True,
        }
        if s.credentials_file:
            options["user_credentials"] = s.credentials_file
        elif s.username:
            options["user"], options["password"] = s.username, s.password
        elif s.token:
            options["token"] = s.token
        return await nats.connect(**options)  # type: ignore[arg-type]

    async def _consumer(self, js: JetStreamContext) -> None:
        """The durable consumer: looked up, or created/updated from the settings."""
        s = self.settings
        if s.use_existing_consumer:
            await js.consumer_info(s.stream_name, s.durable_consumer_name)
            return
        config = api.ConsumerConfig(
            durable_name=s.durable_consumer_name,
            deliver_policy=api.DeliverPolicy.ALL if s.deliver_policy == "all" else api.DeliverPolicy.NEW,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=ACK_WAIT_SECONDS,
            max_ack_pending=s.max_ack_pending,
        )
        if len(s.subjects) == 1:
            config.filter_subject = s.subjects[0]
        elif s.subjects:
            config.filter_subjects = list(s.subjects)  # nats-server 2.10 and later
        await js.add_consumer(s.stream_name, config)

    async def _consume(self, js: JetStreamContext) -> None:
        s = self.settings
        sub = await js.pull_subscribe_bind(s.durable_consumer_name, s.stream_name)
        while True:
            raise_if_cancelling()
            try:
                messages = await sub.fetch(self.batch, timeout=FETCH_SECONDS)
            except NatsTimeout:
                # Idle: make sure the consumer still exists (NotFoundError ends this session,
                # and run() creates it again).
                await js.consumer_info(s.stream_name, s.durable_consumer_name)
                continue
            for msg in messages:
                await self.handle(msg)

    async def handle(self, msg: Msg) -> None:
        """Run one message; ack it, or nak it with a delay when it must be retried."""
        try:
            await self._verdict(msg)
        except RetryLater as exc:
            self.dispatcher.failed("command failed, redelivered later", exc)
            try:
                delivered = msg.metadata.num_delivered
            except (ValueError, IndexError, AttributeError):
                delivered = 1
            await msg.nak(delay=backoff(min(delivered, 10)))
            return
        await msg.ack()
        self.dispatcher.metrics.processed.labels(self.name).inc()

    async def _verdict(self, msg: Msg) -> Verdict:
        headers = msg.headers or {}
        mode = self.settings.publication_data_mode
        if not mode.enabled:
            return await self.dispatcher.command(headers.get(self.settings.method_header, ""), msg.data)
        try:
            delta = parse_flag(headers.get(mode.delta_header, "")) if mode.delta_header else False
            version = int(headers.get(mode.version_header, "") or 0) if mode.version_header else 0
        except ValueError as exc:
            return self.dispatcher.skip(SkipReason.MALFORMED, f"bad delta or version header ({exc})")
        prefix = mode.tags_header_prefix
        tags = {k[len(prefix) :]: v for k, v in headers.items() if prefix and k.startswith(prefix)}
        return await self.dispatcher.publication(
            headers.get(mode.channels_header, "").split(","),
            msg.data,
            idempotency_key=headers.get(mode.idempotency_key_header, "")
            if mode.idempotency_key_header
            else "",
            delta=delta,
            tags=tags,
            version=version,
            version_epoch=headers.get(mode.version_epoch_header, "") if mode.version_epoch_header else "",
        )


__all__ = ["NatsJetStreamConsumer"]
