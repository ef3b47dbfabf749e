"""Connections of the Redis engine: shards built from ``engine.redis`` settings, commands bounded by
``io_timeout``, and Lua scripts run with EVALSHA.

A ``RedisShard`` is one Redis deployment: a standalone server, a Sentinel-managed master, or a
Cluster. Several ``engine.redis.address`` entries make several standalone shards (client-side
sharding by channel, ``redis_keys.shard_index``). Every command goes through ``RedisShard.call``,
which bounds it with ``asyncio.timeout`` and turns any Redis or socket failure into ``EngineError``,
so a stalled Redis never hangs a caller. At most ``POOL_SIZE`` commands of a shard run at once;
more wait for a free connection within their ``io_timeout`` (a burst of connects queues instead
of failing with redis-py's "Too many connections"). The broker (``redis_broker``) and presence
(``redis_presence``) own the semantics. Must not import starlette.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlsplit

from redis import Redis as SyncRedis
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError
from redis.maint_notifications import MaintNotificationsConfig
from redis.retry import Retry as SyncRetry

from gateway.config import redis_address
from gateway.config.schema import RedisSettings
from gateway.config.tls import client_ssl_kwargs
from gateway.engine.base import EngineError
from gateway.engine.failures import FailureRun
from httpwire.cancellation import cancel_requests, raise_if_cancelled_since

T = TypeVar("T")

Client = Redis | RedisCluster

POOL_SIZE = 128
"""Most connections a shard's command client opens (per node in a Cluster). Centrifugo has no
such option (its client pipelines commands over a few connections); a command finding all of
them busy waits for one, within its ``io_timeout``, instead of failing."""


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
    restart, scripts are not, so a successful PUBLISH proves nothing about publishing. Failures
    are logged once per run of failures by ``failures`` (not once per command); ``on_error``
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
        self._slots = asyncio.Semaphore(POOL_SIZE)

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
        """Run one command (or script) within ``io_timeout``, which includes waiting for one
        of the ``POOL_SIZE`` connections when all are busy.

        Args:
            operation: The command, given the client.
            op: Its name for ``on_error`` (the metric label).
            proof: Whether its success shows the data path works (False for PUBLISH).

        Raises:
            EngineError: Redis unreachable, stalled or answering an error.
        """
        before = cancel_requests()
        try:
            async with asyncio.timeout(self.io_timeout), self._slots:
                result = await operation(self.client)
        except (RedisError, OSError, TimeoutError) as exc:
            raise_if_cancelled_since(before, exc)
            cause = f"{type(exc).__name__}: {exc}"
            self.failures.failed(cause)
            self.count_error(op)
            raise EngineError(f"redis {self.name}: {cause}") from exc
        # redis-py awaits through asyncio.wait_for, which on Python 3.11 returns the result of an
        # operation that finished as the caller was cancelled: the cancellation is the caller's.
        raise_if_cancelled_since(before)
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


def _host_port(address: str) -> tuple[str, int]:
    """A ``sentinel_address``/``cluster_address`` entry: host:port (or a URL); port 6379 default."""
    text = address if "://" in address else f"redis://{address}"
    parts = urlsplit(text)
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
    if settings.client_name:
        kwargs["client_name"] = settings.client_name
    if settings.tls.enabled:
        kwargs.update(tls_kwargs(settings))
    return kwargs


def tls_kwargs(settings: RedisSettings) -> dict[str, Any]:
    """redis-py TLS options from ``engine.redis.tls`` (verification, mTLS client certificate)."""
    return client_ssl_kwargs(settings.tls, "engine.redis.tls", settings.tls.ca_cert_pem_file)


def build_shards(settings: RedisSettings, *, on_error: ErrorHook | None = None) -> list[RedisShard]:
    """The shards described by ``engine.redis``: one Sentinel master (``sentinel_address``), one
    Cluster (``cluster_address``), or one shard per ``address`` entry, each entry in any form
    ``redis_address`` parses (standalone, ``redis+sentinel://``, ``redis+cluster://``,
    ``rediss://``, ``unix://``). A plain standalone address of a cluster node is detected as a
    cluster (``CLUSTER INFO`` within ``connect_timeout``; unreachable ⇒ standalone, logged), as
    Centrifugo's client does. ``on_error`` is given to every shard (see ``RedisShard``).

    Raises:
        ValueError: a malformed address (the message names it, passwords masked).
    """
    kwargs = connection_kwargs(settings)

    def make(
        index: int, built: tuple[Client, Callable[[], AbstractConnection], str, Sequence[Redis]]
    ) -> RedisShard:
        client, factory, name, also_close = built
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

    tls = settings.tls.enabled
    if settings.sentinel_address:
        hosts = tuple(_host_port(a) for a in settings.sentinel_address)
        sentinel = (settings.sentinel_user, settings.sentinel_password, settings.sentinel_master_name)
        return [make(0, _sentinel(settings, hosts, sentinel, kwargs, tls))]
    if settings.cluster_address:
        hosts = tuple(_host_port(a) for a in settings.cluster_address)
        return [make(0, _cluster(hosts, kwargs, tls, f"cluster:{','.join(settings.cluster_address)}"))]
    shards = []
    for index, address in enumerate(settings.address):
        try:
            parsed = redis_address.parse(address)
        except redis_address.RedisAddressError as exc:
            raise ValueError(f"engine.redis.address {redis_address.redacted(address)!r}: {exc}") from None
        shard_kwargs = _with_address(kwargs, parsed, settings)
        shard_tls = tls or parsed.tls
        if parsed.kind is redis_address.Kind.SENTINEL:
            sentinel = (
                parsed.sentinel_user or settings.sentinel_user,
                parsed.sentinel_password or settings.sentinel_password,
                parsed.sentinel_master_name,
            )
            shards.append(make(index, _sentinel(settings, parsed.hosts, sentinel, shard_kwargs, shard_tls)))
            continue
        if parsed.kind is redis_address.Kind.STANDALONE and not parsed.unix_path:
            host, port = parsed.hosts[0]
            if _is_cluster_node(host, port, shard_kwargs, shard_tls, settings.connect_timeout):
                parsed = dataclasses.replace(parsed, kind=redis_address.Kind.CLUSTER)
        if parsed.kind is redis_address.Kind.CLUSTER:
            name = "cluster:" + ",".join(f"{h}:{p}" for h, p in parsed.hosts)
            shards.append(make(index, _cluster(parsed.hosts, shard_kwargs, shard_tls, name)))
            continue
        shards.append(make(index, _standalone(parsed, shard_kwargs, shard_tls)))
    return shards


_Built = tuple[Client, Callable[[], AbstractConnection], str, Sequence[Redis]]


def _with_address(
    kwargs: dict[str, Any], parsed: redis_address.RedisAddress, settings: RedisSettings
) -> dict[str, Any]:
    """The shared options with what the address itself says (credentials, db, timeouts, TLS)."""
    out = dict(kwargs)
    if parsed.db is not None:
        out["db"] = parsed.db
    if parsed.user:
        out["username"] = parsed.user
    if parsed.password:
        out["password"] = parsed.password
    if parsed.connect_timeout is not None:
        out["socket_connect_timeout"] = parsed.connect_timeout
    if parsed.io_timeout is not None:
        out["socket_timeout"] = parsed.io_timeout
    if parsed.tls and not settings.tls.enabled:
        out.update(tls_kwargs(settings))
    return out


def _standalone(parsed: redis_address.RedisAddress, kwargs: dict[str, Any], tls: bool) -> _Built:
    if parsed.unix_path:
        unix = {k: v for k, v in kwargs.items() if not k.startswith("ssl_") and k != "socket_keepalive"}
        client = Redis(unix_socket_path=parsed.unix_path, max_connections=POOL_SIZE, **unix)
        name = f"unix://{parsed.unix_path}"
    else:
        host, port = parsed.hosts[0]
        client = Redis(host=host, port=port, ssl=tls, max_connections=POOL_SIZE, **kwargs)
        db = f"/{kwargs['db']}" if kwargs["db"] else ""
        name = f"{'rediss' if tls else 'redis'}://{host}:{port}{db}"
    return client, client.connection_pool.make_connection, name, ()


def _sentinel(
    settings: RedisSettings,
    hosts: tuple[tuple[str, int], ...],
    credentials: tuple[str, str, str],
    kwargs: dict[str, Any],
    tls: bool,
) -> _Built:
    user, password, master_name = credentials
    sentinel_kwargs: dict[str, Any] = {
        "socket_connect_timeout": kwargs["socket_connect_timeout"],
        "socket_timeout": kwargs["socket_timeout"],
    }
    if user:
        sentinel_kwargs["username"] = user
    if password:
        sentinel_kwargs["password"] = password
    if settings.sentinel_client_name:
        sentinel_kwargs["client_name"] = settings.sentinel_client_name
    sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        list(hosts), sentinel_kwargs=sentinel_kwargs
    )
    master = sentinel.master_for(master_name, ssl=tls, max_connections=POOL_SIZE, **kwargs)
    return master, master.connection_pool.make_connection, f"sentinel:{master_name}", sentinel.sentinels


def _cluster(hosts: tuple[tuple[str, int], ...], kwargs: dict[str, Any], tls: bool, name: str) -> _Built:
    cluster_kwargs = {k: v for k, v in kwargs.items() if k != "db"}
    cluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in hosts],
        ssl=tls,
        max_connections=POOL_SIZE,
        **cluster_kwargs,
    )
    rotation = {"next": 0}
    connection_class = SSLConnection if tls else Connection

    def cluster_pubsub_connection() -> AbstractConnection:
        # Classic PUBLISH reaches every cluster node, so any seed serves PUB/SUB.
        host, port = hosts[rotation["next"] % len(hosts)]
        rotation["next"] += 1
        return connection_class(host=host, port=port, **cluster_kwargs)

    return cluster, cluster_pubsub_connection, name, ()


def _is_cluster_node(host: str, port: int, kwargs: dict[str, Any], tls: bool, timeout: float) -> bool:
    """Whether ``host:port`` runs with ``cluster-enabled yes`` (one blocking ``INFO cluster``,
    bounded by ``timeout``). Unreachable or refusing ⇒ False, logged: the shard is standalone."""
    options = {k: v for k, v in kwargs.items() if k in _SYNC_OPTIONS or k.startswith("ssl_")}
    options.update(socket_connect_timeout=timeout, socket_timeout=timeout, retry=SyncRetry(NoBackoff(), 0))
    probe = SyncRedis(host=host, port=port, ssl=tls, **options)
    try:
        info = probe.info("cluster")
    except (RedisError, OSError) as exc:
        _log.warning(
            "redis %s:%s: cannot tell whether it is a cluster node (%s: %s); using it as a standalone "
            "server (write redis+cluster://%s:%s to be explicit)",
            host, port, type(exc).__name__, exc, host, port,
        )  # fmt: skip
        return False
    finally:
        probe.close()
    return bool(info.get("cluster_enabled"))


_SYNC_OPTIONS = frozenset({"db", "username", "password", "client_name"})
