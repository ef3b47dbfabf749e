"""The production topology of docker-compose.yml, from local processes (``make topology``).

Real MariaDB and Redis, two gateways on the Redis engine, the Status API, the health reconciler,
two relays and nginx in front — started with the SAME files as the compose file (deploy/*.json,
deploy/*.yaml, deploy/nginx/taskcast.conf.template) plus environment overrides, on free ports
under one work directory. Used by the e2e tests (``Topology(...).start()``) and as a CLI:

    python -m taskcast.dev.topology [--dir DIR]   # make topology; prints the URLs, Ctrl-C stops everything
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from taskcast.dev.nginx import nginx_proc
from taskcast.dev.procs import ROOT, Proc, free_port, service_argv, start_services

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
    #: ``taskcast status-api serve --workers N`` (one port; status_api/workers.py).
    status_api_workers: int = 1
    heartbeat_timeout_seconds: float = 60.0
    #: How long each process may take to become ready (loaded CI machines need more than a laptop).
    ready_timeout_seconds: float = 60.0
    hmac_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    api_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    service_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    execution_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    user_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    procs: dict[str, Proc] = field(default_factory=dict)
    own_services: bool = False

    # --- addresses ------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.gateway_ports = [free_port() for _ in range(self.gateways)]
        self.status_port = free_port()
        self.relay_metrics_ports = [free_port() for _ in range(self.relays)]
        self.public_port = free_port()
        self.internal_port = free_port()
        self.prefix = f"topo{uuid.uuid4().hex[:8]}"

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
    def status_api_url(self) -> str:
        return f"http://127.0.0.1:{self.status_port}"

    # --- lifecycle ------------------------------------------------------------------------------

    def _services(self) -> None:
        if self.redis_url and self.mysql_url:
            return
        redis_url, mysql_url = start_services(self.workdir / "services")
        self.own_services = True
        self.redis_url = self.redis_url or redis_url
        self.mysql_url = self.mysql_url or mysql_url

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
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        status_env = self._env(
            TASKCAST_STATUS_API_DATABASE__URL=db_url,
            TASKCAST_STATUS_API_INTERNAL_AUTH__JWT_SECRET=self.service_secret,
            TASKCAST_STATUS_API_EXECUTION_TOKEN__SECRET=self.execution_secret,
            TASKCAST_STATUS_API_USER_AUTH__SECRET=self.user_secret,
            TASKCAST_STATUS_API_REALTIME__SECRET=self.hmac_secret,
            TASKCAST_STATUS_API_HTTP__HOST="127.0.0.1",
            TASKCAST_STATUS_API_HTTP__PORT=str(self.status_port),
            TASKCAST_STATUS_API_RECONCILER__INTERVAL_SECONDS="1",
            TASKCAST_STATUS_API_RECONCILER__HEARTBEAT_TIMEOUT_SECONDS=str(self.heartbeat_timeout_seconds),
            TASKCAST_STATUS_API_WAKE__REDIS_URL=self.redis_url,
            TASKCAST_STATUS_API_WAKE__CHANNEL=self.wake_channel,
        )
        status_cfg = str(DEPLOY / "status-api.yaml")
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
        self._add(
            "status-api",
            service_argv(
                "status-api", "serve", "--config", status_cfg, "--workers", str(self.status_api_workers)
            ),
            status_env,
            f"{self.status_api_url}/readyz",
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
                TASKCAST_RELAY_WAKE_REDIS_URL=self.redis_url,
                TASKCAST_RELAY_WAKE_CHANNEL=self.wake_channel,
            )
            argv = service_argv("relay", "run", "--config", str(DEPLOY / "relay.yaml"))
            self._add(f"relay{n + 1}", argv, env, f"http://127.0.0.1:{port}/metrics")
        for proc in self.procs.values():
            proc.wait_ready(self.ready_timeout_seconds)
        return self

    def _add(self, name: str, argv: list[str], env: dict[str, str], health_url: str = "") -> Proc:
        proc = Proc(name, argv, env, self.workdir / "logs" / f"{name}.log", health_url)
        proc.start()
        self.procs[name] = proc
        return proc

    def _start_nginx(self) -> None:
        proc = nginx_proc(
            self.workdir / "nginx",
            self.public_port,
            self.internal_port,
            [f"127.0.0.1:{port}" for port in self.gateway_ports],
            [f"127.0.0.1:{self.status_port}"],
            self._env(),
        )
        self.procs[proc.name] = proc.start()

    def stop(self) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start the production topology from local processes.")
    parser.add_argument("--dir", default="", help="work directory (default: a new temp dir)")
    args = parser.parse_args(argv)
    import tempfile

    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="taskcast-topology-"))
    topo = Topology(workdir)
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        topo.start()
        print(f"public (nginx):   {topo.public_url}   websocket {topo.public_ws_url}")
        print(f"gateway API:      {topo.internal_api_url}  (X-API-Key: {topo.api_key[:4]}…, see {workdir})")
        print(f"status API:       {topo.status_api_url}")
        print(f"logs:             {workdir / 'logs'}")
        (workdir / "secrets.env").write_text(
            f"TASKCAST_HMAC_SECRET={topo.hmac_secret}\nTASKCAST_API_KEY={topo.api_key}\n"
            f"TASKCAST_SERVICE_SECRET={topo.service_secret}\nTASKCAST_USER_SECRET={topo.user_secret}\n"
        )
        print("running; Ctrl-C stops everything", flush=True)
        while not stop:
            for proc in topo.procs.values():
                if not proc.running:
                    print(f"{proc.name} exited:\n{proc.log_text()[-2000:]}", file=sys.stderr)
                    stop = True
            time.sleep(0.5)
    finally:
        topo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
