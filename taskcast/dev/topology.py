"""The production topology of docker-compose.yml, from local processes (``make topology``).

Two gateways on the Redis engine, two Status API replicas, the health reconciler, two relays and
nginx in front — started with the SAME files as the compose file (deploy/*.json, deploy/*.yaml,
deploy/nginx/taskcast.conf.template) plus environment overrides, on free ports under one work
directory. With ``ha`` the data path has no single point of failure either, as in the compose
file: Redis is a master, a replica and three Sentinels (taskcast/dev/sentinel.py; every service
takes the ``redis+sentinel://`` URL) and MariaDB a primary with a GTID replica
(taskcast/dev/mariadb.py). Without ``ha`` it runs on the given (or throwaway) Redis and MariaDB.

:meth:`Topology.supervise` restarts any process that exits (taskcast/dev/supervisor.py), so a
rolling restart — SIGTERM one process, wait for it to come back — never takes the topology down.
Used by the e2e tests (``Topology(...).start()``) and as a CLI (taskcast/dev/topology_cli.py).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from taskcast.dev.mariadb import MariaDB
from taskcast.dev.nginx import nginx_proc
from taskcast.dev.procs import ROOT, Proc, free_port, service_argv, start_services
from taskcast.dev.sentinel import RedisSentinel
from taskcast.dev.supervisor import Supervisor

DEPLOY = ROOT / "deploy"


@dataclass
class Topology:
    """Start with ``start()``; stop with ``stop()``. ``redis_url``/``mysql_url`` reuse running
    servers (tests); without them, throwaway ones are started with scripts/services.sh."""

    workdir: Path
    redis_url: str = ""
    mysql_url: str = ""
    gateways: int = 2
    relays: int = 2
    #: Status API replicas behind nginx (each ``serve --workers status_api_workers``).
    status_apis: int = 2
    #: ``taskcast status-api serve --workers N`` (one port; status_api/workers.py).
    status_api_workers: int = 1
    heartbeat_timeout_seconds: float = 60.0
    #: The relays' wake-up: ``redis`` (the deploy files' hint over Redis PUB/SUB) or ``udp`` (no
    #: Redis for wake-ups: ``wake.udp_targets`` → each relay's ``wake_udp_listen``; the deploy
    #: files are copied into the work directory without their ``wake`` Redis URL).
    wake: str = "redis"
    #: Run the relays from this checkout instead of this one (benchmarks' A/B of the relay).
    relay_root: Path | None = None
    #: How long each process may take to become ready (loaded CI machines need more than a laptop).
    ready_timeout_seconds: float = 60.0
    hmac_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    api_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    service_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    execution_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    user_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    #: Own Redis Sentinel group and MariaDB primary + replica (``redis_url``/``mysql_url`` unused).
    ha: bool = False
    #: Children in sessions of their own (``Proc.new_session``): for the CLI, where a terminal's
    #: Ctrl-C must reach only the topology, which then stops everything in order.
    detach: bool = False
    procs: dict[str, Proc] = field(default_factory=dict)
    own_services: bool = False
    sentinel: RedisSentinel | None = None
    mariadb: MariaDB | None = None
    mariadb_replica: MariaDB | None = None
    supervisor: Supervisor | None = None

    # --- addresses ------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._allocate_ports()
        self.prefix = f"topo{uuid.uuid4().hex[:8]}"

    def _allocate_ports(self) -> None:
        """Free ports for the listeners. ``start`` picks them again once the services are up, just
        before the processes bind: a port picked a minute earlier (MariaDB and Sentinel start
        first) may meanwhile be taken by anything else on the machine."""
        self.gateway_ports = [free_port() for _ in range(self.gateways)]
        self.status_ports = [free_port() for _ in range(self.status_apis)]
        self.relay_metrics_ports = [free_port() for _ in range(self.relays)]
        self.public_port = free_port()
        self.internal_port = free_port()

    @property
    def wake_channel(self) -> str:
        """The relays' wake-up channel, per topology (runs sharing one Redis never wake each other)."""
        return f"{self.prefix}:outbox:wake"

    @property
    def public_url(self) -> str:
        return f"http://127.0.0.1:{self.public_port}"

    @property
    def public_ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.public_port}/connection/websocket"

    @property
    def internal_url(self) -> str:
        """nginx's internal listener: /internal/v1 (workers), /admin/v1, metrics, the server API."""
        return f"http://127.0.0.1:{self.internal_port}"

    @property
    def internal_api_url(self) -> str:
        return f"http://127.0.0.1:{self.internal_port}/api"

    def gateway_url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.gateway_ports[n]}"

    @property
    def status_port(self) -> int:
        """The first Status API replica's port."""
        return self.status_ports[0]

    @property
    def status_api_url(self) -> str:
        """The first Status API replica (the others: ``status_ports``; all behind nginx)."""
        return f"http://127.0.0.1:{self.status_port}"

    # --- lifecycle ------------------------------------------------------------------------------

    def _services(self) -> None:
        if self.ha:
            self._ha_services()
            return
        if self.redis_url and self.mysql_url:
            return
        redis_url, mysql_url = start_services(self.workdir / "services")
        self.own_services = True
        self.redis_url = self.redis_url or redis_url
        self.mysql_url = self.mysql_url or mysql_url

    def _ha_services(self) -> None:
        """Redis master + replica + three Sentinels, MariaDB primary + replica, all supervised."""
        services = self.workdir / "services"
        self.sentinel = RedisSentinel(services / "redis")
        for proc in self.sentinel.all_procs():
            proc.new_session = self.detach
            self.procs[proc.name] = proc.start()
        self.sentinel.wait_ready(self.ready_timeout_seconds)
        self.redis_url = self.sentinel.url
        self.mariadb = MariaDB(services / "mariadb-primary", server_id=1)
        self.mariadb_replica = MariaDB(services / "mariadb-replica", server_id=2)
        for server in (self.mariadb, self.mariadb_replica):
            server.process().new_session = self.detach
            server.start(self.ready_timeout_seconds)
            proc = server.process()
            self.procs[proc.name] = proc
        self.mariadb_replica.replicate_from(self.mariadb)
        self.mysql_url = self.mariadb.url("taskcast")

    def _database(self) -> str:
        """A database of its own on the MariaDB server, so runs never see each other's rows."""
        name = self.prefix
        parts = urlsplit(self.mysql_url)
        user, _, rest = (parts.netloc.rpartition("@")[0]).partition(":")
        host, _, port = parts.netloc.rpartition("@")[2].partition(":")
        subprocess.run(
            ["mariadb", "--no-defaults", f"-h{host}", f"-P{port}", f"-u{user}", f"-p{rest}", "-e",
             f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return urlunsplit(parts._replace(path=f"/{name}"))

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CENTRIFUGO_", "TASKCAST_"))}
        env.update(extra)
        return env

    def start(self) -> Topology:
        """Start everything and wait until each process is ready; on failure, stop what was
        started and re-raise."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Topology:
        self._services()
        db_url = self._database()
        self._allocate_ports()
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        status_env = self._env(
            TASKCAST_STATUS_API_DATABASE__URL=db_url,
            TASKCAST_STATUS_API_INTERNAL_AUTH__JWT_SECRET=self.service_secret,
            TASKCAST_STATUS_API_EXECUTION_TOKEN__SECRET=self.execution_secret,
            TASKCAST_STATUS_API_USER_AUTH__SECRET=self.user_secret,
            TASKCAST_STATUS_API_REALTIME__SECRET=self.hmac_secret,
            TASKCAST_STATUS_API_HTTP__HOST="127.0.0.1",
            TASKCAST_STATUS_API_RECONCILER__INTERVAL_SECONDS="1",
            TASKCAST_STATUS_API_RECONCILER__HEARTBEAT_TIMEOUT_SECONDS=str(self.heartbeat_timeout_seconds),
            TASKCAST_STATUS_API_WAKE__CHANNEL=self.wake_channel,
        )
        status_cfg, relay_cfg = str(DEPLOY / "status-api.yaml"), str(DEPLOY / "relay.yaml")
        udp_ports = [free_port() for _ in range(self.relays)] if self.wake == "udp" else []
        if udp_ports:
            status_cfg = self._deploy_copy(
                "status-api.yaml", wake={"udp_targets": [f"127.0.0.1:{p}" for p in udp_ports]}
            )
            relay_cfg = self._deploy_copy("relay.yaml", wake_redis_url=None)
        else:
            status_env["TASKCAST_STATUS_API_WAKE__REDIS_URL"] = self.redis_url
        subprocess.run(
            service_argv("status-api", "init-db", "--config", status_cfg),
            cwd=ROOT,
            env=status_env,
            check=True,
            capture_output=True,
        )
        for n, port in enumerate(self.gateway_ports):
            env = self._env(
                CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY=self.hmac_secret,
                CENTRIFUGO_HTTP_API_KEY=self.api_key,
                CENTRIFUGO_ENGINE_REDIS_ADDRESS=self.redis_url,
                CENTRIFUGO_ENGINE_REDIS_PREFIX=self.prefix,
                CENTRIFUGO_HTTP_SERVER_ADDRESS="127.0.0.1",
                CENTRIFUGO_HTTP_SERVER_PORT=str(port),
                CENTRIFUGO_NODE_NAME=f"gateway{n + 1}",
                CENTRIFUGO_CLIENT_ALLOWED_ORIGINS=f"{self.public_url} http://127.0.0.1:*",
            )
            argv = service_argv("gateway", "--config", str(DEPLOY / "gateway.json"))
            self._add(f"gateway{n + 1}", argv, env, f"{self.gateway_url(n)}/health")
        for n, port in enumerate(self.status_ports):
            self._add(
                f"status-api{n + 1}",
                service_argv(
                    "status-api", "serve", "--config", status_cfg, "--workers", str(self.status_api_workers)
                ),
                {**status_env, "TASKCAST_STATUS_API_HTTP__PORT": str(port)},
                f"http://127.0.0.1:{port}/readyz",
            )
        self._add(
            "reconciler",
            service_argv("status-api", "reconcile", "--config", status_cfg),
            status_env,
        )
        self._start_nginx()
        for n, port in enumerate(self.relay_metrics_ports):
            env = self._env(
                TASKCAST_RELAY_DATABASE_URL=db_url,
                TASKCAST_RELAY_GATEWAY_API_URL=self.internal_api_url,
                TASKCAST_RELAY_GATEWAY_API_KEY=self.api_key,
                TASKCAST_RELAY_RELAY_ID=f"relay{n + 1}",
                TASKCAST_RELAY_METRICS_HOST="127.0.0.1",
                TASKCAST_RELAY_METRICS_PORT=str(port),
                TASKCAST_RELAY_WAKE_CHANNEL=self.wake_channel,
            )
            if udp_ports:
                env["TASKCAST_RELAY_WAKE_UDP_LISTEN"] = f"127.0.0.1:{udp_ports[n]}"
            else:
                env["TASKCAST_RELAY_WAKE_REDIS_URL"] = self.redis_url
            argv = service_argv("relay", "run", "--config", relay_cfg)
            self._add(f"relay{n + 1}", argv, env, f"http://127.0.0.1:{port}/metrics", cwd=self.relay_root)
        for proc in self.procs.values():
            proc.wait_ready(self.ready_timeout_seconds)
        return self

    def _deploy_copy(self, name: str, **changes: object) -> str:
        """deploy/``name`` with top-level ``changes`` (None drops the key), written to the work
        directory; its path."""
        import yaml

        doc = yaml.safe_load((DEPLOY / name).read_text(encoding="utf-8"))
        for key, value in changes.items():
            if value is None:
                doc.pop(key, None)
            else:
                doc[key] = value
        path = self.workdir / name
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return str(path)

    def _add(
        self, name: str, argv: list[str], env: dict[str, str], health_url: str = "", cwd: Path | None = None
    ) -> Proc:
        proc = Proc(name, argv, env, self.workdir / "logs" / f"{name}.log", health_url)
        if cwd is not None:
            proc.cwd = cwd
        proc.new_session = self.detach
        proc.start()
        self.procs[name] = proc
        return proc

    def _start_nginx(self) -> None:
        proc = nginx_proc(
            self.workdir / "nginx",
            self.public_port,
            self.internal_port,
            [f"127.0.0.1:{port}" for port in self.gateway_ports],
            [f"127.0.0.1:{port}" for port in self.status_ports],
            self._env(),
        )
        proc.new_session = self.detach
        self.procs[proc.name] = proc.start()

    def supervise(self, on_restart: Callable[[Proc, int | None], None] | None = None) -> Supervisor:
        """Restart every process of the topology that exits, from now until :meth:`stop`."""
        if self.supervisor is None:
            self.supervisor = Supervisor(self.procs, on_restart=on_restart).start()
        return self.supervisor

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        if self.own_services:
            subprocess.run(
                ["bash", str(ROOT / "scripts/services.sh"), "stop", str(self.workdir / "services")],
                check=False,
                capture_output=True,
            )

    def __enter__(self) -> Topology:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def topology_nodes(topo: Topology, within: float = 15.0) -> list[dict[str, object]]:
    """The gateways' ``info`` once every node has announced itself with fresh counts (node
    heartbeats run every few seconds), polled within a bound."""
    import asyncio

    import httpx

    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=5, headers={"X-API-Key": topo.api_key}) as http:
        while True:
            reply = (await http.post(f"{topo.internal_api_url}/info", json={})).json()
            nodes: list[dict[str, object]] = reply["result"]["nodes"]
            fresh = all(isinstance(n.get("num_clients"), int) and n["num_clients"] for n in nodes)
            if len(nodes) == topo.gateways and (fresh or time.monotonic() > deadline - within / 2):
                return nodes
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(nodes)} of {topo.gateways} gateways announced: {nodes}")
            await asyncio.sleep(0.2)  # polling interval of a bounded wait (heartbeats every 3 s)


if __name__ == "__main__":
    from taskcast.dev.topology_cli import main

    sys.exit(main())
