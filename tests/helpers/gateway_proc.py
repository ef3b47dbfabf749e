"""Run a real gateway process for tests that talk to it over real sockets.

``GatewayProcess(config, tmp_path)`` writes the config (Centrifugo v6 option names) to a JSON
file, picks a free port, starts ``python -m taskcast gateway --config F`` with output going to
a log file, and polls ``GET /health`` until it answers (no fixed sleeps). ``mint_token`` makes
HS256 JWTs with PyJWT.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jwt

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 10.0
DEFAULT_API_KEY = "conformance-api-key"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mint_token(secret: str, sub: str = "42", *, exp_in: float | None = None, **claims: Any) -> str:
    """An HS256 JWT; ``exp_in`` seconds from now sets ``exp`` (negative = already expired)."""
    payload: dict[str, Any] = {"sub": sub, **claims}
    if exp_in is not None:
        payload["exp"] = int(time.time() + exp_in)
    return jwt.encode(payload, secret, algorithm="HS256")


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class GatewayProcess:
    """A gateway subprocess on 127.0.0.1 with health enabled and an API key."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        self.port = free_port()
        base = {
            "http_server": {"address": "127.0.0.1", "port": self.port},
            "health": {"enabled": True},
            "http_api": {"key": DEFAULT_API_KEY},
        }
        self.config = _merge(base, config)
        self.config["http_server"]["port"] = self.port
        self.api_key: str = self.config["http_api"].get("key", "")
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"gateway-{self.port}.json"
        self.config_path.write_text(json.dumps(self.config, indent=2))
        self.log_path = workdir / f"gateway-{self.port}.log"
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/connection/websocket"
        self.api_url = f"{self.url}/api"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> GatewayProcess:
        env = dict(os.environ)
        env.pop("CENTRIFUGO_HTTP_SERVER_PORT", None)
        env.pop("TASKCAST_HTTP_SERVER_PORT", None)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "taskcast", "gateway", "--config", str(self.config_path)],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.wait_healthy()
        return self

    def health_ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log_text()}")
            if self.health_ok():
                return
            time.sleep(0.05)  # polling interval of the readiness loop, not a synchronisation sleep
        self.terminate()
        raise TimeoutError(f"gateway not healthy within {timeout}s:\n{self.log_text()}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send_sigterm(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode
