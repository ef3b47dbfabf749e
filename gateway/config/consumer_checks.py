"""Validation of the ``consumers`` list (Centrifugo's rules, checked at load so a bad consumer
stops startup with the option's name instead of failing later in a background task).

Only ``enabled`` consumers are checked in full, as Centrifugo does; a disabled one only needs a
valid name and a known type. Zero values of ``num_partitions``, ``partition_select_limit``,
``partition_poll_interval`` and ``num_workers`` take Centrifugo's defaults. Types no test of
Taskcast can run are refused when enabled, with the reason (``UNSUPPORTED_TYPES``).
"""

from __future__ import annotations

import dataclasses
import re

from gateway.config import redis_address
from gateway.config.schema import ConfigError
from gateway.config.sections.consumers import (
    ConsumerSettings,
    ConsumerTlsSettings,
    NatsJetStreamConsumerSettings,
    PostgresConsumerSettings,
    RedisStreamConsumerSettings,
)

SUPPORTED_TYPES = ("postgresql", "redis_stream", "nats_jetstream")

_NO_BROKER = (
    "no {what} can run in Taskcast's test environment, so Taskcast ships no consumer for it that "
    "no test has run; bridge it into a redis_stream or nats_jetstream consumer, a postgresql "
    "outbox table, or the server API"
)
UNSUPPORTED_TYPES = {
    "kafka": _NO_BROKER.format(what="Kafka broker"),
    "google_pub_sub": _NO_BROKER.format(what="Google Cloud Pub/Sub service (or its emulator)"),
    "aws_sqs": _NO_BROKER.format(what="AWS SQS service"),
    "azure_service_bus": _NO_BROKER.format(what="Azure Service Bus namespace"),
}
"""Centrifugo's consumer types Taskcast does not run, each with why (docs/consumers.md)."""

_NAME = re.compile(r"^[a-zA-Z0-9_]{2,}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")
"""An outbox table name (optionally schema-qualified): it is written into the SQL as is."""
_CHANNEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_DSN_SCHEMES = ("postgres://", "postgresql://")
DELIVER_POLICIES = ("new", "all")


def check_consumers(
    consumers: tuple[ConsumerSettings, ...], warnings: list[str]
) -> tuple[ConsumerSettings, ...]:
    """``consumers`` validated, with Centrifugo's defaults in place of zero values.

    Raises:
        ConfigError: the first invalid consumer option (``consumers[<name>].<option>``).
    """
    return tuple(_check(consumer, warnings) for consumer in consumers)


def _check(c: ConsumerSettings, warnings: list[str]) -> ConsumerSettings:
    where = f"consumers[{c.name}]"
    if not _NAME.match(c.name):
        raise ConfigError(f"{where}.name", "must match ^[a-zA-Z0-9_]{2,}$ (Centrifugo's rule)")
    if c.type in UNSUPPORTED_TYPES:
        if c.enabled:
            raise ConfigError(
                f"{where}.type", f"{c.type} consumers are not supported: {UNSUPPORTED_TYPES[c.type]}"
            )
        warnings.append(f"{where}: type {c.type} is not supported by Taskcast (disabled, so ignored)")
        return c
    if c.type not in SUPPORTED_TYPES:
        known = ", ".join((*SUPPORTED_TYPES, *UNSUPPORTED_TYPES))
        raise ConfigError(f"{where}.type", f"unknown consumer type {c.type!r} (one of {known})")
    if not c.enabled:
        return c
    if c.max_message_size < 1:
        raise ConfigError(f"{where}.max_message_size", "must be at least 1")
    if c.type == "postgresql":
        return dataclasses.replace(c, postgresql=_postgresql(c.postgresql, f"{where}.postgresql"))
    if c.type == "redis_stream":
        return dataclasses.replace(c, redis_stream=_redis_stream(c.redis_stream, f"{where}.redis_stream"))
    return dataclasses.replace(c, nats_jetstream=_nats(c.nats_jetstream, f"{where}.nats_jetstream"))


def _no_tls(tls: ConsumerTlsSettings, where: str) -> None:
    if tls.enabled:
        raise ConfigError(
            f"{where}.tls.enabled",
            "TLS to a consumer's broker is not supported by Taskcast (no test runs it): reach the "
            "broker over a private network or a local TLS-terminating proxy",
        )


def _postgresql(pg: PostgresConsumerSettings, where: str) -> PostgresConsumerSettings:
    if not pg.dsn:
        raise ConfigError(f"{where}.dsn", "is required")
    for option in ("dsn", "partition_notification_dsn"):
        value = getattr(pg, option)
        if value and not value.startswith(_DSN_SCHEMES):
            raise ConfigError(f"{where}.{option}", "must be a postgres:// or postgresql:// URL")
    if not pg.outbox_table_name:
        raise ConfigError(f"{where}.outbox_table_name", "is required")
    if not _IDENTIFIER.match(pg.outbox_table_name):
        raise ConfigError(
            f"{where}.outbox_table_name", "must be a table name ([schema.]name, letters, digits, _)"
        )
    channel = pg.partition_notification_channel
    if channel and not _CHANNEL.match(channel):
        raise ConfigError(
            f"{where}.partition_notification_channel", "must be an identifier (letters, digits, _)"
        )
    _no_tls(pg.tls, where)
    return dataclasses.replace(
        pg,
        num_partitions=pg.num_partitions or 1,
        partition_select_limit=pg.partition_select_limit or 100,
        partition_poll_interval=pg.partition_poll_interval or 0.3,
    )


def _redis_stream(rs: RedisStreamConsumerSettings, where: str) -> RedisStreamConsumerSettings:
    if len(rs.address) != 1:
        raise ConfigError(
            f"{where}.address", "must be exactly one Redis address (Centrifugo: a single shard)"
        )
    try:
        parsed = redis_address.parse(rs.address[0])
    except redis_address.RedisAddressError as exc:
        raise ConfigError(f"{where}.address", f"{redis_address.redacted(rs.address[0])!r}: {exc}") from None
    if parsed.kind != redis_address.Kind.STANDALONE or parsed.unix_path:
        raise ConfigError(
            f"{where}.address", "must be a standalone redis://host:port address (Sentinel, Cluster "
            "and unix sockets are not supported for consumers)"
        )  # fmt: skip
    if parsed.tls:
        _no_tls(ConsumerTlsSettings(enabled=True), where)
    _no_tls(rs.tls, where)
    if not rs.streams or not all(rs.streams):
        raise ConfigError(f"{where}.streams", "must name at least one stream")
    if not rs.consumer_group:
        raise ConfigError(f"{where}.consumer_group", "is required")
    if not rs.payload_value:
        raise ConfigError(f"{where}.payload_value", "must not be empty")
    if rs.publication_data_mode.enabled and not rs.publication_data_mode.channels_value:
        raise ConfigError(
            f"{where}.publication_data_mode.channels_value", "is required in publication data mode"
        )
    if rs.io_timeout <= 0 or rs.connect_timeout <= 0:
        raise ConfigError(f"{where}.io_timeout", "io_timeout and connect_timeout must be positive")
    return dataclasses.replace(rs, num_workers=rs.num_workers or 1)


def _nats(nc: NatsJetStreamConsumerSettings, where: str) -> NatsJetStreamConsumerSettings:
    if not nc.url:
        raise ConfigError(f"{where}.url", "is required")
    if not nc.stream_name:
        raise ConfigError(f"{where}.stream_name", "is required")
    if not nc.durable_consumer_name:
        raise ConfigError(f"{where}.durable_consumer_name", "is required")
    if not nc.use_existing_consumer and nc.deliver_policy not in DELIVER_POLICIES:
        raise ConfigError(f"{where}.deliver_policy", f"must be 'new' or 'all', got {nc.deliver_policy!r}")
    if nc.publication_data_mode.enabled and not nc.publication_data_mode.channels_header:
        raise ConfigError(
            f"{where}.publication_data_mode.channels_header", "is required in publication data mode"
        )
    _no_tls(nc.tls, where)
    return dataclasses.replace(nc, max_ack_pending=nc.max_ack_pending or 100)


__all__ = ["SUPPORTED_TYPES", "UNSUPPORTED_TYPES", "check_consumers"]
