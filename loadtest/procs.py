"""Processes for the benchmarks: throwaway Redis/MariaDB (scripts/services.sh) and gateways started
with the production config (deploy/gateway.json + the same environment overrides as
taskcast/dev/topology.py). Only processes started here are ever signalled."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from taskcast.dev.procs import Proc, free_port, start_services  # noqa: E402


@dataclass
class Services:
    """Redis + MariaDB: the given URLs, or throwaway ones started (and stopped) here."""

    redis_url: str = ""
    mysql_url: str = ""
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="taskcast-bench-svc-")))
    owned: bool = False
    need_mysql: bool = True

    def start(self) -> Services:
        self.redis_url = self.redis_url or os.environ.get("TASKCAST_TEST_REDIS_URL", "")
        self.mysql_url = self.mysql_url or os.environ.get("TASKCAST_TEST_MYSQL_URL", "")
        if self.redis_url and (self.mysql_url or not self.need_mysql):
            return self
        redis_url, mysql_url = start_services(self.workdir)
        self.owned = True
        self.redis_url = self.redis_url or redis_url
        self.mysql_url = self.mysql_url or mysql_url
        return self

    def stop(self) -> None:
        if self.owned:
            subprocess.run(
                ["bash", str(ROOT / "scripts/services.sh"), "stop", str(self.workdir)],
                check=False,
                capture_output=True,
            )
            self.owned = False


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CENTRIFUGO_", "TASKCAST_"))}
    env.update(extra)
    return env


@dataclass
class GatewayCluster:
    """``count`` gateways on the Redis engine with deploy/gateway.json (overrides in ``extra``)."""

    redis_url: str
    workdir: Path
    count: int = 2
    extra: dict[str, Any] = field(default_factory=dict)
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    api_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    prefix: str = field(default_factory=lambda: f"bench{secrets.token_hex(4)}")
    procs: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports = [free_port() for _ in range(self.count)]
        base = json.loads((ROOT / "deploy/gateway.json").read_text())
        _merge(base, self.extra)
        self.config_path = self.workdir / "gateway.json"
        self.config_path.write_text(json.dumps(base, indent=1))

    def start(self) -> GatewayCluster:
        for n, port in enumerate(self.ports):
            env = clean_env(
                CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY=self.secret,
                CENTRIFUGO_HTTP_API_KEY=self.api_key,
                CENTRIFUGO_ENGINE_REDIS_ADDRESS=self.redis_url,
                CENTRIFUGO_ENGINE_REDIS_PREFIX=self.prefix,
                CENTRIFUGO_HTTP_SERVER_ADDRESS="127.0.0.1",
                CENTRIFUGO_HTTP_SERVER_PORT=str(port),
                CENTRIFUGO_NODE_NAME=f"gateway{n + 1}",
            )
            argv = [sys.executable, "-m", "taskcast", "gateway", "--config", str(self.config_path)]
            proc = Proc(
                f"gateway{n + 1}", argv, env, self.workdir / f"gateway{n + 1}.log",
                f"http://127.0.0.1:{port}/health",
            )  # fmt: skip
            proc.start()
            self.procs.append(proc)
        for proc in self.procs:
            proc.wait_ready()
        return self

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs if p.popen is not None]

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def cpu_seconds(pids: list[int]) -> float:
    """user+sys CPU seconds of the given processes (from /proc; 0 for a gone process)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def listener_pid(port: int) -> int | None:
    """The pid of the local process listening on TCP ``port`` (a server's, for CPU accounting)."""
    import psutil

    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return int(c.pid)
    return None
