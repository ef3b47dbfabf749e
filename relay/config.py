"""Relay configuration: a JSON or YAML file, then ``TASKCAST_RELAY_<OPTION>`` environment overrides.

The only relay module that reads files or the environment for settings. Options are flat (see
``docs/relay.md`` for each one); an environment value is parsed as JSON when it parses, else taken
as a string (``TASKCAST_RELAY_BATCH_SIZE=200``, ``TASKCAST_RELAY_GATEWAY_API_KEY=…``). Unknown
options, wrong types and impossible combinations refuse to start with a :class:`ConfigError` that
names the option. The API key never appears in ``repr`` or in error messages.
"""

from __future__ import annotations

import json
import os
import socket
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "TASKCAST_RELAY_"


class ConfigError(ValueError):
    """A configuration problem; the message names the option."""


def default_relay_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


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
    max_attempts: int = 20
    collapse_superseded_progress: bool = False
    retention_seconds: float = 7 * 24 * 3600.0
    purge_interval_seconds: float = 300.0
    stats_interval_seconds: float = 5.0
    shutdown_timeout_seconds: float = 10.0
    db_pool_size: int = 5
    db_lock_wait_timeout_seconds: int = 5
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    log_level: str = "info"


_SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
_POSITIVE = (
    "batch_size",
    "concurrency",
    "poll_interval_seconds",
    "lease_seconds",
    "publish_timeout_seconds",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "max_attempts",
    "retention_seconds",
    "purge_interval_seconds",
    "stats_interval_seconds",
    "shutdown_timeout_seconds",
    "db_pool_size",
    "db_lock_wait_timeout_seconds",
)


def _coerce(name: str, value: Any, tp: Any) -> Any:
    args = typing.get_args(tp)
    if args:  # ``X | None``
        if value is None:
            return None
        tp = next(a for a in args if a is not type(None))
    ok = isinstance(value, _SCALARS[tp]) and (tp is bool or not isinstance(value, bool))
    if not ok:
        shown = "<hidden>" if name == "gateway_api_key" else repr(value)
        raise ConfigError(f"{name}: expected {tp.__name__}, got {shown}")
    return float(value) if tp is float else value


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
    if cfg.metrics_port is not None and not 0 <= cfg.metrics_port <= 65535:
        raise ConfigError("metrics_port: must be 0..65535 (0 picks a free port)")
    if cfg.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level: must be debug, info, warning or error")


def build_config(raw: Mapping[str, Any]) -> RelayConfig:
    """Validate a mapping of options into a :class:`RelayConfig`.

    Raises:
        ConfigError: naming the offending option.
    """
    hints = typing.get_type_hints(RelayConfig)
    known = {f.name for f in fields(RelayConfig)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{key}: unknown option")
    for required in ("database_url", "gateway_api_url"):
        if raw.get(required) in (None, ""):
            raise ConfigError(f"{required}: required")
    kwargs = {k: _coerce(k, v, hints[k]) for k, v in raw.items()}
    cfg = RelayConfig(**kwargs)
    _validate(cfg)
    return cfg


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    hints = typing.get_type_hints(RelayConfig)
    out: dict[str, Any] = {}
    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        name = var[len(ENV_PREFIX) :].lower()
        if hints.get(name) is str:
            out[name] = text  # a numeric-looking key or id stays a string
            continue
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> RelayConfig:
    """Read ``path`` (``.json``, ``.yaml``/``.yml``), apply environment overrides, validate.

    Raises:
        ConfigError: naming the offending option (or the unreadable file).
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
            raise ConfigError(f"config file {p}: not valid {p.suffix.lstrip('.') or 'JSON'}") from exc
        if loaded is not None:
            if not isinstance(loaded, dict):
                raise ConfigError(f"config file {p}: top level must be a mapping")
            raw = loaded
    raw.update(_from_env(os.environ if environ is None else environ))
    return build_config(raw)
