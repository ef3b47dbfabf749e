"""Redis with Sentinel from local processes (the compose file's shape): one master, one replica and
three Sentinels, each a foreground ``redis-server`` under one work directory.

:attr:`RedisSentinel.url` is the ``redis+sentinel://`` address every service takes (the gateway's
``engine.redis.address``, the Status API's ``wake.redis_url``, the relay's ``wake_redis_url``).
``down_after_ms`` is how long the Sentinels wait before they call the master down (tests shorten
it); a failover then promotes the replica within a few seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from taskcast.dev.procs import Proc, free_port

MASTER_NAME = "taskcast"
QUORUM = 2


def _redis_server() -> str:
    return shutil.which("redis-server") or "/usr/bin/redis-server"


def redis_cli(port: int, *args: str, timeout: float = 5.0) -> str:
    """``redis-cli -p port args…`` on 127.0.0.1; its stdout ("" when it fails)."""
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    run = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True, timeout=timeout
    )
    return run.stdout.strip() if run.returncode == 0 else ""


@dataclass
class RedisSentinel:
    workdir: Path
    down_after_ms: int = 5000
    failover_timeout_ms: int = 10000
    master_port: int = field(default_factory=free_port)
    replica_port: int = field(default_factory=free_port)
    sentinel_ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(3)])
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def url(self) -> str:
        first, *rest = self.sentinel_ports
        extra = "".join(f"&addr=127.0.0.1:{p}" for p in rest)
        return f"redis+sentinel://127.0.0.1:{first}?sentinel_master_name={MASTER_NAME}{extra}"

    def _server(self, name: str, port: int, *extra: str) -> Proc:
        data = self.workdir / name
        data.mkdir(parents=True, exist_ok=True)
        argv = [_redis_server(), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
                "--save", "", "--appendonly", "yes", "--maxmemory-policy", "noeviction", *extra]  # fmt: skip
        return Proc(name, argv, None, self.workdir / "logs" / f"{name}.log")

    def _sentinel(self, n: int, port: int) -> Proc:
        conf = self.workdir / f"sentinel{n}.conf"  # Sentinel rewrites its file: one each, writable
        conf.write_text(
            f"bind 127.0.0.1\nport {port}\ndir {self.workdir}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        argv = [_redis_server(), str(conf), "--sentinel"]
        return Proc(f"sentinel{n}", argv, None, self.workdir / "logs" / f"sentinel{n}.log")

    def all_procs(self) -> list[Proc]:
        """Every process, unstarted the first time (a supervisor may start and restart them)."""
        if not self.procs:
            (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
            procs = [
                self._server("redis-master", self.master_port),
                self._server(
                    "redis-replica", self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port)
                ),
                *(self._sentinel(n + 1, port) for n, port in enumerate(self.sentinel_ports)),
            ]
            self.procs = {p.name: p for p in procs}
        return list(self.procs.values())

    def start(self, timeout: float = 30.0) -> RedisSentinel:
        """Start everything; return once the Sentinels agree on the master and see the replica."""
        for proc in self.all_procs():
            proc.start()
        self.wait_ready(timeout)
        return self

    def master(self) -> tuple[str, int] | None:
        """The master's address as the first Sentinel that answers reports it."""
        for port in self.sentinel_ports:
            out = redis_cli(port, "SENTINEL", "get-master-addr-by-name", MASTER_NAME).split()
            if len(out) == 2:
                return out[0], int(out[1])
        return None

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            replicas = [
                redis_cli(p, "SENTINEL", "replicas", MASTER_NAME).count("\n") for p in self.sentinel_ports
            ]
            sentinels = [
                redis_cli(p, "SENTINEL", "sentinels", MASTER_NAME).count("\n") for p in self.sentinel_ports
            ]
            if all(r > 0 for r in replicas) and all(s > 0 for s in sentinels) and self.master():
                return
            for proc in self.all_procs():
                if proc.returncode is not None:
                    raise RuntimeError(f"{proc.name} exited:\n{proc.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Redis Sentinel not ready within {timeout}s (replicas {replicas})")
            time.sleep(0.1)  # polling interval of a bounded wait

    def stop(self) -> None:
        for proc in reversed(self.all_procs()):
            proc.stop()
