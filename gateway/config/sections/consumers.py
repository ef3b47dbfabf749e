"""The ``consumers`` option list as frozen values, named and nested like Centrifugo v6's
``configtypes.Consumer`` (docs/consumers.md).

Each entry has a unique ``name``, ``enabled``, a ``type`` and one section per type. Taskcast
runs the ``postgresql``, ``redis_stream`` and ``nats_jetstream`` types; the other Centrifugo
types (``kafka``, ``google_pub_sub``, ``aws_sqs``, ``azure_service_bus``) are named in
``gateway.config.consumer_checks`` with the reason they are refused. Durations are float
seconds, as everywhere in the settings. Pure values: imports nothing from the gateway outside
gateway/config/sections/ (``schema`` imports this module for ``Settings.consumers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.sections.fields import EXTENSION

DEFAULT_MAX_MESSAGE_SIZE = 10 * 1024 * 1024
"""Bytes of one consumed message's payload: the server HTTP API's request-body bound
(gateway/api/http.py), so a command the HTTP API accepts is accepted here too."""


@dataclass(frozen=True, slots=True)
class ConsumerTlsSettings:
    """Centrifugo's ``TLSConfig`` of a consumer's client connection. Taskcast refuses
    ``enabled: true`` at startup (no test runs a consumer over TLS)."""

    enabled: bool = False
    cert_pem: str = ""
    key_pem: str = ""
    server_ca_pem: str = ""
    client_ca_pem: str = ""
    insecure_skip_verify: bool = False
    server_name: str = ""


@dataclass(frozen=True, slots=True)
class PostgresConsumerSettings:
    """``consumers[].postgresql``: the outbox table (``id``, ``method``, ``payload``,
    ``partition``) polled per partition under an advisory lock; rows are deleted once handled."""

    dsn: str = ""
    outbox_table_name: str = ""
    num_partitions: int = 1
    partition_select_limit: int = 100
    partition_poll_interval: float = 0.3
    partition_notification_channel: str = ""
    partition_notification_dsn: str = ""
    use_try_lock: bool = False
    tls: ConsumerTlsSettings = field(default_factory=ConsumerTlsSettings)


@dataclass(frozen=True, slots=True)
class RedisStreamPublicationDataMode:
    """``consumers[].redis_stream.publication_data_mode``: the payload field is publication
    data, the other fields name the channels and the publication's options."""

    enabled: bool = False
    channels_value: str = "centrifugo-channels"
    idempotency_key_value: str = "centrifugo-idempotency-key"
    delta_value: str = "centrifugo-delta"
    version_value: str = "centrifugo-version"
    version_epoch_value: str = "centrifugo-version-epoch"
    tags_value_prefix: str = "centrifugo-tag-"


@dataclass(frozen=True, slots=True)
class RedisStreamConsumerSettings:
    """``consumers[].redis_stream``: a consumer group over ``streams`` of one standalone Redis
    (Centrifugo's ``Redis`` fields inline). Messages left pending longer than
    ``visibility_timeout`` (a crashed node's) are claimed by the group's other consumers."""

    address: tuple[str, ...] = ("redis://127.0.0.1:6379",)
    connect_timeout: float = 1.0
    io_timeout: float = 4.0
    db: int = 0
    user: str = ""
    password: str = ""
    client_name: str = ""
    tls: ConsumerTlsSettings = field(default_factory=ConsumerTlsSettings)
    streams: tuple[str, ...] = ()
    consumer_group: str = ""
    visibility_timeout: float = 30.0
    num_workers: int = 1
    payload_value: str = "payload"
    method_value: str = "method"
    publication_data_mode: RedisStreamPublicationDataMode = field(
        default_factory=RedisStreamPublicationDataMode
    )


@dataclass(frozen=True, slots=True)
class NatsJetStreamPublicationDataMode:
    """``consumers[].nats_jetstream.publication_data_mode``: the message data is publication
    data, headers name the channels and the publication's options."""

    enabled: bool = False
    channels_header: str = "centrifugo-channels"
    idempotency_key_header: str = "centrifugo-idempotency-key"
    delta_header: str = "centrifugo-delta"
    version_header: str = "centrifugo-version"
    version_epoch_header: str = "centrifugo-version-epoch"
    tags_header_prefix: str = "centrifugo-tag-"


@dataclass(frozen=True, slots=True)
class NatsJetStreamConsumerSettings:
    """``consumers[].nats_jetstream``: a durable pull consumer on ``stream_name`` (created or
    updated at start unless ``use_existing_consumer``)."""

    url: str = "nats://127.0.0.1:4222"
    credentials_file: str = ""
    username: str = ""
    password: str = ""
    token: str = ""
    stream_name: str = ""
    use_existing_consumer: bool = False
    subjects: tuple[str, ...] = ()
    durable_consumer_name: str = ""
    deliver_policy: str = "new"
    max_ack_pending: int = 100
    method_header: str = "centrifugo-method"
    publication_data_mode: NatsJetStreamPublicationDataMode = field(
        default_factory=NatsJetStreamPublicationDataMode
    )
    tls: ConsumerTlsSettings = field(default_factory=ConsumerTlsSettings)


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """One entry of ``consumers``. Only ``enabled`` consumers run (Centrifugo's default is off).
    ``max_message_size`` is a Taskcast extension: a message whose payload is larger is skipped
    (logged, counted), never executed."""

    name: str = ""
    enabled: bool = False
    type: str = ""
    postgresql: PostgresConsumerSettings = field(default_factory=PostgresConsumerSettings)
    redis_stream: RedisStreamConsumerSettings = field(default_factory=RedisStreamConsumerSettings)
    nats_jetstream: NatsJetStreamConsumerSettings = field(default_factory=NatsJetStreamConsumerSettings)
    max_message_size: int = field(default=DEFAULT_MAX_MESSAGE_SIZE, metadata=EXTENSION)


__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ConsumerSettings",
    "ConsumerTlsSettings",
    "NatsJetStreamConsumerSettings",
    "NatsJetStreamPublicationDataMode",
    "PostgresConsumerSettings",
    "RedisStreamConsumerSettings",
    "RedisStreamPublicationDataMode",
]
