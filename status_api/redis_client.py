"""A Redis client from one URL, for the wake-up hints of the Status API (``wake.redis_url``) and the
relay (``wake_redis_url``): a standalone server or a Sentinel-monitored master, with the address
forms and option names of the gateway's ``engine.redis.address`` (Centrifugo's)::

    redis://[[user]:password@]host:port[/db]                        (also rediss://, unix://)
    redis+sentinel://[[user]:password@]sentinel:port[/db]?sentinel_master_name=NAME
        [&addr=sentinel2:port&addr=sentinel3:port][&sentinel_user=U][&sentinel_password=P]
    rediss+sentinel://...                                           (TLS to Redis and Sentinels)

With Sentinel the client asks the Sentinels for the current master on every new connection, so
after a failover the next (re)connection reaches the promoted replica. :func:`check` validates a
URL without connecting (config loading); errors never echo a password.

A client opens at most ``POOL_SIZE`` connections; a command finding all of them busy waits for
one (at most its ``socket_timeout``, else until one is free) instead of failing with redis-py's
"Too many connections".
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis.asyncio as redis
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedSSLConnection

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
POOL_SIZE = 64
"""Most connections one client opens; more concurrent commands wait for a free one."""
_SENTINEL_OPTIONS = frozenset({"sentinel_master_name", "addr", "sentinel_user", "sentinel_password"})


class RedisUrlError(ValueError):
    """A URL this module cannot use; the message names the problem, never the password."""


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], dict[str, Any], dict[str, Any], str]:
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - _SENTINEL_OPTIONS)
    if unknown:
        raise RedisUrlError(f"unknown Sentinel URL option(s) {', '.join(unknown)}")
    master = (query.get("sentinel_master_name") or [""])[0]
    if not master:
        raise RedisUrlError("a redis+sentinel:// URL needs sentinel_master_name")
    hosts = [parts.netloc.rpartition("@")[2], *query.get("addr", [])]
    sentinels = []
    for item in hosts:
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise RedisUrlError("every Sentinel address must be host:port")
        sentinels.append((host, int(port)))
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise RedisUrlError("the DB number must be an integer")
    tls = parts.scheme.lower() == "rediss+sentinel"
    conn: dict[str, Any] = {"db": int(path or 0)}
    if tls:
        conn["connection_class"] = SentinelManagedSSLConnection
    if parts.username:
        conn["username"] = unquote(parts.username)
    if parts.password:
        conn["password"] = unquote(parts.password)
    sentinel_kwargs: dict[str, Any] = {"ssl": True} if tls else {}
    if query.get("sentinel_user"):
        sentinel_kwargs["username"] = query["sentinel_user"][0]
    if query.get("sentinel_password"):
        sentinel_kwargs["password"] = query["sentinel_password"][0]
    return sentinels, conn, sentinel_kwargs, master


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel master's pool that waits for a free connection (``BlockingConnectionPool``)
    instead of raising when all ``max_connections`` are in use."""


class _SentinelMaster(redis.Redis):
    """The master's client; closing it also closes its connections to the Sentinels."""

    sentinel_group: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel_group is not None:
            for one in self.sentinel_group.sentinels:
                await one.aclose()


def check(url: str) -> None:
    """Raise :class:`RedisUrlError` unless ``url`` is a form this module connects to."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in SENTINEL_SCHEMES:
        _sentinel_parts(url)
    elif scheme not in PLAIN_SCHEMES:
        schemes = ", ".join(f"{s}://" for s in (*PLAIN_SCHEMES, *SENTINEL_SCHEMES))
        raise RedisUrlError(f"must be a {schemes} URL")


def client(url: str, **options: Any) -> redis.Redis:
    """An asyncio client for ``url``; ``options`` (timeouts, health checks) apply to the data
    connections, and with Sentinel also to the connections to the Sentinels."""
    check(url)
    pool: dict[str, Any] = {"max_connections": POOL_SIZE, "timeout": options.get("socket_timeout")}
    if url.split("://", 1)[0].lower() not in SENTINEL_SCHEMES:
        return redis.Redis.from_pool(BlockingConnectionPool.from_url(url, **pool, **options))
    sentinels, conn, sentinel_kwargs, master = _sentinel_parts(url)
    timeouts = {k: v for k, v in options.items() if k in ("socket_timeout", "socket_connect_timeout")}
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        sentinels, sentinel_kwargs={**sentinel_kwargs, **timeouts}, **conn, **options
    )
    master_client: _SentinelMaster = sentinel.master_for(
        master, redis_class=_SentinelMaster, connection_pool_class=_BlockingSentinelPool, **pool
    )
    master_client.sentinel_group = sentinel
    return master_client
