"""Parsing one ``engine.redis.address`` entry the way Centrifugo v6 (centrifuge's
``optionsFromAddress``) reads it. Pure: no I/O, imports neither redis nor the rest of the engine.

Accepted forms::

    host:port
    redis://[[user]:password@]host:port[/db][?option=value&...]     (also tcp://)
    rediss://...                                                   (TLS)
    redis+sentinel://[[user]:password@]sentinel:port[/db]?sentinel_master_name=NAME[&addr=s2:port...]
    rediss+sentinel://...                                          (TLS to Redis and to Sentinel)
    redis+cluster://host:port[?addr=host2:port...]
    unix://[[user]:password@]/path/to/redis.sock[?db=N]

Query options: ``addr`` (more seed/sentinel addresses, repeatable), ``sentinel_master_name``
(its presence alone means Sentinel), ``sentinel_user``, ``sentinel_password``,
``sentinel_tls_enabled``, ``tls_enabled``, ``connect_timeout``, ``io_timeout`` (Go durations),
``force_resp2`` (accepted; Taskcast always speaks RESP2) and ``db`` for ``unix://``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import parse_qs, unquote, urlsplit

KNOWN_SCHEMES = ("redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "tcp", "unix")

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_QUERY_OPTIONS = frozenset(
    {
        "addr",
        "sentinel_master_name",
        "sentinel_user",
        "sentinel_password",
        "sentinel_tls_enabled",
        "tls_enabled",
        "connect_timeout",
        "io_timeout",
        "force_resp2",
        "db",
        "replica_client_enabled",
    }
)


class RedisAddressError(ValueError):
    """A malformed address; the message says what is wrong (never echoes a password)."""


class Kind(StrEnum):
    STANDALONE = "standalone"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """One parsed address. ``hosts`` are (host, port) pairs: the server, the Sentinels or the
    cluster seeds; ``unix_path`` is set for ``unix://`` instead. Empty/None fields mean "use the
    ``engine.redis`` option"."""

    kind: Kind
    hosts: tuple[tuple[str, int], ...]
    unix_path: str = ""
    db: int | None = None
    user: str = ""
    password: str = ""
    tls: bool = False
    sentinel_master_name: str = ""
    sentinel_user: str = ""
    sentinel_password: str = ""
    sentinel_tls: bool = False
    connect_timeout: float | None = None
    io_timeout: float | None = None


def parse(address: str) -> RedisAddress:
    """Parse one address entry.

    Raises:
        RedisAddressError: unknown scheme, missing host or port, a non-numeric DB, a Sentinel
            URL without ``sentinel_master_name``, or a bad query value.
    """
    text = address.strip()
    if "://" not in text:
        host, port = _host_port(text, default_port=None)
        return RedisAddress(Kind.STANDALONE, ((host, port),))
    scheme = text.split("://", 1)[0].lower()
    if scheme not in KNOWN_SCHEMES:
        raise RedisAddressError(f"unknown scheme {scheme!r} (use one of {', '.join(KNOWN_SCHEMES)})")
    parts = urlsplit(text)
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - _QUERY_OPTIONS)
    if unknown:
        raise RedisAddressError(f"unknown query option(s) {', '.join(unknown)}")
    master = _one(query, "sentinel_master_name")
    sentinel = scheme in ("redis+sentinel", "rediss+sentinel") or bool(master)
    if sentinel and not master:
        raise RedisAddressError("sentinel_master_name must be set for a Redis Sentinel address")
    kind = Kind.SENTINEL if sentinel else Kind.CLUSTER if scheme == "redis+cluster" else Kind.STANDALONE
    tls = scheme.startswith("rediss") or _flag(query, "tls_enabled")
    db: int | None = None
    hosts: list[tuple[str, int]] = []
    unix_path = ""
    if scheme == "unix":
        unix_path = unquote(parts.path)
        if not unix_path:
            raise RedisAddressError("unix:// needs a socket path")
        if "db" in query:
            db = _int(_one(query, "db"), "db")
    else:
        hosts.append(_host_port(parts.netloc.rpartition("@")[2], default_port=6379))
        path = parts.path.strip("/")
        if path:
            db = _int(path, "DB number")
    hosts.extend(_host_port(item, default_port=None) for item in query.get("addr", []))
    return RedisAddress(
        kind,
        tuple(hosts),
        unix_path=unix_path,
        db=db,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        tls=tls,
        sentinel_master_name=master,
        sentinel_user=_one(query, "sentinel_user"),
        sentinel_password=_one(query, "sentinel_password"),
        sentinel_tls=sentinel and (scheme == "rediss+sentinel" or _flag(query, "sentinel_tls_enabled")),
        connect_timeout=_duration(query, "connect_timeout"),
        io_timeout=_duration(query, "io_timeout"),
    )


def redacted(address: str) -> str:
    """The address with any password (userinfo or ``sentinel_password``) replaced by ``***``."""
    text = re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", address)
    return re.sub(r"(sentinel_password=)[^&]*", r"\1***", text)


def _one(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name, [])
    return values[-1] if values else ""


def _flag(query: dict[str, list[str]], name: str) -> bool:
    value = _one(query, name).lower()
    if value in ("", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise RedisAddressError(f"{name} must be true or false, got {value!r}")


def _int(text: str, what: str) -> int:
    if not text.isdigit():
        raise RedisAddressError(f"{what} must be a number, got {text!r}")
    return int(text)


def _duration(query: dict[str, list[str]], name: str) -> float | None:
    text = _one(query, name)
    if not text:
        return None
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise RedisAddressError(f"{name} must be a duration such as 1s, got {text!r}")
    return total


def _host_port(text: str, *, default_port: int | None) -> tuple[str, int]:
    if text.startswith("["):  # [ipv6]:port
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:  # no port, or a bare IPv6 address
            host, port = text, ""
    if not port:
        if default_port is None or not host:
            raise RedisAddressError(f"{text!r} must be host:port")
        return host, default_port
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RedisAddressError(f"{text!r} must be host:port")
    return host, int(port)
