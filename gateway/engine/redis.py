"""Connections of the Redis engine: shards built from ``engine.redis`` settings, commands bounded by
``io_timeout``, and Lua scripts run with EVALSHA.

A ``RedisShard`` is one Redis deployment: a standalone server, a Sentinel-managed master, or a
Cluster. Several ``engine.redis.address`` entries make several standalone shards (client-side
sharding by channel, ``redis_keys.shard_index``). Every command goes through ``RedisShard.call``,
which bounds it with ``asyncio.timeout`` and turns any Redis or socket failure into ``EngineError``,
so a stalled Redis never hangs a caller. The broker (``redis_broker``) and presence
(``redis_presence``) own the semantics. Must not import starlette.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError
from redis.maint_notifications import MaintNotificationsConfig

from gateway.config_schema import RedisSettings
from gateway.engine.base import EngineError
from gateway.engine.failures import FailureRun

T = TypeVar("T")

Client = Redis | RedisCluster


class LuaScript:
    """A script from ``gateway/engine/lua``, run by EVALSHA and loaded again after NOSCRIPT
    (a Redis restart, failover or SCRIPT FLUSH forgets loaded scripts)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = resources.files("gateway.engine").joinpath("lua", name).read_text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def run(self, client: Client, keys: Sequence[str], args: Sequence[str | bytes | int]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)


ErrorHook = Callable[[str], None]
"""Called once per failed Redis command with the operation's name (for a metric)."""

_log = logging.getLogger(__name__)


class RedisShard:
    """One Redis deployment: a command client, a factory of dedicated PUB/SUB connections, and
    whether its data path works.

    ``ok`` turns False on any failed command (and on ``suspect``) and True again only when a
    command that needs the data path succeeds (``proof=True``: scripts, reads, writes).
    PUBLISH and SUBSCRIBE are answered while Redis is still LOADING its dataset after a
    restart, scripts are not, so a successful PUBLISH proves nothing about publishing (issue
    13, defect 7). Failures are logged once per run by ``failures`` (defect 6); ``on_error``
    sees every one.

    Args:
        index: Position among the shards (channels map to it by ``shard_index``).
        client: Command client (a pool); ``Redis`` or ``RedisCluster``.
        pubsub_connection: Makes a new, unconnected connection for PUB/SUB. Sentinel connections
            resolve the current master on connect; Cluster ones rotate over the seed nodes.
        io_timeout: Bound of every command, seconds.
        connect_timeout: Bound of a PUB/SUB connect, seconds.
        name: For logs.
        also_close: Clients closed with this shard (the Sentinel connections).
        on_error: Called with the operation name of every failed command.
    """

    def __init__(
        self,
        index: int,
        client: Client,
        pubsub_connection: Callable[[], AbstractConnection],
        *,
        io_timeout: float,
        connect_timeout: float,
        name: str,
        also_close: Sequence[Redis] = (),
        on_error: ErrorHook | None = None,
    ) -> None:
        self.index = index
        self.client = client
        self.pubsub_connection = pubsub_connection
        self.io_timeout = io_timeout
        self.connect_timeout = connect_timeout
        self.name = name
        self._also_close = list(also_close)
        self._on_error = on_error
        self.failures = FailureRun(f"redis {name}", _log)
        self._proven = True
        self._closed = False

    def set_role(self, role: str) -> None:
        """Name the owner (``broker``, ``presence``) in this shard's log lines."""
        self.failures.subject = f"redis {self.name} ({role})"

    def count_error(self, op: str) -> None:
        """Report a failure seen outside ``call`` (the PUB/SUB connection) to ``on_error``."""
        if self._on_error is not None:
            self._on_error(op)

    def suspect(self) -> None:
        """Redis may have restarted (the PUB/SUB connection was lost): not ``ok`` until a
        data-path command succeeds. A new connection may reach a Redis that is still LOADING."""
        self._proven = False

    @property
    def ok(self) -> bool:
        """False from a failed command (or ``suspect``) until a data-path command succeeds."""
        return self._proven and not self.failures.failing

    async def call(
        self, operation: Callable[[Client], Awaitable[T]], *, op: str = "command", proof: bool = True
    ) -> T:
        """Run one command (or script) within ``io_timeout``.

        Args:
            operation: The command, given the client.
            op: Its name for ``on_error`` (the metric label).
            proof: Whether its success shows the data path works (False for PUBLISH).

        Raises:
            EngineError: Redis unreachable, stalled or answering an error.
        """
        try:
            async with asyncio.timeout(self.io_timeout):
                result = await operation(self.client)
        except (RedisError, OSError, TimeoutError) as exc:
            cause = f"{type(exc).__name__}: {exc}"
            self.failures.failed(cause)
            self.count_error(op)
            raise EngineError(f"redis {self.name}: {cause}") from exc
        if proof:
            self._proven = True
            self.failures.succeeded()
        return result

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.client.aclose()
            for client in self._also_close:
                await client.aclose()


def _url(address: str, scheme: str = "redis") -> str:
    return address if "://" in address else f"{scheme}://{address}"


def _host_port(address: str) -> tuple[str, int]:
    parts = urlsplit(_url(address))
    return parts.hostname or "127.0.0.1", parts.port or 6379


def connection_kwargs(settings: RedisSettings) -> dict[str, Any]:
    """Options shared by every connection: credentials, db, timeouts, TLS. No automatic command
    retry: a publish whose reply timed out may have run, and running it twice would publish twice.
    Closed idle connections are replaced at checkout instead (redis-py's check)."""
    kwargs: dict[str, Any] = {
        "db": settings.db,
        "socket_connect_timeout": settings.connect_timeout,
        "socket_timeout": settings.io_timeout,
        "socket_keepalive": True,
        "retry": Retry(NoBackoff(), 0),
        # redis-py 8 skips its check for closed pooled connections while maintenance
        # notifications are "auto" (the default, a Redis Enterprise feature): after a Redis
        # restart every idle pooled connection then failed one command with error 100.
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
    }
    if settings.user:
        kwargs["username"] = settings.user
    if settings.password:
        kwargs["password"] = settings.password
    if settings.tls.enabled:
        kwargs["ssl_cert_reqs"] = ssl.CERT_NONE if settings.tls.insecure_skip_verify else ssl.CERT_REQUIRED
        kwargs["ssl_check_hostname"] = not settings.tls.insecure_skip_verify
        if settings.tls.ca_cert_pem_file:
            kwargs["ssl_ca_certs"] = settings.tls.ca_cert_pem_file
    return kwargs


def build_shards(settings: RedisSettings, *, on_error: ErrorHook | None = None) -> list[RedisShard]:
    """The shards described by ``engine.redis``: one Sentinel master, one Cluster, or one
    standalone shard per ``address`` entry. Nothing connects until the first command.
    ``on_error`` is given to every shard (see ``RedisShard``)."""
    kwargs = connection_kwargs(settings)
    tls = settings.tls.enabled

    def make(
        index: int,
        client: Client,
        factory: Callable[[], AbstractConnection],
        name: str,
        also_close: Sequence[Redis] = (),
    ) -> RedisShard:
        return RedisShard(
            index,
            client,
            factory,
            io_timeout=settings.io_timeout,
            connect_timeout=settings.connect_timeout,
            name=name,
            also_close=also_close,
            on_error=on_error,
        )

    if settings.sentinel_address:
        sentinel_kwargs: dict[str, Any] = {
            "socket_connect_timeout": settings.connect_timeout,
            "socket_timeout": settings.io_timeout,
        }
        if settings.sentinel_password:
            sentinel_kwargs["password"] = settings.sentinel_password
        sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            [_host_port(a) for a in settings.sentinel_address], sentinel_kwargs=sentinel_kwargs
        )
        master = sentinel.master_for(settings.sentinel_master_name, ssl=tls, **kwargs)
        pool = master.connection_pool
        name = f"sentinel:{settings.sentinel_master_name}"
        return [make(0, master, pool.make_connection, name, sentinel.sentinels)]

    if settings.cluster_address:
        nodes = [_host_port(a) for a in settings.cluster_address]
        cluster_kwargs = {k: v for k, v in kwargs.items() if k != "db"}
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes], ssl=tls, **cluster_kwargs
        )
        rotation = {"next": 0}
        connection_class = SSLConnection if tls else Connection

        def cluster_pubsub_connection() -> AbstractConnection:
            # Classic PUBLISH reaches every cluster node, so any seed serves PUB/SUB.
            host, port = nodes[rotation["next"] % len(nodes)]
            rotation["next"] += 1
            return connection_class(host=host, port=port, **cluster_kwargs)

        name = f"cluster:{','.join(settings.cluster_address)}"
        return [make(0, cluster, cluster_pubsub_connection, name)]

    shards = []
    for index, address in enumerate(settings.address):
        url = _url(address, "rediss" if tls else "redis")
        if tls and url.startswith("redis://"):
            # engine.redis.tls.enabled wins over the scheme: never send TLS options to a plain socket
            url = "rediss://" + url[len("redis://") :]
        client = Redis.from_url(url, **kwargs)
        pool = client.connection_pool
        shards.append(make(index, client, pool.make_connection, _redacted(url)))
    return shards


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}"
