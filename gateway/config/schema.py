"""The gateway's settings as frozen values, named and nested exactly like Centrifugo v6 options.

Every attribute name is the Centrifugo option name (PROTOCOL.md §7), so ``settings.client.ping_interval``
documents itself as ``client.ping_interval``. Durations are float seconds under the Centrifugo name
(no ``_seconds`` suffix, on purpose: the names map 1:1 to the docs). Fields whose metadata carries
``DERIVED`` are computed by ``gateway.config.loading.load_settings`` and cannot be set from a file or the
environment. This module declares the root ``Settings``, the client's and the channels' sections
(``client``, ``channel`` with its namespaces' ``ChannelOptions``, ``rpc``) and the engine's, the
small process-wide ones, and the pure lookups over them; the other sections are values of their
own in gateway/config/sections/ (proxies, the served endpoints, TLS, shared poll, maps,
consumers, webhooks). It reads no file and no environment (that
is ``gateway.config.loading``'s job) and imports nothing from the gateway outside gateway/config/.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.config.sections.consumers import ConsumerSettings
from gateway.config.sections.endpoints import (
    AdminSettings,
    EmulationSettings,
    GrpcApiSettings,
    HealthSettings,
    HttpApiSettings,
    HttpServerSettings,
    InitSettings,
    PrometheusSettings,
    StreamTransportSettings,
    UniWebSocketSettings,
    WebSocketSettings,
)
from gateway.config.sections.fields import DERIVED, EXTENSION
from gateway.config.sections.maps import MAP_SUBSCRIPTION_TYPES, MapSettings
from gateway.config.sections.proxy import (
    ChannelProxySettings,
    ClientProxySettings,
    NamedProxySettings,
    ProxySettings,
)
from gateway.config.sections.shared_poll import SharedPollChannelSettings, SharedPollSettings
from gateway.config.sections.tls import TlsSettings
from gateway.config.sections.webhooks import OccupancySettings, WebhookSettings

SECRET_OPTIONS = frozenset(
    {
        "hmac_secret_key",
        "hmac_previous_secret_key",
        "password",
        "secret",
        "sentinel_password",
        "key",
        "key_pem",
        "credentials_value",
        "static_headers",
        "static_metadata",
        "token",
    }
)
"""Option names whose values ``Settings.redacted`` replaces by ``"***"``."""

_URL_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


class ConfigError(ValueError):
    """An invalid configuration: ``option`` is the option path (e.g. ``client.pong_timeout``),
    ``problem`` what is wrong with it. ``str()`` gives ``"<option>: <problem>"``."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """``client.token`` (connection tokens; PROTOCOL.md §5.1).

    ``algorithms`` is derived from which keys are configured and is the complete set a verifier
    may accept; the token header only chooses among them.
    """

    hmac_secret_key: str = ""
    hmac_previous_secret_key: str = ""
    hmac_previous_secret_key_valid_until: int = 0
    rsa_public_key: str = ""
    ecdsa_public_key: str = ""
    jwks_public_endpoint: str = ""
    audience: str = ""
    audience_regex: str = ""
    issuer: str = ""
    issuer_regex: str = ""
    user_id_claim: str = ""
    algorithms: tuple[str, ...] = field(default=(), metadata=DERIVED)


@dataclass(frozen=True, slots=True)
class SubscriptionTokenSettings(TokenSettings):
    """``client.subscription_token``: when ``enabled`` a separate verifier for subscription
    tokens; otherwise subscription tokens are verified with ``client.token``."""

    enabled: bool = False


@dataclass(frozen=True, slots=True)
class PersonalChannelSettings:
    """``client.subscribe_to_user_personal_channel``: a server-side subscription of every
    authenticated connection to ``<personal_channel_namespace>:#<user>`` (``#<user>`` without a
    namespace); ``single_connection`` keeps one connection per user (presence-based eviction)."""

    enabled: bool = False
    personal_channel_namespace: str = ""
    single_connection: bool = False


@dataclass(frozen=True, slots=True)
class ClientSettings:
    allowed_origins: tuple[str, ...] = ()
    token: TokenSettings = field(default_factory=TokenSettings)
    subscription_token: SubscriptionTokenSettings = field(default_factory=SubscriptionTokenSettings)
    allow_anonymous_connect_without_token: bool = False
    disallow_anonymous_connection_tokens: bool = False
    insecure: bool = False
    insecure_skip_token_signature_verify: bool = False
    ping_interval: float = 25.0
    pong_timeout: float = 8.0
    expired_close_delay: float = 25.0
    expired_sub_close_delay: float = 25.0
    stale_close_delay: float = 10.0
    channel_limit: int = 128
    queue_max_size: int = 1048576
    queue_conflate_size: int = 262144
    presence_update_interval: float = 27.0
    channel_position_check_delay: float = 40.0
    connection_limit: int = 0
    user_connection_limit: int = 0
    connection_rate_limit: int = 0
    handshake_limit: int = field(default=0, metadata=EXTENSION)
    connect_include_server_time: bool = False
    history_max_publication_limit: int = 300
    recovery_max_publication_limit: int = 300
    subscribe_to_user_personal_channel: PersonalChannelSettings = field(
        default_factory=lambda: PersonalChannelSettings()
    )
    proxy: ClientProxySettings = field(default_factory=lambda: ClientProxySettings())


@dataclass(frozen=True, slots=True)
class ChannelOptions:
    """Options of one namespace (``name`` set) or of ``channel.without_namespace`` (``name == ""``).

    ``history_meta_ttl == 0`` inherits ``channel.history_meta_ttl``; ``history_meta_ttl_resolved``
    is the value to use. ``channel_pattern`` is ``channel_regex`` compiled (None when unset).
    ``subscription_limit_per_connection`` is a Taskcast extension: at most that many subscriptions
    to channels of this namespace per connection (0 = unlimited). ``conflation_tag`` too: the
    publication tag whose value is a conflation key while a connection is backed up
    (gateway/conflation.py; "" = never conflate).
    """

    name: str = field(default="", metadata=DERIVED)
    presence: bool = False
    join_leave: bool = False
    force_push_join_leave: bool = False
    history_size: int = 0
    history_ttl: float = 0.0
    history_meta_ttl: float = 0.0
    force_positioning: bool = False
    allow_positioning: bool = False
    force_recovery: bool = False
    allow_recovery: bool = False
    force_recovery_mode: str = "stream"
    allow_subscribe_for_client: bool = False
    allow_subscribe_for_anonymous: bool = False
    allow_publish_for_subscriber: bool = False
    allow_publish_for_client: bool = False
    allow_publish_for_anonymous: bool = False
    allow_history_for_subscriber: bool = False
    allow_history_for_client: bool = False
    allow_history_for_anonymous: bool = False
    allow_presence_for_subscriber: bool = False
    allow_presence_for_client: bool = False
    allow_presence_for_anonymous: bool = False
    allow_user_limited_channels: bool = False
    channel_regex: str = ""
    allowed_delta_types: tuple[str, ...] = ()
    delta_publish: bool = False
    allow_tags_filter: bool = False
    subscription_limit_per_connection: int = field(default=0, metadata=EXTENSION)
    conflation_tag: str = field(default="", metadata=EXTENSION)
    subscribe_proxy_enabled: bool = False
    subscribe_proxy_name: str = ""
    publish_proxy_enabled: bool = False
    publish_proxy_name: str = ""
    sub_refresh_proxy_enabled: bool = False
    sub_refresh_proxy_name: str = ""
    subscribe_stream_proxy_enabled: bool = False
    subscribe_stream_proxy_name: str = ""
    subscribe_stream_proxy_bidirectional: bool = False
    subscription_type: str = "stream"
    """``stream`` (or ""): stream subscriptions; ``shared_poll``: shared-poll subscriptions
    (``shared_poll`` options; gateway/sharedpoll/)."""
    shared_poll: SharedPollChannelSettings = field(default_factory=SharedPollChannelSettings)
    map: MapSettings = field(default_factory=MapSettings)
    map_clients_presence_channel_prefix: str = ""
    map_users_presence_channel_prefix: str = ""
    history_meta_ttl_resolved: float = field(default=0.0, metadata=DERIVED)
    channel_pattern: re.Pattern[str] | None = field(default=None, metadata=DERIVED, compare=False)

    @property
    def history_enabled(self) -> bool:
        return self.history_size > 0 and self.history_ttl > 0

    @property
    def is_map(self) -> bool:
        """Channels of this namespace are maps (``subscription_type`` map, map_clients, map_users)."""
        return self.subscription_type in MAP_SUBSCRIPTION_TYPES


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    max_length: int = 255
    history_meta_ttl: float = 720 * 3600.0
    private_prefix: str = "$"
    namespace_boundary: str = ":"
    user_boundary: str = "#"
    user_separator: str = ","
    without_namespace: ChannelOptions = field(default_factory=ChannelOptions)
    namespaces: tuple[ChannelOptions, ...] = ()
    proxy: ChannelProxySettings = field(default_factory=ChannelProxySettings)
    by_name: Mapping[str, ChannelOptions] = field(
        default_factory=lambda: MappingProxyType({}), metadata=DERIVED, compare=False, repr=False
    )


@dataclass(frozen=True, slots=True)
class RedisTlsSettings(TlsSettings):
    """``engine.redis.tls``: ``server_ca_pem`` verifies Redis, ``cert_pem``/``key_pem`` are the
    client certificate for Redis mTLS. ``ca_cert_pem_file`` is Taskcast's earlier name for a
    ``server_ca_pem`` file path (kept working)."""

    ca_cert_pem_file: str = field(default="", metadata=EXTENSION)


@dataclass(frozen=True, slots=True)
class RedisSettings:
    address: tuple[str, ...] = ("redis://127.0.0.1:6379",)
    prefix: str = "centrifugo"
    db: int = 0
    user: str = ""
    password: str = ""
    client_name: str = ""
    tls: RedisTlsSettings = field(default_factory=RedisTlsSettings)
    sentinel_address: tuple[str, ...] = ()
    sentinel_master_name: str = ""
    sentinel_user: str = ""
    sentinel_password: str = ""
    sentinel_client_name: str = ""
    cluster_address: tuple[str, ...] = ()
    connect_timeout: float = 1.0
    io_timeout: float = 4.0
    presence_ttl: float = 60.0


@dataclass(frozen=True, slots=True)
class EngineSettings:
    type: str = "memory"
    redis: RedisSettings = field(default_factory=RedisSettings)


@dataclass(frozen=True, slots=True)
class OpenTelemetrySettings:
    """OpenTelemetry tracing, exported over OTLP as configured by the standard ``OTEL_*``
    environment variables (docs/operations.md "Tracing with OpenTelemetry"). ``api``: a server
    span per server API request (HTTP and gRPC; a child of the request's ``traceparent``) and a
    ``publish`` span per publication; ``consuming``: a span per command of the async consumers.
    Both need ``enabled``."""

    enabled: bool = False
    api: bool = False
    consuming: bool = False


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """``name`` is resolved at load time to ``<hostname>_<http_server.port>`` when not set."""

    name: str = ""


@dataclass(frozen=True, slots=True)
class LogSettings:
    """``level``: Centrifugo's names, trace, debug, info, warn, error, fatal or none (lower-cased
    at load). ``file``: append the log to this file instead of stderr ("" = stderr)."""

    level: str = "info"
    file: str = ""


@dataclass(frozen=True, slots=True)
class RpcPingSettings:
    enabled: bool = False
    method: str = "ping"


@dataclass(frozen=True, slots=True)
class RpcOptions:
    """``rpc.without_namespace`` (``name == ""``) or an entry of ``rpc.namespaces``."""

    name: str = field(default="", metadata=DERIVED)
    proxy_enabled: bool = False
    proxy_name: str = ""


@dataclass(frozen=True, slots=True)
class RpcSettings:
    ping: RpcPingSettings = field(default_factory=RpcPingSettings)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    without_namespace: RpcOptions = field(default_factory=RpcOptions)
    namespaces: tuple[RpcOptions, ...] = ()
    namespace_boundary: str = ":"

    def options(self, method: str) -> RpcOptions | None:
        """The options of an RPC method: the part before ``namespace_boundary`` names the
        namespace; no boundary ⇒ ``without_namespace``; unknown namespace ⇒ None."""
        name, sep, _ = method.partition(self.namespace_boundary) if self.namespace_boundary else ("", "", "")
        if not sep:
            return self.without_namespace
        return next((ns for ns in self.namespaces if ns.name == name), None)


def _stream(prefix: str) -> StreamTransportSettings:
    return StreamTransportSettings(handler_prefix=prefix)


@dataclass(frozen=True, slots=True)
class Settings:
    """The whole validated configuration. Build it with ``gateway.config.loading.load_settings``;
    ``Settings()`` alone is the all-defaults value without derived fields resolved."""

    client: ClientSettings = field(default_factory=ClientSettings)
    channel: ChannelSettings = field(default_factory=ChannelSettings)
    http_server: HttpServerSettings = field(default_factory=HttpServerSettings)
    http_api: HttpApiSettings = field(default_factory=HttpApiSettings)
    grpc_api: GrpcApiSettings = field(default_factory=GrpcApiSettings)
    websocket: WebSocketSettings = field(default_factory=WebSocketSettings)
    sse: StreamTransportSettings = field(default_factory=lambda: _stream("/connection/sse"))
    http_stream: StreamTransportSettings = field(default_factory=lambda: _stream("/connection/http_stream"))
    emulation: EmulationSettings = field(default_factory=EmulationSettings)
    uni_sse: StreamTransportSettings = field(default_factory=lambda: _stream("/connection/uni_sse"))
    uni_http_stream: StreamTransportSettings = field(
        default_factory=lambda: _stream("/connection/uni_http_stream")
    )
    uni_websocket: UniWebSocketSettings = field(default_factory=UniWebSocketSettings)
    init: InitSettings = field(default_factory=InitSettings)
    admin: AdminSettings = field(default_factory=AdminSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    opentelemetry: OpenTelemetrySettings = field(default_factory=OpenTelemetrySettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    shutdown: ShutdownSettings = field(default_factory=ShutdownSettings)
    node: NodeSettings = field(default_factory=NodeSettings)
    log: LogSettings = field(default_factory=LogSettings)
    rpc: RpcSettings = field(default_factory=RpcSettings)
    proxies: tuple[NamedProxySettings, ...] = ()
    consumers: tuple[ConsumerSettings, ...] = ()
    shared_poll: SharedPollSettings = field(default_factory=SharedPollSettings)
    webhooks: tuple[WebhookSettings, ...] = field(default=(), metadata=EXTENSION)
    occupancy: OccupancySettings = field(default_factory=OccupancySettings, metadata=EXTENSION)

    def channel_options(self, channel: str) -> ChannelOptions | None:
        """Resolve a channel's options by Centrifugo's rule (PROTOCOL.md §7): strip one leading
        ``channel.private_prefix``; the namespace is the part before the first
        ``channel.namespace_boundary``; no boundary ⇒ ``without_namespace``; unknown namespace ⇒
        None (the caller answers 102). Does not check length or channel_regex."""
        ch = self.channel
        if ch.private_prefix and channel.startswith(ch.private_prefix):
            channel = channel[len(ch.private_prefix) :]
        name, sep, _ = channel.partition(ch.namespace_boundary)
        if not sep:
            return ch.without_namespace
        return ch.by_name.get(name)

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as plain JSON-able data for logging: derived fields left
        out, non-empty secrets (keys, passwords) replaced by ``"***"``, passwords inside Redis
        URLs masked."""
        result = _redact(self)
        assert isinstance(result, dict)
        return result


def _redact(value: object, name: str = "") -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _redact(getattr(value, f.name), f.name)
            for f in dataclasses.fields(value)
            if not f.metadata.get("derived") or f.name == "name"
        }
    if isinstance(value, tuple):
        return [_redact(item, name) for item in value]
    if isinstance(value, Mapping):  # static_headers: header values may carry credentials
        return {k: "***" if name in SECRET_OPTIONS and v else v for k, v in value.items()}
    if isinstance(value, str):
        if name in SECRET_OPTIONS and value:
            return "***"
        return _URL_PASSWORD.sub(r"\1***@", value)
    return value
