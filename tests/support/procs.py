"""The ONE factory of real Taskcast service processes for the tests: a gateway, a Status API and a
relay, each ``python -m taskcast <service> --config F`` on its own config file and log, over the
shared :class:`taskcast.dev.procs.Proc` (the one the topology and the benchmarks use).

``start()`` returns once the service is ready (``/health`` of the gateway, ``/readyz`` of the
Status API, ``/metrics`` of a relay with a metrics port; a relay without one is ready at once),
within a bound scaled by ``TASKCAST_TEST_TIME_SCALE``. ``.proc`` is the ``Popen`` for tests that
signal the child themselves (SIGSTOP/SIGCONT, SIGKILL at an observed state).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

import jwt

from taskcast.dev.procs import ROOT, Proc, free_port, http_ok, service_argv
from tests.support.waiting import scaled, wait_until, wait_until_blocking

READY_TIMEOUT_SECONDS = 60.0
DEFAULT_API_KEY = "conformance-api-key"
# Variables that would silently override the config file a test writes.
_OVERRIDE_PREFIXES = ("CENTRIFUGO_", "TASKCAST_STATUS_API_", "TASKCAST_RELAY_", "TASKCAST_HTTP_")

__all__ = [
    "DEFAULT_API_KEY",
    "ROOT",
    "GatewayProcess",
    "RelayProcess",
    "ServiceProcess",
    "StatusApiProcess",
    "free_port",
    "merge",
    "mint_token",
]


def mint_token(secret: str, sub: str = "42", *, exp_in: float | None = None, **claims: Any) -> str:
    """An HS256 JWT; ``exp_in`` seconds from now sets ``exp`` (negative = already expired)."""
    payload: dict[str, Any] = {"sub": sub, **claims}
    if exp_in is not None:
        payload["exp"] = int(time.time() + exp_in)
    return jwt.encode(payload, secret, algorithm="HS256")


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``extra`` merged in (nested dicts merged, the rest replaced)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def service_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without variables that override a service's config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OVERRIDE_PREFIXES)}
    env.update(extra or {})
    return env


class ServiceProcess:
    """One Taskcast service subprocess: ``python -m taskcast *args`` with a config file under
    ``workdir``; ready when ``health_url`` answers 200."""

    def __init__(
        self,
        name: str,
        args: list[str],
        workdir: Path,
        health_url: str = "",
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        launcher: list[str] | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.cwd = cwd
        self.launcher = launcher or service_argv()
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.health_url = health_url
        self._proc = Proc(name, [*self.launcher, *args], service_env(env), self.log_path, health_url, cwd)

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._proc.popen

    def launch(self) -> Self:
        """Start the child without waiting for it to be ready (a test that expects it never to be)."""
        self._proc.start()
        return self

    def start(self) -> Self:
        self._proc.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.terminate()
            raise
        return self

    def health_ok(self) -> bool:
        return bool(self.health_url) and http_ok(self.health_url)

    def wait_healthy(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Until ready; RuntimeError with the log if the child exits first."""
        self._proc.wait_ready(scaled(timeout))

    def log_text(self) -> str:
        return self._proc.log_text()

    @property
    def running(self) -> bool:
        return self._proc.running

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def send_sigterm(self) -> None:
        self._proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self._proc.wait(scaled(timeout))

    async def wait_exit(self, within: float) -> int:
        """The exit code, polled without blocking the event loop."""
        await wait_until(lambda: self._proc.returncode is not None, within, f"{self.name} exit")
        return int(self._proc.returncode or 0)

    def kill(self) -> None:
        """SIGKILL and reap."""
        self._proc.kill(signal.SIGKILL)

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        return self._proc.stop(scaled(timeout))


WORKERS_ENV = "TASKCAST_TEST_GATEWAY_WORKERS"
"""Default ``--workers`` of every test gateway (run a suite on N workers: ``=2 pytest ...``)."""


def default_workers() -> int:
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "1")))
    except ValueError:
        return 1


class GatewayProcess(ServiceProcess):
    """A gateway on 127.0.0.1 with ``health`` on and an API key; ``config`` uses Centrifugo v6
    option names and is merged over those defaults. ``workers`` > 1 runs ``--workers N``
    (default: ``TASKCAST_TEST_GATEWAY_WORKERS``, else 1); ready means every worker's node is in
    the server API ``info``."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        *,
        workers: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workers = default_workers() if workers is None else workers
        self.port = free_port()
        base = {
            "http_server": {"address": "127.0.0.1", "port": self.port},
            "health": {"enabled": True},
            "http_api": {"key": DEFAULT_API_KEY},
        }
        self.config = merge(base, config)
        http = self.config["http_server"]
        http["port"] = self.port
        self.api_key: str = self.config["http_api"].get("key", "")
        tls = bool(http.get("tls", {}).get("enabled"))  # https/wss URLs (trust the CA: SSL_CERT_FILE)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.ws_url = f"{'wss' if tls else 'ws'}://127.0.0.1:{self.port}/connection/websocket"
        self.internal_url = self.url  # the API, metrics and health (http_server.internal_port moves them)
        if http.get("internal_port"):
            self.internal_url = f"{'https' if tls else 'http'}://127.0.0.1:{http['internal_port']}"
        self.api_url = f"{self.internal_url}/api"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"gateway-{self.port}.json"
        self.config_path.write_text(json.dumps(self.config, indent=2))
        args = ["gateway", "--config", str(self.config_path)]
        if self.workers > 1:
            args += ["--workers", str(self.workers)]
        super().__init__(f"gateway-{self.port}", args, workdir, f"{self.internal_url}/health", env)

    def wait_healthy(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        super().wait_healthy(timeout)
        if self.workers > 1 and self.api_key and self.config.get("http_api", {}).get("disabled") is not True:
            wait_until_blocking(
                lambda: len(self.nodes()) >= self.workers, timeout, f"{self.workers} workers in info"
            )

    def nodes(self) -> list[dict[str, Any]]:
        """The server API ``info`` nodes ([] when it does not answer)."""
        request = urllib.request.Request(
            f"{self.api_url}/info", data=b"{}", headers={"X-API-Key": self.api_key}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as resp:
                return list(json.loads(resp.read())["result"]["nodes"])
        except (OSError, ValueError, KeyError):
            return []


class StatusApiProcess(ServiceProcess):
    """``taskcast status-api init-db`` then ``serve`` on a free port; ``config`` is a Status API
    config document (docs/status-api.md) whose ``http`` host/port are set here. ``cwd`` (and a
    ``PYTHONPATH`` in ``env``, and a ``launcher`` other than ``python -m taskcast``) run another
    source tree, e.g. a replayed image."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        launcher: list[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.config = merge(config, {"http": {"host": "127.0.0.1", "port": self.port}})
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"status-api-{self.port}.json"
        self.config_path.write_text(json.dumps(self.config, indent=2))
        self._env = env
        super().__init__(
            f"status-api-{self.port}",
            ["status-api", "serve", "--config", str(self.config_path)],
            workdir,
            f"{self.url}/readyz",
            env,
            cwd,
            launcher,
        )

    def start(self) -> Self:
        subprocess.run(
            [*self.launcher, "status-api", "init-db", "--config", str(self.config_path)],
            cwd=self.cwd,
            env=service_env(self._env),
            check=True,
            capture_output=True,
            timeout=scaled(60),
        )
        return super().start()


class RelayProcess(ServiceProcess):
    """``taskcast relay run`` on a relay config document (docs/relay.md, must hold ``relay_id``);
    with ``metrics_port`` in it, ready when ``/metrics`` answers."""

    def __init__(self, cfg: dict[str, Any], workdir: Path, env: dict[str, str] | None = None) -> None:
        self.config = dict(cfg)
        name = str(cfg["relay_id"])
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"{name}.json"
        self.config_path.write_text(json.dumps(self.config))
        port = cfg.get("metrics_port")
        health = f"http://{cfg.get('metrics_host', '127.0.0.1')}:{port}/metrics" if port else ""
        super().__init__(name, ["relay", "run", "--config", str(self.config_path)], workdir, health, env)
