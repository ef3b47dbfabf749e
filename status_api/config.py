"""Status API configuration: a JSON or YAML file, then environment overrides.

The option set and its cross-checks; reading and coercion are ``status_api/config_file.py``
(shared with the relay). Every option is documented in ``docs/status-api.md``. An environment
variable ``TASKCAST_STATUS_API_<SECTION>__<OPTION>`` (double underscore between section and
option, e.g. ``TASKCAST_STATUS_API_DATABASE__URL``) overrides the file. Unknown options, wrong
types and missing secrets refuse to start with a :class:`ConfigError` naming the option.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from status_api import config_file, redis_client
from status_api.config_file import ConfigError
from status_api.cors import OriginError, normalize_origin

__all__ = ["Config", "ConfigError", "build_config", "load_config"]

ENV_PREFIX = "TASKCAST_STATUS_API_"


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    url: str = "sqlite+aiosqlite:///./taskcast-status.db"
    pool_size: int = 10
    max_overflow: int = 20
    auto_init: bool = True
    echo: bool = False


@dataclass(frozen=True, slots=True)
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 8100
    max_body_bytes: int = 65536
    #: Request line + headers; a larger head is answered 431 (the gateway's bound).
    max_head_bytes: int = 1048576
    #: A connection must deliver a whole request (head and body) within this many seconds of
    #: opening or of the request's first byte, else 408 / closed; 0 disables the deadline.
    request_timeout_seconds: float = 10.0
    #: Arrays/objects a JSON body may nest; deeper → 422 JSON_TOO_DEEP.
    max_json_depth: int = 32
    log_level: str = "info"
    #: One line per request on ``uvicorn.access`` when the level is ``info`` or ``debug`` (each
    #: event POST too: ~40 µs of CPU per event at 667 events/s); false keeps the level's other
    #: lines and drops those.
    access_log: bool = True
    #: SIGTERM/SIGINT: in-flight requests may finish, then the reconciler stops and the wake-up
    #: sender and the database pool close; the process exits within this many seconds (plus about
    #: a second), abandoning what is still waiting (on a stalled database or Redis), logged.
    shutdown_timeout_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class InternalAuthConfig:
    mode: str = "jwt"
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    jwt_algorithms: list[str] = field(default_factory=lambda: ["HS256"])
    audience: str | None = None
    issuer: str | None = None
    keys: list[dict[str, Any]] = field(default_factory=list)
    rate_per_second: float = 2000.0
    burst: float = 4000.0


@dataclass(frozen=True, slots=True)
class ExecutionTokenConfig:
    secret: str | None = None
    ttl_seconds: int = 3600
    issuer: str = "taskcast-status-api"
    #: A step attempt's tokens are renewable until this long after its first token was issued.
    max_lifetime_seconds: int = 604800
    #: A token that expired at most this long ago may still be renewed (a worker paused past exp).
    renew_grace_seconds: int = 300
    #: A STEP_HEARTBEAT whose token expires within this many seconds is answered a renewed token;
    #: None: half of ``ttl_seconds``; 0: never (the renewal endpoint only).
    heartbeat_renewal_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class UserAuthConfig:
    mode: str = "hs"
    secret: str | None = None
    public_key: str | None = None
    jwks_url: str | None = None
    algorithms: list[str] = field(default_factory=lambda: ["HS256"])
    audience: str | None = None
    issuer: str | None = None
    tenant_claim: str = "tenant"
    user_claim: str = "sub"
    projects_claim: str = "projects"


@dataclass(frozen=True, slots=True)
class RealtimeConfig:
    algorithm: str = "HS256"
    secret: str | None = None
    private_key: str | None = None
    audience: str | None = None
    issuer: str | None = None
    connection_ttl_seconds: int = 300
    subscription_ttl_seconds: int = 300
    max_detail_subscriptions_per_session: int = 20
    #: Distinct tasks with a live detail lease over all of a user's sessions (seed §6.5).
    max_detail_subscriptions_per_user: int = 20
    max_sessions_per_user: int = 20
    subject_format: str = "{tenant}/{user}"


@dataclass(frozen=True, slots=True)
class ReconcilerConfig:
    enabled: bool = True
    interval_seconds: float = 10.0
    heartbeat_timeout_seconds: float = 60.0
    batch_size: int = 200


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """Event-log retention: timeline entries older than ``event_log_days`` are purged (on the
    reconciler's schedule, every ``interval_seconds``; or ``taskcast status-api purge-events``).
    None keeps the event log forever."""

    event_log_days: float | None = None
    interval_seconds: float = 3600.0
    batch_size: int = 500


@dataclass(frozen=True, slots=True)
class IngestConfig:
    """Group commit of event ingestion (``status_api/service/ingest.py``): up to ``batch_max``
    queued events share one transaction, ``batch_runners`` such transactions run at once (each holds
    one pooled connection). ``batch_max: 1`` turns batching off (one transaction per event).
    ``commit_delay_ms``: how long a batch may wait for the events the arrival rate promises
    (``status_api/group_commit.py``; 0 = never wait)."""

    batch_max: int = 64
    batch_runners: int = 3
    commit_delay_ms: float = 10.0


@dataclass(frozen=True, slots=True)
class ProgressConfig:
    """The server-side progress window (``status_api/domain/progress_window.py``): at most one
    STEP_PROGRESS version per task is published per ``min_interval_ms``, the last one always (held
    back to the window's end); a task type's ``progressMinIntervalMs`` overrides it; 0 = no window."""

    min_interval_ms: int = 1000


@dataclass(frozen=True, slots=True)
class WakeConfig:
    """Post-commit wake-up of the relays (docs/relay.md "Wake-up"): with ``redis_url`` set, a
    commit that wrote outbox rows PUBLISHes a hint on ``channel`` (the relays' ``wake_channel``);
    null = no hint, the relays publish at their poll interval. Without Redis, ``udp_targets``
    (``host:port`` of each relay's ``wake_udp_listen``) gets one datagram per commit burst, sent to
    one relay at a time, round-robin (docs/relay.md "Wake-up without Redis")."""

    redis_url: str | None = None
    channel: str = "taskcast:outbox:wake"
    udp_targets: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_data_bytes: int = 8192
    user_message_limit: int = 200
    #: Task attempts a task may reach when its operation definitions set no ``maxTaskAttempts``.
    max_task_attempts: int = 10


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """``POST /api/telemetry/client`` (status_api/telemetry.py): client-js reports. ``max_body_bytes``
    and ``max_samples`` bound one report; ``reports_per_minute`` is per user and process."""

    enabled: bool = True
    max_body_bytes: int = 16384
    max_samples: int = 200
    reports_per_minute: float = 6.0


@dataclass(frozen=True, slots=True)
class OpenTelemetryConfig:
    """OpenTelemetry tracing (httpwire/tracing.py), off by default: the event route, the ingest
    transaction and the outbox rows' trace context. The exporter is configured by the standard
    ``OTEL_*`` environment variables (docs/operations.md "Tracing with OpenTelemetry")."""

    enabled: bool = False


@dataclass(frozen=True, slots=True)
class SubscribeProxyConfig:
    """The Centrifugo subscribe proxy for ``task_detail:`` channels (status_api/subscribe_proxy.py),
    authenticated by ``secret`` in the ``header`` request header; off unless ``enabled``."""

    enabled: bool = False
    secret: str | None = None
    header: str = "X-Taskcast-Proxy-Secret"
    #: Seconds a granted subscription holds its quota slot (and ``expire_at`` when ``refresh``);
    #: null = ``realtime.subscription_ttl_seconds``.
    lease_seconds: int | None = None
    #: Answer ``expire_at`` so the gateway asks ``/proxy/v1/sub-refresh`` (channel.proxy.sub_refresh).
    refresh: bool = True


@dataclass(frozen=True, slots=True)
class CorsConfig:
    """Browser apps on their own origin (status_api/cors.py). Exact origins only
    (``scheme://host[:port]``); empty = no CORS (same origin or a reverse proxy)."""

    allowed_origins: list[str] = field(default_factory=list)
    allow_credentials: bool = True
    max_age_seconds: int = 600


@dataclass(frozen=True, slots=True)
class BoardConfig:
    """The task board page (``/board/``): where its browsers reach the gateway."""

    #: The gateway's base URL as browsers reach it (``http(s)://host[:port][/path]``); ``""``: the
    #: page's own origin (a reverse proxy routes ``/connection/`` and ``/emulation`` to the
    #: gateways, as deploy/nginx does); unset: the page's host on port 8000. The page's
    #: ``?gateway=`` parameter overrides it.
    gateway_url: str | None = None


@dataclass(frozen=True, slots=True)
class Config:
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    internal_auth: InternalAuthConfig = field(default_factory=InternalAuthConfig)
    execution_token: ExecutionTokenConfig = field(default_factory=ExecutionTokenConfig)
    user_auth: UserAuthConfig = field(default_factory=UserAuthConfig)
    realtime: RealtimeConfig = field(default_factory=RealtimeConfig)
    reconciler: ReconcilerConfig = field(default_factory=ReconcilerConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    wake: WakeConfig = field(default_factory=WakeConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    subscribe_proxy: SubscribeProxyConfig = field(default_factory=SubscribeProxyConfig)
    cors: CorsConfig = field(default_factory=CorsConfig)
    board: BoardConfig = field(default_factory=BoardConfig)
    opentelemetry: OpenTelemetryConfig = field(default_factory=OpenTelemetryConfig)
    schema_dir: str | None = None


def _build(prefix: str, raw: Any, cls: type[Any]) -> Any:
    """Kept for callers of the old private name; use :func:`build_config`."""
    return config_file.build(cls, raw, prefix)


def _validate_http(http: HttpConfig) -> None:
    if not 1 <= http.max_json_depth <= 200:
        raise ConfigError("http.max_json_depth: must be 1..200 (encoders refuse deeper documents)")
    if http.max_head_bytes < 8192:
        raise ConfigError("http.max_head_bytes: must be >= 8192")
    if http.max_body_bytes < 1024:
        raise ConfigError("http.max_body_bytes: must be >= 1024")
    if http.request_timeout_seconds < 0:
        raise ConfigError("http.request_timeout_seconds: must be >= 0 (0 disables the deadline)")
    if http.shutdown_timeout_seconds <= 0:
        raise ConfigError("http.shutdown_timeout_seconds: must be > 0")


def _validate_execution_token(et: ExecutionTokenConfig) -> None:
    if et.ttl_seconds < 1:
        raise ConfigError("execution_token.ttl_seconds: must be >= 1")
    if et.max_lifetime_seconds < et.ttl_seconds:
        raise ConfigError("execution_token.max_lifetime_seconds: must be >= execution_token.ttl_seconds")
    if et.renew_grace_seconds < 0:
        raise ConfigError("execution_token.renew_grace_seconds: must be >= 0")
    if et.heartbeat_renewal_seconds is not None and not 0 <= et.heartbeat_renewal_seconds <= et.ttl_seconds:
        raise ConfigError("execution_token.heartbeat_renewal_seconds: must be 0..execution_token.ttl_seconds")


def _validate_limits(limits: LimitsConfig) -> None:
    if not 1 <= limits.max_task_attempts <= 1000:
        raise ConfigError("limits.max_task_attempts: must be 1..1000")


def _validate(cfg: Config) -> None:
    _validate_limits(cfg.limits)
    _validate_http(cfg.http)
    if cfg.internal_auth.mode not in ("jwt", "keys"):
        raise ConfigError("internal_auth.mode: must be jwt or keys")
    if cfg.internal_auth.mode == "jwt" and not (
        cfg.internal_auth.jwt_secret or cfg.internal_auth.jwt_public_key
    ):
        raise ConfigError("internal_auth.jwt_secret: required when internal_auth.mode is jwt")
    if cfg.internal_auth.mode == "keys" and not cfg.internal_auth.keys:
        raise ConfigError("internal_auth.keys: required when internal_auth.mode is keys")
    for i, k in enumerate(cfg.internal_auth.keys):
        if "producer_id" not in k or not ("key" in k or "key_sha256" in k):
            raise ConfigError(f"internal_auth.keys[{i}]: needs producer_id and key (or key_sha256)")
    if not cfg.execution_token.secret or len(cfg.execution_token.secret) < 32:
        raise ConfigError("execution_token.secret: required, at least 32 characters")
    _validate_execution_token(cfg.execution_token)
    if cfg.user_auth.mode not in ("hs", "rs", "jwks", "dev"):
        raise ConfigError("user_auth.mode: must be hs, rs, jwks or dev")
    if cfg.user_auth.mode == "hs" and not cfg.user_auth.secret:
        raise ConfigError("user_auth.secret: required when user_auth.mode is hs")
    if cfg.user_auth.mode == "rs" and not cfg.user_auth.public_key:
        raise ConfigError("user_auth.public_key: required when user_auth.mode is rs")
    if cfg.user_auth.mode == "jwks" and not cfg.user_auth.jwks_url:
        raise ConfigError("user_auth.jwks_url: required when user_auth.mode is jwks")
    if not (cfg.realtime.secret or cfg.realtime.private_key):
        raise ConfigError(
            "realtime.secret: required (the gateway's client.token.hmac_secret_key), or realtime.private_key"
        )
    if cfg.realtime.max_detail_subscriptions_per_session < 1:
        raise ConfigError("realtime.max_detail_subscriptions_per_session: must be >= 1")
    if cfg.realtime.max_detail_subscriptions_per_user < 1:
        raise ConfigError("realtime.max_detail_subscriptions_per_user: must be >= 1")
    _validate_retention(cfg.retention)
    _validate_ingest(cfg.ingest)
    _validate_progress(cfg.progress)
    _validate_telemetry(cfg.telemetry, cfg.subscribe_proxy)
    _validate_wake(cfg.wake)
    _validate_cors(cfg.cors)
    _validate_board(cfg.board)
    if cfg.reconciler.heartbeat_timeout_seconds <= 0:
        raise ConfigError("reconciler.heartbeat_timeout_seconds: must be > 0")


def build_config(raw: Mapping[str, Any]) -> Config:
    """Validate an options mapping (the file's shape) into a :class:`Config`; no environment.

    Raises:
        ConfigError: naming the offending option.
    """
    cfg = config_file.build(Config, raw)
    _validate(cfg)
    return cfg


def _validate_ingest(i: IngestConfig) -> None:
    if i.batch_max < 1:
        raise ConfigError("ingest.batch_max: must be >= 1 (1 = one transaction per event)")
    if i.batch_runners < 1:
        raise ConfigError("ingest.batch_runners: must be >= 1")
    if not 0 <= i.commit_delay_ms <= 100:
        raise ConfigError("ingest.commit_delay_ms: must be 0..100 (0 = a batch never waits)")


def _validate_progress(p: ProgressConfig) -> None:
    if not 0 <= p.min_interval_ms <= 600000:
        raise ConfigError("progress.min_interval_ms: must be 0..600000 (0 = no window)")


def _validate_telemetry(t: TelemetryConfig, p: SubscribeProxyConfig) -> None:
    if not 256 <= t.max_body_bytes <= 1048576:
        raise ConfigError("telemetry.max_body_bytes: must be 256..1048576")
    if not 1 <= t.max_samples <= 10000:
        raise ConfigError("telemetry.max_samples: must be 1..10000")
    if t.reports_per_minute < 0:
        raise ConfigError("telemetry.reports_per_minute: must be >= 0 (0 = unlimited)")
    if p.enabled and (not p.secret or len(p.secret) < 32):
        raise ConfigError("subscribe_proxy.secret: required when enabled, at least 32 characters")
    if p.lease_seconds is not None and p.lease_seconds < 1:
        raise ConfigError("subscribe_proxy.lease_seconds: must be >= 1 (or null)")


def _validate_wake(w: WakeConfig) -> None:
    if w.redis_url is not None:
        try:
            redis_client.check(w.redis_url)
        except redis_client.RedisUrlError as exc:
            raise ConfigError(f"wake.redis_url: {exc} (or null)") from None
    if not w.channel:
        raise ConfigError("wake.channel: must not be empty")
    for i, target in enumerate(w.udp_targets):
        host, sep, port = str(target).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"wake.udp_targets[{i}]: must be host:port")


def _validate_cors(c: CorsConfig) -> None:
    for i, origin in enumerate(c.allowed_origins):
        try:
            normalize_origin(origin)
        except OriginError as exc:
            raise ConfigError(f"cors.allowed_origins[{i}]: {exc}") from None
    if not 0 <= c.max_age_seconds <= 86400:
        raise ConfigError("cors.max_age_seconds: must be 0..86400")


def _validate_board(b: BoardConfig) -> None:
    url = b.gateway_url
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ConfigError(
                'board.gateway_url: must be http(s)://host[:port][/path], "" (same origin) or null'
            )


def _validate_retention(r: RetentionConfig) -> None:
    if r.event_log_days is not None and r.event_log_days <= 0:
        raise ConfigError("retention.event_log_days: must be > 0 (or null to keep the event log)")
    if r.interval_seconds <= 0:
        raise ConfigError("retention.interval_seconds: must be > 0")
    if r.batch_size < 1:
        raise ConfigError("retention.batch_size: must be >= 1")


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (``.json``, ``.yaml``/``.yml``), apply env overrides, validate.

    Raises:
        ConfigError: naming the offending option.
    """
    return build_config(
        config_file.load_raw(Config, path, ENV_PREFIX, os.environ if environ is None else environ)
    )
