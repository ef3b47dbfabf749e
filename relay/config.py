"""Relay configuration: a JSON or YAML file, then ``TASKCAST_RELAY_<OPTION>`` environment overrides.

The option set and its checks; reading and coercion are the loader shared with the Status API
(``status_api/config_file.py``). The only relay module that reads files or the environment for
settings. Options are flat (see ``docs/relay.md`` for each one); an environment value is parsed as
JSON when it parses, else taken as a string (``TASKCAST_RELAY_BATCH_SIZE=200``; string options such
as ``TASKCAST_RELAY_GATEWAY_API_KEY=…`` always keep the raw text). Unknown options, wrong types and
impossible combinations refuse to start with a :class:`ConfigError` that names the option. The API
key never appears in ``repr`` or in error messages.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from status_api import config_file, redis_client
from status_api.config_file import ConfigError
from status_api.storage.database import LOCK_WAIT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS
from status_api.storage.outbox import WAKE_CHANNEL

__all__ = ["ConfigError", "RelayConfig", "build_config", "load_config"]

ENV_PREFIX = "TASKCAST_RELAY_"


def default_relay_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


#: The longest ``linger_ms``: a wait meant to gather a few events, never a latency of its own.
MAX_LINGER_MS = 1000
#: The longest ``claim_spacing_ms``: a pacing of claims, never a latency of its own.
MAX_CLAIM_SPACING_MS = 100
#: The values of ``event_loop``.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def uvloop_available() -> bool:
    """Whether uvloop can be imported (it ships with ``uvicorn[standard]`` on CPython/Linux)."""
    return importlib.util.find_spec("uvloop") is not None


#: The longest ``mark_defer_ms``: a published row stays PROCESSING (leased) at most this long.
MAX_MARK_DEFER_MS = 5000


@dataclass(frozen=True, slots=True)
class RelayConfig:
    database_url: str
    gateway_api_url: str
    gateway_api_key: str = field(default="", repr=False)
    relay_id: str = field(default_factory=default_relay_id)
    batch_size: int = 100
    concurrency: int = 2
    poll_interval_seconds: float = 0.5
    lease_seconds: float = 30.0
    publish_timeout_seconds: float = 5.0
    backoff_base_seconds: float = 0.5
    backoff_max_seconds: float = 60.0
    #: Upper bound of the pause between probes of a gateway that failed as a whole.
    gateway_probe_max_seconds: float = 1.0
    max_attempts: int = 20
    collapse_superseded_progress: bool = False
    retention_seconds: float = 7 * 24 * 3600.0
    purge_interval_seconds: float = 300.0
    stats_interval_seconds: float = 5.0
    shutdown_timeout_seconds: float = 10.0
    db_pool_size: int = 5
    db_lock_wait_timeout_seconds: int = LOCK_WAIT_TIMEOUT_SECONDS
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    log_level: str = "info"
    #: Post-commit wake-up (docs/relay.md "Wake-up"): subscribe to ``wake_channel`` on this Redis;
    #: null = poll only.
    wake_redis_url: str | None = None
    wake_channel: str = WAKE_CHANNEL
    #: The safety-net poll interval while subscribed to the wake-up channel (a lost hint costs at
    #: most this / ``concurrency``; never shorter than ``poll_interval_seconds``, which applies
    #: whenever the relay is not subscribed).
    wake_poll_interval_seconds: float = 2.0
    #: Wake-up without Redis (docs/relay.md "Wake-up without Redis"): ``host:port`` of a UDP socket
    #: where the Status API sends hints (its ``wake.udp_targets``); null = none. While bound, the
    #: safety-net poll runs at ``wake_poll_interval_seconds``, as while subscribed to Redis.
    wake_udp_listen: str | None = None
    #: After a wake-up, how long the woken loop waits before it claims (docs/relay.md "Linger"),
    #: so that one claim carries the events committed meanwhile; wake-ups during the wait are
    #: absorbed by it. 0 = claim at once. Never delays a row by more than this.
    linger_ms: int = 0
    #: While this relay's hints arrive faster than one per this many ms on average, the shortest
    #: time between the starts of two claims made for wake-ups (docs/relay.md "Claim spacing"): a
    #: wake-up that comes sooner waits for the slot, and every wake-up meanwhile rides on that one
    #: claim. Below that rate nothing waits; polls and backlogs are never spaced. 0 = off.
    claim_spacing_ms: int = 20
    #: How long the mark of a fully published batch may wait to ride with the relay's next claim
    #: (docs/relay.md "Deferred marks"): the claim's own request carries it; a timer marks it
    #: alone when no claim comes within this time; a graceful stop marks it. 0 = mark at once.
    #: Never more than a quarter of ``lease_seconds`` (:attr:`mark_defer_seconds`).
    mark_defer_ms: int = 500
    #: OpenTelemetry tracing of the publishes (docs/operations.md "Tracing with OpenTelemetry");
    #: the exporter is configured by the standard ``OTEL_*`` environment variables.
    opentelemetry_enabled: bool = False
    #: The event loop of ``taskcast relay run`` (docs/relay.md "What a claim costs"): ``uvloop``
    #: (cheaper socket wake-ups than asyncio's), ``asyncio`` (the standard library's), or ``auto``
    #: = uvloop when it is installed (it is with the package's dependencies), else asyncio.
    event_loop: str = "auto"

    @property
    def mark_defer_seconds(self) -> float:
        """The deferred mark's bound in force: ``mark_defer_ms``, at most ``lease_seconds / 4`` (a
        published row waits for its mark under its lease, which must stay far from expiring)."""
        return min(self.mark_defer_ms / 1000, self.lease_seconds / 4)


_POSITIVE = (
    "batch_size",
    "concurrency",
    "poll_interval_seconds",
    "lease_seconds",
    "publish_timeout_seconds",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "gateway_probe_max_seconds",
    "max_attempts",
    "retention_seconds",
    "purge_interval_seconds",
    "stats_interval_seconds",
    "shutdown_timeout_seconds",
    "wake_poll_interval_seconds",
    "db_pool_size",
    "db_lock_wait_timeout_seconds",
)


def _validate(cfg: RelayConfig) -> None:
    for name in _POSITIVE:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name}: must be > 0")
    if not cfg.database_url.strip():
        raise ConfigError("database_url: required")
    if not cfg.gateway_api_url.startswith(("http://", "https://")):
        raise ConfigError("gateway_api_url: must be an http(s) URL such as http://gateway:8000/api")
    if cfg.backoff_max_seconds < cfg.backoff_base_seconds:
        raise ConfigError("backoff_max_seconds: must be >= backoff_base_seconds")
    if cfg.lease_seconds < 2 * cfg.publish_timeout_seconds:
        # A lease shorter than a slow publish would let another replica take a row mid-publish.
        raise ConfigError("lease_seconds: must be at least 2 x publish_timeout_seconds")
    if not cfg.relay_id or len(cfg.relay_id) > 128:
        raise ConfigError("relay_id: must be 1..128 characters (it is stored in task_outbox.locked_by)")
    if cfg.db_lock_wait_timeout_seconds >= READ_TIMEOUT_SECONDS:
        # A lock wait must end as the retryable error 1205 before the read timeout drops the link.
        raise ConfigError(
            f"db_lock_wait_timeout_seconds: must be < {READ_TIMEOUT_SECONDS:g} (the read timeout)"
        )
    if not 0 <= cfg.linger_ms <= MAX_LINGER_MS:
        raise ConfigError(f"linger_ms: must be 0..{MAX_LINGER_MS} (0 = off)")
    if not 0 <= cfg.claim_spacing_ms <= MAX_CLAIM_SPACING_MS:
        raise ConfigError(f"claim_spacing_ms: must be 0..{MAX_CLAIM_SPACING_MS} (0 = off)")
    if not 0 <= cfg.mark_defer_ms <= MAX_MARK_DEFER_MS:
        raise ConfigError(f"mark_defer_ms: must be 0..{MAX_MARK_DEFER_MS} (0 = mark at once)")
    if cfg.metrics_port is not None and not 0 <= cfg.metrics_port <= 65535:
        raise ConfigError("metrics_port: must be 0..65535 (0 picks a free port)")
    _validate_wake(cfg)
    if cfg.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level: must be debug, info, warning or error")
    _validate_loop(cfg)


def _validate_loop(cfg: RelayConfig) -> None:
    if cfg.event_loop not in EVENT_LOOPS:
        raise ConfigError(f"event_loop: must be {', '.join(EVENT_LOOPS[:-1])} or {EVENT_LOOPS[-1]}")
    if cfg.event_loop == "uvloop" and not uvloop_available():
        raise ConfigError("event_loop: uvloop is not installed (pip install uvloop, or use auto or asyncio)")


def _validate_wake(cfg: RelayConfig) -> None:
    """The wake-up options: a Redis URL, its channel, a UDP listen address."""
    if cfg.wake_redis_url is not None:
        try:
            redis_client.check(cfg.wake_redis_url)
        except redis_client.RedisUrlError as exc:
            raise ConfigError(f"wake_redis_url: {exc} (or null)") from None
    if not cfg.wake_channel:
        raise ConfigError("wake_channel: must not be empty")
    if cfg.wake_udp_listen is not None:
        try:
            host_port(cfg.wake_udp_listen)
        except ValueError:
            raise ConfigError("wake_udp_listen: must be host:port (port 0..65535) or null") from None


def host_port(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too; port 0..65535) → (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(text)
    return host, int(port)


def build_config(raw: Mapping[str, Any]) -> RelayConfig:
    """Validate a mapping of options into a :class:`RelayConfig`.

    Raises:
        ConfigError: naming the offending option.
    """
    for required in ("database_url", "gateway_api_url"):
        if raw.get(required) in (None, ""):
            raise ConfigError(f"{required}: required")
    cfg = config_file.build(RelayConfig, raw)
    _validate(cfg)
    return cfg


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> RelayConfig:
    """Read ``path`` (``.json``, ``.yaml``/``.yml``), apply environment overrides, validate.

    Raises:
        ConfigError: naming the offending option (or the unreadable file).
    """
    env = os.environ if environ is None else environ
    return build_config(config_file.load_raw(RelayConfig, path, ENV_PREFIX, env))
