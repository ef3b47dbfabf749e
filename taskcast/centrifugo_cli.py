"""Centrifugo's CLI helpers, for the gateway's configuration: ``version``, ``genconfig``,
``checkconfig``, ``defaultconfig``, ``defaultenv``, ``gentoken``, ``gensubtoken``, ``checktoken``,
``checksubtoken``, and the development helpers ``configdoc`` and ``serve`` (taskcast/dev_cli.py),
with Centrifugo v6's flags (``-c``, ``-u``, ``-s``, ``-t``, ``-q``,
``-b``, ``-d``), output and exit codes (0, or 1 with the error printed on stdout, as Centrifugo
does), so ``centrifugo gentoken -u 42`` becomes ``taskcast gentoken -u 42``.

Config reading is the gateway's own (``gateway.config.loading.load_settings``: file + ``CENTRIFUGO_`` /
``TASKCAST_`` env); tokens are signed with PyJWT (HS256, as Centrifugo's helpers) and checked
with the gateway's ``TokenVerifier``, so a token this prints is one the gateway accepts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import dataclasses
import json
import os
import platform
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import yaml

from gateway.config import doc as config_doc
from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings, TokenSettings
from gateway.config.unsupported import env_name
from gateway.connection.tokens import TokenError, TokenVerifier
from gateway.node import VERSION
from taskcast import dev_cli

DEFAULT_CONFIG = "config.json"
DEFAULT_TTL_SECONDS = 3600 * 24 * 7
EXTENSIONS = ("json", "toml", "yaml", "yml")

HELP: dict[str, str] = {
    "version": "Taskcast version information",
    "genconfig": "Generate minimal configuration file to start with",
    "checkconfig": "Check configuration file",
    "defaultconfig": "Generate full configuration file with defaults",
    "defaultenv": "Generate full environment var list with defaults",
    "gentoken": "Generate sample connection JWT for user",
    "gensubtoken": "Generate sample subscription JWT for user",
    "checktoken": "Check connection JWT",
    "checksubtoken": "Check subscription JWT",
    "configdoc": "Show Taskcast configuration documentation generated from source code",
    "serve": "Run static file server (for development only)",
}
"""Subcommand -> its one-line description (Centrifugo's ``Short`` texts)."""


class CliError(Exception):
    """A failure printed as Centrifugo prints it (the message as is, on stdout) with exit 1."""


def version_text() -> str:
    """``taskcast version`` / ``--version``: ``Taskcast v0.1.0 (Python version: 3.11.7)``."""
    return f"Taskcast v{VERSION} (Python version: {platform.python_version()})"


def main(command: str, argv: list[str]) -> int:
    """Run one helper; returns the exit code."""
    parser = _parser(command)
    args = parser.parse_args(argv)
    try:
        COMMANDS[command](args)
    except CliError as exc:
        print(str(exc))
        return 1
    return 0


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"taskcast {command}", description=HELP[command])
    if command in ("configdoc", "serve"):
        dev_cli.add_arguments(command, parser)
    if command in ("checkconfig", "genconfig", "gentoken", "gensubtoken", "checktoken", "checksubtoken"):
        what = {"checkconfig": "path to config file to check", "genconfig": "path to output config file"}
        parser.add_argument(
            "-c", "--config", default=DEFAULT_CONFIG, help=what.get(command, "path to config file")
        )
    if command == "defaultconfig":
        parser.add_argument(
            "-c", "--config", default=DEFAULT_CONFIG, help="path to default config file to generate"
        )
        parser.add_argument(
            "-d", "--dry-run", action="store_true", help="print the config to stdout, write no file"
        )
    if command in ("defaultconfig", "defaultenv"):
        parser.add_argument("-b", "--base", default="", help="path to the base config file to use")
    if command == "checkconfig":
        parser.add_argument(
            "-s", "--strict", action="store_true", help="strict check - fail on unknown fields"
        )
    if command in ("gentoken", "gensubtoken"):
        parser.add_argument("-u", "--user", default="", help="user ID, by default anonymous")
        parser.add_argument(
            "-t", "--ttl", type=int, default=DEFAULT_TTL_SECONDS,
            help="token TTL in seconds, use -1 for token without expiration",
        )  # fmt: skip
        parser.add_argument(
            "-q", "--quiet", action="store_true", help="only output the token without anything else"
        )
    if command == "gensubtoken":
        parser.add_argument("-s", "--channel", default="", help="channel")
    if command in ("checktoken", "checksubtoken"):
        parser.add_argument("token", nargs="*", metavar="TOKEN")
    return parser


# --- config ----------------------------------------------------------------------------------


def _settings(path: str, *, must_exist: bool = False) -> tuple[Settings, list[str]]:
    """The gateway settings from ``path`` (a missing file means defaults + env, as Centrifugo's
    helpers treat it, unless ``must_exist``) and the environment."""
    if path and not Path(path).exists():
        if must_exist:
            raise CliError("config file not found")
        path = ""
    try:
        return load_settings(path or None, dict(os.environ))
    except ConfigError as exc:
        raise CliError(f"error getting config: {exc}") from None


def _version(_: argparse.Namespace) -> None:
    print(version_text())


def _checkconfig(args: argparse.Namespace) -> None:
    if not Path(args.config).exists():
        raise CliError("config file not found")
    try:
        _, warnings = load_settings(args.config, dict(os.environ))
    except ConfigError as exc:
        raise CliError(f"error validating config: {exc}") from None
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    unknown = [w.split('"')[1] for w in warnings if w.startswith("unknown option ")]
    if args.strict and unknown:
        raise CliError(f"unknown keys in config: {', '.join(unknown)}")


def _extension(path: str) -> str:
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in EXTENSIONS:
        raise CliError(
            "error: output config file must have one of supported extensions: " + ", ".join(EXTENSIONS)
        )
    return ext


def _genconfig(args: argparse.Namespace) -> None:
    path = args.config
    if Path(path).exists():
        raise CliError(f"error: output config file already exists: {path}")
    ext = _extension(path)
    tree = {
        "client": {"token": {"hmac_secret_key": secrets.token_urlsafe(48)}, "allowed_origins": []},
        "admin": {
            "enabled": False,
            "password": secrets.token_urlsafe(24),
            "secret": secrets.token_urlsafe(48),
        },
        "http_api": {"key": secrets.token_urlsafe(48)},
    }
    Path(path).write_text(_dump(tree, ext), encoding="utf-8")
    try:
        load_settings(path, {})
    except ConfigError as exc:
        Path(path).unlink(missing_ok=True)
        raise CliError(f"error validating config: {exc}") from None


def _defaultconfig(args: argparse.Namespace) -> None:
    path = args.config
    if not args.dry_run and Path(path).exists():
        raise CliError("error: target file already exists")
    ext = _extension(path)
    settings, _ = _settings(args.base, must_exist=bool(args.base))
    text = _dump(config_doc.default_tree(settings, duration=go_duration), ext)
    if args.dry_run:
        print(text)
        return
    Path(path).write_text(text, encoding="utf-8")


def _defaultenv(args: argparse.Namespace) -> None:
    settings, _ = _settings(args.base, must_exist=bool(args.base))
    tree = config_doc.default_tree(settings, duration=go_duration)
    options = [*config_doc.options()]
    options += [
        dataclasses.replace(opt, path=f"channel.without_namespace.{opt.path}")
        for opt in config_doc.channel_options()
    ]
    lines = [f"{env_name(opt.path)}={_env_value(opt.kind, _lookup(tree, opt.path))}" for opt in options]
    namespaces = json.dumps(tree["channel"]["namespaces"], separators=(",", ":"))
    lines.append(f'{env_name("channel.namespaces")}="{namespaces.replace(chr(34), chr(92) + chr(34))}"')
    for line in sorted(lines):
        print(line)


def _lookup(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        node = node[part]
    return node


def _env_value(kind: str, value: Any) -> str:
    """A value as Centrifugo's defaultenv prints it: strings quoted, list items quoted and space
    separated (an empty list is ``""``), booleans, numbers and durations bare."""
    if kind == "string":
        return f'"{value}"'
    if kind == "list of strings":
        return " ".join(f'"{item}"' for item in value) if value else '""'
    if kind == "bool":
        return "true" if value else "false"
    return str(value)


def _dump(tree: dict[str, Any], ext: str) -> str:
    if ext == "json":
        return json.dumps(tree, indent=2) + "\n"
    if ext in ("yaml", "yml"):
        return str(yaml.safe_dump(tree, sort_keys=False))
    return _toml(tree)


def _toml(tree: dict[str, Any], prefix: str = "") -> str:
    """A TOML document of nested tables of scalars and scalar lists (the config tree's shape)."""
    scalars = [f"{key} = {_toml_value(value)}" for key, value in tree.items() if not isinstance(value, dict)]
    out = ([f"[{prefix}]"] if prefix and scalars else []) + scalars
    text = "\n".join(out) + ("\n\n" if out else "")
    for key, value in tree.items():
        if isinstance(value, dict):
            text += _toml(value, f"{prefix}.{key}" if prefix else key)
    return text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        if any(isinstance(item, dict) for item in value):
            return "[" + ", ".join("{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in item.items()) + " }"
                                   for item in value) + "]"  # fmt: skip
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(value)


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` of a number of seconds: ``25s``, ``1m30s``, ``720h0m0s``,
    ``500ms``, ``0s`` (what Centrifugo's defaultconfig/defaultenv print)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{_trim(ns / size)}{unit}"
    hours, rest = divmod(ns, 3600 * 1_000_000_000)
    minutes, rest = divmod(rest, 60 * 1_000_000_000)
    secs = _trim(rest / 1e9)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")


# --- tokens ----------------------------------------------------------------------------------


def _expiration(ttl: int) -> str:
    return f"with expiration TTL {go_duration(ttl)}" if ttl >= 0 else "without expiration"


def _user_text(user: str) -> str:
    return f'user "{user}"' if user else "anonymous user"


def _sign(token: TokenSettings, claims: dict[str, Any], user: str, ttl: int) -> str:
    if not token.hmac_secret_key:
        raise CliError("error: no HMAC secret key set")
    now = int(time.time())
    payload: dict[str, Any] = {"sub": user, **claims, "iat": now}
    if ttl > 0:
        payload["exp"] = now + ttl
    if token.user_id_claim:
        node = payload
        *parents, leaf = token.user_id_claim.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = user
    return jwt.encode(payload, token.hmac_secret_key, algorithm="HS256")


def _sub_section(settings: Settings) -> TokenSettings:
    sub = settings.client.subscription_token
    return sub if sub.enabled else settings.client.token


def _gentoken(args: argparse.Namespace) -> None:
    settings, _ = _settings(args.config)
    token = _sign(settings.client.token, {}, args.user, args.ttl)
    if args.quiet:
        print(token, end="")
        return
    print(f"HMAC SHA-256 JWT for {_user_text(args.user)} {_expiration(args.ttl)}:\n{token}")


def _gensubtoken(args: argparse.Namespace) -> None:
    settings, _ = _settings(args.config)
    if not args.channel:
        raise CliError("channel is required")
    token = _sign(_sub_section(settings), {"channel": args.channel}, args.user, args.ttl)
    if args.quiet:
        print(token, end="")
        return
    print(
        f'HMAC SHA-256 JWT for {_user_text(args.user)} and channel "{args.channel}" '
        f"{_expiration(args.ttl)}:\n{token}"
    )


def _claims_segment(token: str) -> tuple[str, str]:
    """(algorithm, claims JSON as sent) of a JWT, unverified; CliError when it is no JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        raise CliError("error: token is malformed (expected header.claims.signature)")
    try:
        header = json.loads(_b64(parts[0]))
        claims = _b64(parts[1]).decode()
        json.loads(claims)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CliError("error: token is malformed (not base64url JSON)") from None
    return str(header.get("alg", "")) if isinstance(header, dict) else "", claims


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _check(
    args: argparse.Namespace, command: str, verify: Callable[[TokenVerifier, str], Any]
) -> tuple[Any, str]:
    settings, _ = _settings(args.config)
    section = settings.client.token if command == "checktoken" else _sub_section(settings)
    if len(args.token) != 1:
        raise CliError(f"error: provide token to check [taskcast {command} <TOKEN>]")
    token = args.token[0]
    algorithm, claims = _claims_segment(token)
    try:
        verifier = TokenVerifier(section, skip_signature=settings.client.insecure_skip_token_signature_verify)
        result = asyncio.run(verify(verifier, token))
    except (TokenError, ValueError) as exc:
        raise CliError(
            f"error: token with algorithm {algorithm} and claims {claims} has error: {exc}"
        ) from None
    return result, claims


def _checktoken(args: argparse.Namespace) -> None:
    result, claims = _check(args, "checktoken", lambda v, t: v.verify_connect(t))
    user = f"user {result.user}" if result.user else "anonymous user"
    print(f"valid token for {user}\npayload: {claims}")


def _checksubtoken(args: argparse.Namespace) -> None:
    result, claims = _check(args, "checksubtoken", lambda v, t: v.verify_subscribe(t))
    subject = f'{_user_text(result.user)} and channel "{result.channel}"'
    print(f"valid subscription token for {subject}\npayload: {claims}")


COMMANDS: dict[str, Callable[[argparse.Namespace], None]] = {
    "version": _version,
    "genconfig": _genconfig,
    "checkconfig": _checkconfig,
    "defaultconfig": _defaultconfig,
    "defaultenv": _defaultenv,
    "gentoken": _gentoken,
    "gensubtoken": _gensubtoken,
    "checktoken": _checktoken,
    "checksubtoken": _checksubtoken,
    "configdoc": dev_cli.configdoc,
    "serve": dev_cli.serve,
}
