"""Loading the gateway's settings: file (JSON/YAML/TOML) + environment → validated ``Settings``.

This is the only gateway module that reads files or the environment. It owns the option tree's
parsing (types, durations, lists), Centrifugo's env-variable rule, unknown-option warnings,
validation (``ConfigError`` names the option and the problem) and derived values (token
algorithms, resolved namespace TTLs, node name). The value types live in ``schema``.
Imports nothing from the rest of the gateway but ``schema``, ``checks`` and
``unsupported`` (the options Taskcast does not implement, with what to do instead).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar, get_args, get_origin

import yaml

from gateway.config.checks import validate_and_derive
from gateway.config.schema import (
    ChannelOptions,
    ConfigError,
    Settings,
)
from gateway.config.unsupported import advice_for, env_advice

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["load_settings", "parse_duration"]

D = TypeVar("D", bound="DataclassInstance")

ENV_PREFIXES = ("TASKCAST_", "CENTRIFUGO_")
"""Checked in this order: a ``TASKCAST_`` variable wins over the same ``CENTRIFUGO_`` one."""

_NAMESPACES_ENV = "CHANNEL_NAMESPACES"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}

# Centrifugo v5 flat names → v6 paths, for the hint in the unknown-option warning.
V5_NAMES: Mapping[str, str] = {
    "token_hmac_secret_key": "client.token.hmac_secret_key",
    "token_hmac_previous_secret_key": "client.token.hmac_previous_secret_key",
    "token_rsa_public_key": "client.token.rsa_public_key",
    "token_ecdsa_public_key": "client.token.ecdsa_public_key",
    "token_jwks_public_endpoint": "client.token.jwks_public_endpoint",
    "token_audience": "client.token.audience",
    "token_issuer": "client.token.issuer",
    "token_user_id_claim": "client.token.user_id_claim",
    "api_key": "http_api.key",
    "api_insecure": "http_api.insecure",
    "allowed_origins": "client.allowed_origins",
    "namespaces": "channel.namespaces",
    "port": "http_server.port",
    "address": "http_server.address",
    "name": "node.name",
    "log_level": "log.level",
    "log_file": "log.file",
    "redis_address": "engine.redis.address",
    "redis_prefix": "engine.redis.prefix",
    "redis_password": "engine.redis.password",
    "global_history_meta_ttl": "channel.history_meta_ttl",
    "global_presence_ttl": "engine.redis.presence_ttl",
    "channel_max_length": "channel.max_length",
    "client_insecure": "client.insecure",
    "client_anonymous": "client.allow_anonymous_connect_without_token",
    "allow_anonymous_connect_without_token": "client.allow_anonymous_connect_without_token",
    "ping_interval": "client.ping_interval",
    "pong_timeout": "client.pong_timeout",
    "client_channel_limit": "client.channel_limit",
    "client_queue_max_size": "client.queue_max_size",
    "client_user_connection_limit": "client.user_connection_limit",
    "client_expired_close_delay": "client.expired_close_delay",
    "client_concurrency": "client.concurrency",
    "websocket_compression": "websocket.compression",
    "websocket_message_size_limit": "websocket.message_size_limit",
    "shutdown_timeout": "shutdown.timeout",
    "engine": "engine.type",
    "prometheus": "prometheus.enabled",
    "health": "health.enabled",
    "sse": "sse.enabled",
    "http_stream": "http_stream.enabled",
    **{opt: f"channel.without_namespace.{opt}" for opt in ("presence", "join_leave", "history_size",
       "history_ttl", "force_recovery", "allow_recovery", "force_positioning", "allow_positioning",
       "allow_subscribe_for_client", "allow_publish_for_client", "allow_publish_for_subscriber",
       "allow_history_for_subscriber", "allow_presence_for_subscriber", "channel_regex")},
}  # fmt: skip


class _EnvValue(str):
    """A string that came from an environment variable, parsed leniently by the converters."""

    __slots__ = ()


@dataclasses.dataclass(slots=True)
class _Context:
    warnings: list[str] = dataclasses.field(default_factory=list)

    def unknown(self, path: str, key: str, *, namespace_option: bool) -> None:
        advice = advice_for(path, namespace_option=key if namespace_option else None)
        if advice is not None:
            self.warnings.append(
                f'unsupported option "{path}" (a Centrifugo option Taskcast ignores: {advice})'
            )
        elif "." not in path and path in V5_NAMES:
            self.warnings.append(f'unknown option "{path}" (Centrifugo v5 name; use {V5_NAMES[path]})')
        else:
            self.warnings.append(f'unknown option "{path}"')


def load_settings(path: str | None, env: Mapping[str, str]) -> tuple[Settings, list[str]]:
    """Read, validate and resolve the gateway configuration.

    ``path``: a ``.json``, ``.yaml``/``.yml`` or ``.toml`` file, or None for defaults + env only.
    ``env``: the environment (pass ``os.environ``); ``TASKCAST_<PATH>`` beats ``CENTRIFUGO_<PATH>``,
    which beats the file, where ``<PATH>`` is the option path upper-cased with ``.`` → ``_``.

    Returns the settings and human-readable warnings (unknown or unsupported options, ignored
    values). Raises:
        ConfigError: unreadable file, wrong type, or an invalid value; the message names the
            option path and the problem.
    """
    raw = _read_file(path) if path else {}
    ctx = _Context()
    _apply_env(raw, env, ctx)
    settings = _build(Settings(), raw, "", ctx)
    settings = validate_and_derive(settings, ctx.warnings)
    return settings, ctx.warnings


def parse_duration(value: object, path: str) -> float:
    """Seconds from a Centrifugo (Go) duration string ("25s", "1m30s", "500ms", "720h") or a plain
    number of seconds (int, float or numeric string). Negative or unparseable ⇒ ConfigError."""
    if isinstance(value, bool):
        raise ConfigError(path, f'expected a duration such as "25s", got {_describe(value)}')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_duration_string(value.strip(), path)
    else:
        raise ConfigError(path, f'expected a duration such as "25s", got {_describe(value)}')
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ConfigError(path, f"must be a non-negative duration, got {value!r}")
    return seconds


def _parse_duration_string(text: str, path: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ConfigError(path, f'invalid duration {text!r} (use e.g. "25s", "1m30s", "500ms", "720h")')
    return total


def _read_file(path: str) -> dict[str, object]:
    file = Path(path)
    suffix = file.suffix.lower()
    try:
        if suffix == ".toml":
            with file.open("rb") as fh:
                data: object = tomllib.load(fh)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        elif suffix == ".json":
            data = json.loads(file.read_text(encoding="utf-8"))
        else:
            raise ConfigError(
                "config file", f"{path}: unsupported extension (use .json, .yaml, .yml or .toml)"
            )
    except OSError as exc:
        raise ConfigError("config file", f"cannot read {path}: {exc.strerror or exc}") from exc
    except (ValueError, yaml.YAMLError) as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise ConfigError("config file", f"{path} is not valid {suffix[1:].upper()}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("config file", f"{path}: the top level must be an object, got {_describe(data)}")
    return data


# --- environment ---------------------------------------------------------------------------


def _env_lookup(env: Mapping[str, str], name: str, seen: set[str]) -> str | None:
    for prefix in ENV_PREFIXES:
        seen.add(prefix + name)
    for prefix in ENV_PREFIXES:
        if prefix + name in env:
            return env[prefix + name]
    return None


def _leaf_paths(cls: type[DataclassInstance], prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Option paths of every scalar/list option under ``cls`` (namespaces excluded)."""
    hints = typing.get_type_hints(cls)
    paths: list[tuple[str, ...]] = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("derived"):
            continue
        hint = hints[f.name]
        path = (*prefix, f.name)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            paths.extend(_leaf_paths(hint, path))
        elif get_args(hint) != (ChannelOptions, Ellipsis):
            paths.append(path)
    return paths


def _set_path(raw: dict[str, object], path: tuple[str, ...], value: object) -> None:
    node = raw
    for key in path[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            return  # the file has a non-object here; building reports that type error
        node = child
    node[path[-1]] = value


def _apply_env(raw: dict[str, object], env: Mapping[str, str], ctx: _Context) -> None:
    seen: set[str] = set()
    for path in _leaf_paths(Settings, ()):
        value = _env_lookup(env, "_".join(path).upper(), seen)
        if value is not None:
            _set_path(raw, path, _EnvValue(value))
    _apply_namespaces_env(raw, env, seen)
    for name in sorted(env):
        if name.startswith("CENTRIFUGO_") and name not in seen:
            found = env_advice(name)
            if found is not None:
                ctx.warnings.append(
                    f'unsupported environment variable "{name}" ({found[0]}: a Centrifugo option '
                    f"Taskcast ignores: {found[1]})"
                )
            else:
                ctx.warnings.append(f'unknown environment variable "{name}"')


def _apply_namespaces_env(raw: dict[str, object], env: Mapping[str, str], seen: set[str]) -> None:
    value = _env_lookup(env, _NAMESPACES_ENV, seen)
    channel = raw.get("channel")
    if value is not None:
        if not isinstance(channel, dict):
            channel = {}
            raw["channel"] = channel
        channel["namespaces"] = _namespaces_from_env(value, channel.get("namespaces"))
    if not isinstance(channel, dict) or not isinstance(channel.get("namespaces"), list):
        return
    options = _leaf_paths(ChannelOptions, ())
    for ns in channel["namespaces"]:
        if not isinstance(ns, dict) or not isinstance(ns.get("name"), str):
            continue
        for env_name in {ns["name"].upper(), ns["name"].upper().replace("-", "_")}:
            for option in options:  # nested sections (map) too: ..._<NS>_MAP_MODE
                found = _env_lookup(env, f"{_NAMESPACES_ENV}_{env_name}_{'_'.join(option).upper()}", seen)
                if found is not None:
                    _set_path(ns, option, _EnvValue(found))


def _namespaces_from_env(value: str, from_file: object) -> list[object]:
    """``"ns1 ns2"``/``"ns1,ns2"`` (names; options of same-named file namespaces are kept) or a
    JSON array of namespace objects or names."""
    path = "channel.namespaces"
    items: list[object]
    if value.lstrip().startswith(("[", "{")):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ConfigError(path, f"environment value is not a valid JSON array: {exc}") from exc
        if not isinstance(parsed, list):
            raise ConfigError(path, "environment value must be a JSON array")
        items = parsed
    else:
        items = [name for name in re.split(r"[\s,]+", value) if name]
    existing = {
        ns["name"]: ns for ns in (from_file if isinstance(from_file, list) else []) if isinstance(ns, dict)
    }
    return [dict(existing.get(item, {"name": item})) if isinstance(item, str) else item for item in items]


# --- building typed values ------------------------------------------------------------------


def _describe(value: object) -> str:
    if value is None:
        return "null"
    kind = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)  # fmt: skip
    return f"{kind} ({value!r})" if isinstance(value, bool | int | float | str) else kind


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _build(default: D, raw: object, path: str, ctx: _Context) -> D:
    """``default`` with the options in ``raw`` applied; unknown keys warn, bad values raise."""
    if not isinstance(raw, Mapping):
        raise ConfigError(path or "config", f"expected an object, got {_describe(raw)}")
    hints = typing.get_type_hints(type(default))
    fields = {f.name: f for f in dataclasses.fields(default) if not f.metadata.get("derived")}
    namespace_option = isinstance(default, ChannelOptions)
    changes: dict[str, object] = {}
    for key_obj, value in raw.items():
        key = str(key_obj)
        key_path = _join(path, key)
        if key not in fields:
            if not (key == "name" and path.endswith("]")):
                ctx.unknown(key_path, key, namespace_option=namespace_option)
            continue
        if (
            fields[key].metadata.get("number_as_string")
            and isinstance(value, int)
            and not isinstance(value, bool)
        ):
            value = str(value)
        changes[key] = _convert(getattr(default, key), hints[key], value, key_path, ctx)
    return dataclasses.replace(default, **changes)


def _convert(default: object, hint: object, value: object, path: str, ctx: _Context) -> object:
    if hint is bool:
        return _to_bool(value, path)
    if hint is int:
        return _to_int(value, path)
    if hint is float:
        return parse_duration(value, path)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {_describe(value)}")
        return str(value)
    if get_origin(hint) is tuple:
        if get_args(hint) == (ChannelOptions, Ellipsis):
            return _build_namespaces(value, path, ctx)
        item = get_args(hint)[0]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            if "name" not in {f.name for f in dataclasses.fields(item)}:
                return _build_list(item, value, path, ctx)
            return _build_named_list(item, value, path, ctx)
        return _to_str_tuple(value, path)
    if get_origin(hint) is Mapping:
        return _to_str_map(value, path)
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        if not isinstance(value, Mapping) and path in V5_NAMES:
            raise ConfigError(path, f"expected an object, got {_describe(value)} (Centrifugo v5 style? "
                                    f"use {V5_NAMES[path]})")  # fmt: skip
        return _build(default, value, path, ctx)
    raise TypeError(f"no converter for {hint!r} at {path}")  # a schema bug, not a config error


def _to_bool(value: object, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, _EnvValue) and value.strip().lower() in ("true", "1", "false", "0"):
        return value.strip().lower() in ("true", "1")
    raise ConfigError(path, f"expected true or false, got {_describe(value)}")


def _to_int(value: object, path: str) -> int:
    if isinstance(value, _EnvValue):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigError(path, f"expected an integer, got {str(value)!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(path, f"expected an integer, got {_describe(value)}")
    if value < 0:
        raise ConfigError(path, f"must not be negative, got {value}")
    return value


def _to_str_tuple(value: object, path: str) -> tuple[str, ...]:
    if isinstance(value, _EnvValue):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ConfigError(path, f"not a valid JSON array: {exc}") from None
        else:
            return tuple(item for item in re.split(r"[\s,]+", text) if item)
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(path, f"expected a list of strings, got {_describe(value)}")
    return tuple(value)


def _from_env_json(value: object, path: str) -> object:
    """A list or object option given in the environment is JSON (as Centrifugo's decoders)."""
    if not isinstance(value, _EnvValue):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ConfigError(path, f"environment value is not valid JSON: {exc}") from None


def _to_str_map(value: object, path: str) -> Mapping[str, str]:
    value = _from_env_json(value, path)
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(path, f"expected an object of strings, got {_describe(value)}")
    return MappingProxyType(dict(value))


def _build_list(item: type, value: object, path: str, ctx: _Context) -> tuple[object, ...]:
    """A list of objects without names (``http.status_to_code_transforms``)."""
    value = _from_env_json(value, path)
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of objects, got {_describe(value)}")
    return tuple(_build(item(), entry, f"{path}[{index}]", ctx) for index, entry in enumerate(value))


def _build_named_list(item: type, value: object, path: str, ctx: _Context) -> tuple[object, ...]:
    """``proxies`` / ``rpc.namespaces``: a list of objects, each with a unique string ``name``."""
    value = _from_env_json(value, path)
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of objects, got {_describe(value)}")
    result: list[object] = []
    seen: set[str] = set()
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{path}[{index}]", f"expected an object, got {_describe(entry)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{path}[{index}].name", f"expected a non-empty string, got {_describe(name)}")
        if name in seen:
            raise ConfigError(f"{path}[{name}]", "duplicate name")
        seen.add(name)
        result.append(_build(item(name=name), entry, f"{path}[{name}]", ctx))
    return tuple(result)


def _build_namespaces(value: object, path: str, ctx: _Context) -> tuple[ChannelOptions, ...]:
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of namespace objects, got {_describe(value)}")
    result: list[ChannelOptions] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ConfigError(f"{path}[{index}]", f"expected a namespace object, got {_describe(item)}")
        name = item.get("name")
        if not isinstance(name, str):
            raise ConfigError(f"{path}[{index}].name", f"expected a string, got {_describe(name)}")
        result.append(_build(ChannelOptions(name=name), item, f"{path}[{name}]", ctx))
    return tuple(result)
