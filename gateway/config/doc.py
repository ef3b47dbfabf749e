"""The option tables of docs/configuration.md, generated from ``schema`` (supported
options, their defaults and env variables) and ``unsupported`` (what to do instead), and the
table of unsupported options in docs/migrating-from-centrifugo.md.

``python -m gateway.config.doc`` prints the tables; ``--write`` replaces the generated blocks of
both documents; ``--check`` exits 1 when one is stale. ``default_tree`` is also
what ``taskcast defaultconfig`` writes. Pure: reads the docs file only in ``main``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

from gateway.config.schema import ChannelOptions, Settings
from gateway.config.unsupported import UNSUPPORTED, UNSUPPORTED_CHANNEL_OPTIONS, advice_for, env_name

BEGIN = "<!-- BEGIN GENERATED OPTIONS (python -m gateway.config.doc --write) -->"
END = "<!-- END GENERATED OPTIONS -->"
DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
MIGRATION_PATH = DOC_PATH.with_name("migrating-from-centrifugo.md")
"""The migration guide: its generated block is the table of unsupported Centrifugo options."""


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    """One supported option: dotted path, value kind, default (as JSON-able data), whether it is
    a Taskcast extension."""

    path: str
    kind: str
    default: Any
    extension: bool


def _kind(hint: object) -> str:
    if hint is bool:
        return "bool"
    if hint is int:
        return "int"
    if hint is float:
        return "duration"
    if hint is str:
        return "string"
    if get_origin(hint) is tuple:
        (item, *_) = get_args(hint) or (str,)
        return "list of objects" if _is_section(item) else "list of strings"
    if get_origin(hint) in (Mapping, dict):
        return "map of strings"
    raise TypeError(f"no kind for {hint!r}")


def _is_section(hint: object) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def options(cls: type[Any] = Settings, prefix: str = "", instance: object = None) -> Iterator[Option]:
    """Every supported leaf option under ``cls`` in declaration order (``channel.namespaces`` is
    one list option; namespace options are listed by ``channel_options``)."""
    value = cls() if instance is None else instance
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("derived"):
            continue
        hint = hints[f.name]
        path = f"{prefix}{f.name}"
        default = getattr(value, f.name)
        if _is_section(hint):
            if hint is ChannelOptions:
                continue
            yield from options(hint, path + ".", default)
        elif get_args(hint) == (ChannelOptions, Ellipsis):
            continue
        else:
            yield Option(path, _kind(hint), _jsonable(default), bool(f.metadata.get("extension")))


def channel_options() -> Iterator[Option]:
    """The namespace options (``channel.without_namespace.<name>`` / ``channel.namespaces[].<name>``)."""
    yield from options(ChannelOptions)


def status(path: str) -> str | None:
    """ "supported" for an option (or section) of the schema, the advice for an unsupported one,
    None for a name that is neither. Namespace options are written
    ``channel.without_namespace.<name>`` or ``channel.namespaces[].<name>``."""
    for prefix in ("channel.without_namespace.", "channel.namespaces[]."):
        if path.startswith(prefix):
            name = path[len(prefix) :]
            if any(opt.path == name or opt.path.startswith(name + ".") for opt in channel_options()):
                return "supported"
            return UNSUPPORTED_CHANNEL_OPTIONS.get(name)
    if path in ("channel.namespaces", "channel.without_namespace"):
        return "supported"
    if any(opt.path == path or opt.path.startswith(path + ".") for opt in options()):
        return "supported"
    return advice_for(path)


def _jsonable(value: object) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def duration_text(seconds: float) -> str:
    """Go-style duration text of a number of seconds ("25s", "720h", "500ms", "0s")."""
    if seconds and seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _default_text(option: Option) -> str:
    if option.kind == "duration":
        return f"`{duration_text(option.default)}`"
    if option.default in ("", [], None):
        return ""
    return f"`{json.dumps(option.default)}`"


def default_tree(
    settings: Settings | None = None, *, duration: Callable[[float], str] | None = None
) -> dict[str, Any]:
    """The whole option tree with the values of ``settings`` (default: the defaults), durations
    as Go-style strings (``duration`` formats them; default ``duration_text``), namespaces as a
    list of objects: a config file Centrifugo also reads."""
    return _tree(settings if settings is not None else Settings(), duration or duration_text)


def _tree(value: object, duration: Callable[[float], str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(type(value))
    for f in dataclasses.fields(value):  # type: ignore[arg-type]
        if f.metadata.get("derived"):
            continue
        item = getattr(value, f.name)
        hint = hints[f.name]
        if _is_section(hint):
            out[f.name] = _tree(item, duration)
        elif get_args(hint) == (ChannelOptions, Ellipsis):
            out[f.name] = [{"name": ns.name, **_tree(ns, duration)} for ns in item]
        elif hint is float:
            out[f.name] = duration(item)
        else:
            out[f.name] = _jsonable(item)
    return out


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def markdown() -> str:
    """The generated block (without the BEGIN/END markers)."""
    lines = [
        "### Supported options",
        "",
        "Every option below is read from the file and from its environment variable (`TASKCAST_` "
        "may replace `CENTRIFUGO_`). *Taskcast extension* marks options Centrifugo does not have.",
        "",
        _row(["option", "env variable", "type", "default", "note"]),
        _row(["---"] * 5),
    ]
    for opt in options():
        note = "Taskcast extension" if opt.extension else ""
        lines.append(_row([f"`{opt.path}`", f"`{env_name(opt.path)}`", opt.kind, _default_text(opt), note]))
    lines.append(
        _row(["`channel.namespaces`", "`CENTRIFUGO_CHANNEL_NAMESPACES`", "list of namespaces", "", ""])
    )
    lines += [
        "",
        "### Channel options",
        "",
        "Each applies to `channel.without_namespace.<option>` (env "
        "`CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_<OPTION>`) and to every `channel.namespaces[].<option>` "
        "(env `CENTRIFUGO_CHANNEL_NAMESPACES_<NAME>_<OPTION>`).",
        "",
        _row(["option", "type", "default", "note"]),
        _row(["---"] * 4),
    ]
    for opt in channel_options():
        note = "Taskcast extension" if opt.extension else ""
        lines.append(_row([f"`{opt.path}`", opt.kind, _default_text(opt), note]))
    lines += [
        "",
        "### Unsupported Centrifugo options",
        "",
        "Accepted and ignored with a startup warning that says what to do instead (a section covers "
        "every option under it).",
        "",
        *_unsupported_rows(with_env=True),
    ]
    return "\n".join(lines) + "\n"


def _unsupported_rows(*, with_env: bool) -> list[str]:
    supported = {opt.path for opt in options()}
    channel = {opt.path for opt in channel_options()}
    head = ["option", "env variable", "what to do instead"] if with_env else ["option", "what to do instead"]
    rows = [_row(head), _row(["---"] * len(head))]
    for path, advice in sorted(UNSUPPORTED.items()):
        if path not in supported:
            env = [f"`{env_name(path)}…`"] if with_env else []
            rows.append(_row([f"`{path}`", *env, advice]))
    for name, advice in sorted(UNSUPPORTED_CHANNEL_OPTIONS.items()):
        if name not in channel:
            rows.append(_row([f"channel option `{name}`", *([""] if with_env else []), advice]))
    return rows


def migration_markdown() -> str:
    """The generated block of docs/migrating-from-centrifugo.md (without the markers): every
    Centrifugo v6.9 option Taskcast does not implement, with what to do instead."""
    lines = [
        "Every other Centrifugo v6.9 option is supported (the tables in "
        "[configuration.md](configuration.md#all-options)). These are accepted, warned about at "
        "startup and by `taskcast checkconfig` (which `--strict` does not fail on), and ignored:",
        "",
        *_unsupported_rows(with_env=False),
    ]
    return "\n".join(lines) + "\n"


def render(document: str, block: Callable[[], str] = markdown) -> str:
    """``document`` with its generated block replaced by the current ``block()`` (default:
    ``markdown()``, docs/configuration.md's).

    Raises:
        ValueError: the BEGIN/END markers are missing.
    """
    head, begin, rest = document.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError("generated-block markers are missing")
    return f"{head}{BEGIN}\n{block()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.config.doc", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="update the generated blocks")
    group.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(markdown())
        return 0
    stale = 0
    for path, block in ((DOC_PATH, markdown), (MIGRATION_PATH, migration_markdown)):
        current = path.read_text(encoding="utf-8")
        wanted = render(current, block)
        if wanted == current:
            continue
        if args.check:
            print(f"{path} is stale: run python -m gateway.config.doc --write", file=sys.stderr)
            stale = 1
        else:
            path.write_text(wanted, encoding="utf-8")
    return stale


if __name__ == "__main__":
    sys.exit(main())
