"""Status API configuration: a JSON or YAML file, then environment overrides.

The only module that reads files or the environment for settings. Every option is documented in
``docs/status-api.md``. An environment variable ``TASKCAST_STATUS_API_<SECTION>__<OPTION>`` (double
underscore between section and option, e.g. ``TASKCAST_STATUS_API_DATABASE__URL``) overrides the
file; its value is parsed as JSON when it parses, else taken as a string. Unknown options, wrong
types and missing secrets refuse to start with a :class:`ConfigError` naming the option.
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "TASKCAST_STATUS_API_"


class ConfigError(ValueError):
    """A configuration problem; the message names the option."""


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
    log_level: str = "info"


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
class LimitsConfig:
    max_data_bytes: int = 8192
    user_message_limit: int = 200


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
    schema_dir: str | None = None


_SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}


def _coerce(name: str, value: Any, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(name, value, inner[0])
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{name}: expected a list, got {type(value).__name__}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(f"{name}[{i}]", v, item_tp) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {type(value).__name__}")
        return value
    if tp in _SCALARS:
        ok = isinstance(value, _SCALARS[tp]) and (tp is bool or not isinstance(value, bool))
        if not ok:
            raise ConfigError(f"{name}: expected {tp.__name__}, got {value!r}")
        return float(value) if tp is float else value
    if isinstance(tp, type) and is_dataclass(tp):
        return _build(name, value, tp)
    raise ConfigError(f"{name}: unsupported option type")


def _build(prefix: str, raw: Any, cls: type[Any]) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{prefix + '.' if prefix else ''}{key}: unknown option")
    kwargs = {}
    for f in fields(cls):
        if f.name in raw:
            kwargs[f.name] = _coerce(f"{prefix + '.' if prefix else ''}{f.name}", raw[f.name], hints[f.name])
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{prefix}.{f.name}: required")
    return cls(**kwargs)


def _merge_env(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in var[len(ENV_PREFIX) :].split("__") if p]
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        node = raw
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(path)}: {part} is not a section (from {var})")
            node = child
        if path:
            # A JSON-looking value for a string option (e.g. a numeric secret) stays a string.
            node[path[-1]] = text if isinstance(value, int | float) and _is_str_option(path) else value
    return raw


def _is_str_option(path: list[str]) -> bool:
    cls: Any = Config
    for part in path:
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        cls = hints[part]
    return cls in (str, str | None)


def _validate(cfg: Config) -> None:
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
    _validate_retention(cfg.retention)
    if cfg.reconciler.heartbeat_timeout_seconds <= 0:
        raise ConfigError("reconciler.heartbeat_timeout_seconds: must be > 0")


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
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"config file {p}: {exc.strerror}") from exc
        try:
            loaded = yaml.safe_load(text) if p.suffix in (".yaml", ".yml") else json.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"config file {p}: not valid {p.suffix.lstrip('.') or 'JSON'}: {exc}") from exc
        if loaded is not None:
            if not isinstance(loaded, dict):
                raise ConfigError(f"config file {p}: top level must be a mapping")
            raw = loaded
    raw = _merge_env(raw, os.environ if environ is None else environ)
    cfg: Config = _build("", raw, Config)
    _validate(cfg)
    return cfg
