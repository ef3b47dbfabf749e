"""Configuration plumbing shared by the Status API and the relay (one loader, two option sets).

:func:`load` reads a JSON or YAML file, overlays environment variables and builds a frozen
dataclass, refusing unknown options, wrong types and missing required options with a
:class:`ConfigError` that names the option. Each service keeps its own dataclasses, prefix and
cross-option checks (``status_api/config.py``, ``relay/config.py``); only they call this module.

Environment: ``<PREFIX><SECTION>__<OPTION>`` (double underscore between nesting levels; a flat
option set has no sections: ``TASKCAST_RELAY_BATCH_SIZE``). A value is parsed as JSON when it
parses, else taken as a string — except for string options, which always take the raw text (a
numeric-looking secret stays a string). Values of secret-looking options (``repr=False`` fields, or
names containing ``secret``, ``key`` or ``password``) never appear in error messages.

Imports nothing of either service (the relay may import it: tests/test_layering.py).
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

C = TypeVar("C")

_SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
_SECRET_WORDS = ("secret", "key", "password")


class ConfigError(ValueError):
    """A configuration problem; the message names the option."""


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _shown(name: str, value: Any, secret: bool) -> str:
    leaf = name.rsplit(".", 1)[-1].lower()
    return "<hidden>" if secret or any(w in leaf for w in _SECRET_WORDS) else repr(value)


def _coerce(name: str, value: Any, tp: Any, secret: bool = False) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(name, value, inner[0], secret)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{name}: expected a list, got {type(value).__name__}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(f"{name}[{i}]", v, item_tp, secret) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {type(value).__name__}")
        return value
    if tp in _SCALARS:
        ok = isinstance(value, _SCALARS[tp]) and (tp is bool or not isinstance(value, bool))
        if not ok:
            raise ConfigError(f"{name}: expected {tp.__name__}, got {_shown(name, value, secret)}")
        return float(value) if tp is float else value
    if isinstance(tp, type) and is_dataclass(tp):
        return build(tp, value, name)
    raise ConfigError(f"{name}: unsupported option type")


def build(cls: type[C], raw: Any, prefix: str = "") -> C:
    """Build dataclass ``cls`` from the mapping ``raw`` (nested dataclasses from nested mappings).

    Raises:
        ConfigError: an unknown option, a wrong type or a missing required option, by name.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    for key in raw:
        if key not in known:
            raise ConfigError(f"{_join(prefix, str(key))}: unknown option")
    kwargs = {}
    for name, f in known.items():
        if name in raw:
            kwargs[name] = _coerce(_join(prefix, name), raw[name], hints[name], secret=not f.repr)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{_join(prefix, name)}: required")
    return cls(**kwargs)


def _is_str_option(cls: type[Any], path: list[str]) -> bool:
    tp: Any = cls
    for part in path:
        if not (isinstance(tp, type) and is_dataclass(tp)):
            return False
        hints = typing.get_type_hints(tp)
        if part not in hints:
            return False
        tp = hints[part]
    return tp in (str, str | None, typing.Optional[str])  # noqa: UP045 - both spellings occur


def env_overrides(cls: type[Any], prefix: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The options set by ``<prefix>…`` variables of ``environ``, as a nested mapping.

    Raises:
        ConfigError: a variable addresses an option inside something that is not a section.
    """
    out: dict[str, Any] = {}
    for var, text in environ.items():
        if not var.startswith(prefix):
            continue
        path = [p.lower() for p in var[len(prefix) :].split("__") if p]
        if not path:
            continue
        value: Any = text
        if not _is_str_option(cls, path):
            try:
                value = json.loads(text)
            except ValueError:
                value = text
        node = out
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(path)}: {part} is not a section (from {var})")
            node = child
        node[path[-1]] = value
    return out


def merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied section by section (overrides win)."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def read_file(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a ``.json`` or ``.yaml``/``.yml`` file (empty file: ``{}``).

    Raises:
        ConfigError: unreadable file, invalid JSON/YAML, or a top level that is not a mapping.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {p}: {exc.strerror}") from exc
    try:
        loaded = yaml.safe_load(text) if p.suffix in (".yaml", ".yml") else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        # The parser's message may quote the offending line, which may hold a secret: not shown.
        raise ConfigError(f"config file {p}: not valid {p.suffix.lstrip('.') or 'JSON'}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {p}: top level must be a mapping")
    return loaded


def load_raw(
    cls: type[Any], path: str | Path | None, prefix: str, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The file's options with the environment's applied: what :func:`build` gets."""
    raw = read_file(path) if path is not None else {}
    return merge(raw, env_overrides(cls, prefix, environ))
