"""``taskcast up``: the whole pipeline in ONE process and ONE asyncio loop, on embedded defaults.

Composition (ARCHITECTURE.md "Embedded default and scale-out"), all bound to ``--host`` (127.0.0.1):

* **gateway** on ``--port-gateway`` (8000): memory engine; configuration generated with Centrifugo
  option names and written to ``<data-dir>/gateway.json`` (namespaces ``task_user``, ``task_detail``,
  ``task_project`` with history + force_recovery, a detail subscription limit, the board's origins,
  SSE + HTTP-streaming, ``/health``, ``/metrics``). Served by its own uvicorn ``Server`` with
  ``gateway.http.server.build_server``, like ``taskcast gateway``.
* **Status API + task board** on ``--port-api`` (8100): SQLite file ``<data-dir>/taskcast.db``
  (schema and registries applied at startup), realtime secret = the gateway's HMAC secret,
  ``user_auth.mode: dev`` (identity from ``X-Taskcast-Dev-User``; the board's ``?user=`` parameter),
  health reconciler every second with a short heartbeat timeout so STALE is visible in the demo.
  A second uvicorn ``Server`` in the same loop (one port would clash: both use ``/api/…``).
* **relay**: single SQLite claimer, publishing to the gateway's server API over loopback HTTP
  (``relay.publisher.HttpGatewayPublisher``) — the same path as production. The one in-process
  shortcut is the wake-up: the Status API's post-commit hook calls ``Relay.wake`` directly (no
  Redis here); the relay's 1 s poll is the safety net, as in production.
* **demo** (unless ``--no-demo``): ``taskcast.demo.run_demo`` talking HTTP to the Status API's
  internal endpoints with a service JWT, creating tasks until stopped and keeping
  ``DEMO_KEEP_RUNNING`` unfinished tasks per demo user at any time.

Secrets (gateway HMAC key, gateway API key, internal service JWT key, executionToken key) are
generated once per data dir into ``<data-dir>/secrets.json`` (mode 0600) and never logged.

Shutdown on SIGTERM/SIGINT: stop the demo (it cancels its unfinished tasks), stop the relay, stop
the Status API server, then the gateway; the whole sequence is bounded by ``SHUTDOWN_SECONDS``.
Exit codes: 0 clean stop, 1 runtime failure, 2 usage error (e.g. a port in use).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

if TYPE_CHECKING:
    from relay.relay import Relay
    from status_api.config import Config

log = logging.getLogger("taskcast.up")

DEMO_USERS = ("demo/alice", "demo/bob", "demo/carol")
DEMO_KEEP_RUNNING = 2  # unfinished demo tasks per user at any time (the board never looks idle)
SECRET_NAMES = ("gateway_hmac_secret", "gateway_api_key", "service_jwt_secret", "execution_token_secret")
STARTUP_SECONDS = 30.0
SHUTDOWN_SECONDS = 10.0
DRAIN_SECONDS = 2.0
SERVER_GRACE_SECONDS = 2
"""The Status API listener's request deadline (the gateway's is its http_server.request_timeout)."""


@dataclass(frozen=True, slots=True)
class UpOptions:
    port_gateway: int = 8000
    port_api: int = 8100
    data_dir: Path = Path("var")
    demo: bool = True
    open_browser: bool = False
    host: str = "127.0.0.1"
    demo_speed: float = 1.0
    heartbeat_timeout: float = 8.0
    reconcile_interval: float = 1.0
    #: Extra browser origins (``--allowed-origin``): an app on its own dev server, e.g.
    #: http://localhost:5173. Added to the gateway's ``client.allowed_origins`` and the Status API's
    #: ``cors.allowed_origins`` (normalized by :func:`status_api.cors.normalize_origin`).
    allowed_origins: tuple[str, ...] = ()

    @property
    def gateway_url(self) -> str:
        return f"http://{self.host}:{self.port_gateway}"

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port_api}"

    def board_url(self, user: str = DEMO_USERS[0]) -> str:
        """The board as ``user`` (dev identity); the Status API's ``board.gateway_url`` names the
        gateway, so any port pair works without a ``gateway`` parameter."""
        return f"{self.api_url}/board/?user={user}"


def load_or_create_secrets(data_dir: Path) -> dict[str, str]:
    """``<data_dir>/secrets.json``: created with fresh random keys (mode 0600), reused afterwards."""
    path = data_dir / "secrets.json"
    current: dict[str, str] = {}
    if path.exists():
        loaded = json.loads(path.read_text(encoding="utf-8"))
        current = {
            k: v for k, v in loaded.items() if k in SECRET_NAMES and isinstance(v, str) and len(v) >= 32
        }
    if all(name in current for name in SECRET_NAMES):
        return current
    for name in SECRET_NAMES:
        current.setdefault(name, secrets.token_urlsafe(32))
    _write_private(path, json.dumps(current, indent=2) + "\n")
    return current


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, 0o600)


def gateway_config(opts: UpOptions, keys: dict[str, str]) -> dict[str, Any]:
    """The gateway's configuration in Centrifugo v6 option names."""
    history = {"history_size": 100, "history_ttl": "300s", "force_recovery": True}
    board = [f"http://{h}:{opts.port_api}" for h in dict.fromkeys((opts.host, "127.0.0.1", "localhost"))]
    origins = list(dict.fromkeys((*board, *opts.allowed_origins)))
    return {
        "http_server": {"address": opts.host, "port": opts.port_gateway},
        "log": {"level": "warn"},
        "engine": {"type": "memory"},
        "client": {"token": {"hmac_secret_key": keys["gateway_hmac_secret"]}, "allowed_origins": origins},
        "http_api": {"key": keys["gateway_api_key"]},
        "sse": {"enabled": True},
        "http_stream": {"enabled": True},
        "health": {"enabled": True},
        "prometheus": {"enabled": True},
        "shutdown": {"timeout": f"{SERVER_GRACE_SECONDS}s"},
        "channel": {
            "history_meta_ttl": "720h",
            "namespaces": [
                {"name": "task_user", **history, "conflation_tag": "task"},
                {
                    "name": "task_detail",
                    **history,
                    "subscription_limit_per_connection": 20,
                    "conflation_tag": "task",
                },
                {"name": "task_project", **history, "conflation_tag": "task"},
                {"name": "task_tenant", **history},  # seed §6.6: maintenance notices of a tenant
                {"name": "task_system", **history},  # seed §6.6: public version/maintenance notices
            ],
        },
    }


def status_api_config(opts: UpOptions, keys: dict[str, str]) -> Config:
    """The Status API's :class:`status_api.config.Config` (SQLite, dev users, fast reconciler)."""
    from status_api.config import (
        BoardConfig,
        Config,
        CorsConfig,
        DatabaseConfig,
        ExecutionTokenConfig,
        HttpConfig,
        InternalAuthConfig,
        RealtimeConfig,
        ReconcilerConfig,
        UserAuthConfig,
    )

    return Config(
        database=DatabaseConfig(url=f"sqlite+aiosqlite:///{(opts.data_dir / 'taskcast.db').resolve()}"),
        http=HttpConfig(host=opts.host, port=opts.port_api, log_level="warning"),
        internal_auth=InternalAuthConfig(mode="jwt", jwt_secret=keys["service_jwt_secret"]),
        execution_token=ExecutionTokenConfig(secret=keys["execution_token_secret"]),
        user_auth=UserAuthConfig(mode="dev"),
        realtime=RealtimeConfig(secret=keys["gateway_hmac_secret"]),
        reconciler=ReconcilerConfig(
            interval_seconds=opts.reconcile_interval, heartbeat_timeout_seconds=opts.heartbeat_timeout
        ),
        cors=CorsConfig(allowed_origins=list(opts.allowed_origins)),
        board=BoardConfig(gateway_url=opts.gateway_url),
    )


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


async def _started(server: uvicorn.Server, task: asyncio.Task[None], name: str) -> None:
    """Wait (bounded) until ``server`` listens; raise if its task ended first."""
    async with asyncio.timeout(STARTUP_SECONDS):
        while not server.started:
            if task.done():
                raise RuntimeError(f"{name} failed to start")
            await asyncio.sleep(0.02)


async def run(opts: UpOptions, stop: asyncio.Event) -> int:
    """Start everything, print the board URL, run until ``stop`` is set, then stop in order."""
    from gateway.app import build
    from gateway.config.loading import load_settings
    from gateway.http.server import GatewayServer, build_server
    from relay.claim import OutboxLeases
    from relay.config import build_config
    from relay.publisher import HttpGatewayPublisher
    from relay.relay import Relay
    from status_api.app import create_app as create_status_app
    from status_api.server import uvicorn_config as status_api_uvicorn_config
    from status_api.storage.database import create_engine
    from taskcast.demo import run_demo

    opts.data_dir.mkdir(parents=True, exist_ok=True)
    keys = load_or_create_secrets(opts.data_dir)
    gw_path = opts.data_dir / "gateway.json"
    _write_private(gw_path, json.dumps(gateway_config(opts, keys), indent=2) + "\n")
    settings, _warnings = load_settings(str(gw_path), {})  # no env: `up` is self-contained
    gateway = build_server(
        settings,
        build(settings),
        host=opts.host,
        port=opts.port_gateway,
        log_level="warning",
        handle_signals=False,  # two servers share this loop: `up` handles the signals
        timeout_graceful_shutdown=SERVER_GRACE_SECONDS,
    )
    sa_cfg = status_api_config(opts, keys)
    relay_cfg = build_config(
        {
            "database_url": sa_cfg.database.url,
            "gateway_api_url": f"{opts.gateway_url}/api",
            "gateway_api_key": keys["gateway_api_key"],
            "relay_id": "taskcast-up",
            # The safety net only: commits wake the relay in-process (docs/relay.md "Wake-up").
            "poll_interval_seconds": 1.0,
            "concurrency": 1,  # one SQLite claimer; keeps publications close to commit order
            "shutdown_timeout_seconds": 3.0,
        }
    )
    leases = OutboxLeases(create_engine(relay_cfg.database_url), relay_cfg.relay_id, lease_seconds=30.0)
    publisher = HttpGatewayPublisher(relay_cfg.gateway_api_url, relay_cfg.gateway_api_key, 5.0)
    relay = Relay(leases, publisher, relay_cfg)
    api = GatewayServer(  # the Status API's own listener bounds (1 MiB head -> 431, request deadline)
        status_api_uvicorn_config(
            create_status_app(sa_cfg, on_commit=lambda _rows: relay.wake()),
            sa_cfg.http,
            host=opts.host,
            port=opts.port_api,
            access_log=False,
            timeout_graceful_shutdown=SERVER_GRACE_SECONDS,
        ),
        on_shutdown=None,
        handle_signals=False,
    )
    gw_task = asyncio.create_task(gateway.serve(), name="gateway")
    api_task = asyncio.create_task(api.serve(), name="status-api")
    background: list[asyncio.Task[Any]] = []
    relay_stop, demo_stop = asyncio.Event(), asyncio.Event()
    code = 0
    try:
        await _started(gateway, gw_task, "gateway")
        await _started(api, api_task, "Status API")  # its startup created the tables the relay claims from
        background.append(asyncio.create_task(relay.run(relay_stop), name="relay"))
        if opts.demo:
            demo = run_demo(
                opts.api_url,
                keys["service_jwt_secret"],
                tasks=0,
                speed=opts.demo_speed,
                stale_after=opts.heartbeat_timeout,
                reconcile_interval=opts.reconcile_interval,
                users=DEMO_USERS,
                keep_running=DEMO_KEEP_RUNNING,
                stop=demo_stop,
            )
            background.append(asyncio.create_task(demo, name="demo"))
        _banner(opts)
        if opts.open_browser:
            webbrowser.open(opts.board_url())
        watched = [gw_task, api_task, *background]
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopper, *watched], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for t in done - {stopper}:
            code = 1
            log.error(
                "%s ended unexpectedly: %r", t.get_name(), t.exception() if not t.cancelled() else "cancelled"
            )
    except (RuntimeError, TimeoutError) as exc:
        log.error("startup failed: %s", exc)
        code = 1
    finally:
        await _shutdown(gateway, api, gw_task, api_task, background, demo_stop, relay_stop, relay)
        await publisher.aclose()
        await leases.engine.dispose()
    return code


async def _shutdown(
    gateway: uvicorn.Server,
    api: uvicorn.Server,
    gw_task: asyncio.Task[None],
    api_task: asyncio.Task[None],
    background: list[asyncio.Task[Any]],
    demo_stop: asyncio.Event,
    relay_stop: asyncio.Event,
    relay: Relay,
) -> None:
    """Demo, relay (then a bounded drain of the rows still due), Status API, gateway — in that order,
    everything within SHUTDOWN_SECONDS."""
    try:
        async with asyncio.timeout(SHUTDOWN_SECONDS):
            demo_stop.set()
            if len(background) > 1:
                await asyncio.gather(background[1], return_exceptions=True)
            relay_stop.set()
            await asyncio.gather(*background, return_exceptions=True)
            if background:  # publish what the demo's cancellations just committed, while the gateway is up
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(DRAIN_SECONDS):
                        while await relay.run_once():
                            pass
            api.should_exit = True
            await asyncio.gather(api_task, return_exceptions=True)
            gateway.should_exit = True
            await asyncio.gather(gw_task, return_exceptions=True)
    except TimeoutError:
        log.warning("shutdown took longer than %.0fs; forcing", SHUTDOWN_SECONDS)
        for server in (api, gateway):
            server.should_exit = server.force_exit = True
        for t in (*background, api_task, gw_task):
            t.cancel()
        await asyncio.gather(*background, api_task, gw_task, return_exceptions=True)


def _banner(opts: UpOptions) -> None:
    lines = [
        "",
        "Taskcast is up (gateway + Status API + relay in one process).",
        f"  Task board:   {opts.board_url()}",
        f"  Start page:   {opts.api_url}/   (the board, the API's endpoints, the docs)",
        "  Other users:  " + "  ".join(opts.board_url(u) for u in DEMO_USERS[1:]),
        f"  Gateway:      {opts.gateway_url}   (health {opts.gateway_url}/health)",
        f"  Status API:   {opts.api_url}   (health {opts.api_url}/healthz)",
        f"  Data:         {opts.data_dir.resolve()}   (delete it to start over)",
        "  App origins:  "
        + (
            " ".join(opts.allowed_origins) + "   (WebSocket/SSE + Status API CORS)"
            if opts.allowed_origins
            else "none besides the board (add one with --allowed-origin http://localhost:5173)"
        ),
        "  Demo:         "
        + (
            f"{DEMO_KEEP_RUNNING} tasks in progress at any time for " + ", ".join(DEMO_USERS)
            if opts.demo
            else "off (--no-demo)"
        ),
        "Press Ctrl-C to stop.",
        "",
    ]
    print("\n".join(lines), flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="taskcast up", description="Run gateway, Status API, relay and demo in one process."
    )
    p.add_argument("--port-gateway", type=int, default=8000, help="gateway port (WebSocket, SSE, server API)")
    p.add_argument("--port-api", type=int, default=8100, help="Status API + task board port")
    p.add_argument(
        "--data-dir", default="./var", help="SQLite database, generated secrets and gateway config"
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address of both servers")
    p.add_argument("--no-demo", action="store_true", help="do not run the demo coordinator/workers")
    p.add_argument("--open", action="store_true", help="open the task board in a browser")
    p.add_argument("--demo-speed", type=float, default=1.0, help="demo pace factor (tests use a large one)")
    p.add_argument("--heartbeat-timeout", type=float, default=8.0, help="seconds without heartbeat -> STALE")
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="URL",
        help="a browser app's origin, e.g. http://localhost:5173 (repeatable): allowed on the gateway's "
        "WebSocket/SSE and by the Status API's CORS",
    )
    return p


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    from status_api.cors import OriginError, normalize_origin

    try:
        origins = tuple(dict.fromkeys(normalize_origin(o) for o in args.allowed_origin))
    except OriginError as exc:
        print(f"taskcast up: --allowed-origin: {exc}", file=sys.stderr)
        return 2
    opts = UpOptions(
        port_gateway=args.port_gateway,
        port_api=args.port_api,
        data_dir=Path(args.data_dir),
        demo=not args.no_demo,
        open_browser=args.open,
        host=args.host,
        demo_speed=args.demo_speed,
        heartbeat_timeout=args.heartbeat_timeout,
        allowed_origins=origins,
    )
    if opts.demo_speed <= 0 or opts.heartbeat_timeout <= 0 or opts.port_gateway == opts.port_api:
        print(
            "taskcast up: --demo-speed and --heartbeat-timeout must be > 0, ports must differ",
            file=sys.stderr,
        )
        return 2
    for flag, port in (("--port-gateway", opts.port_gateway), ("--port-api", opts.port_api)):
        if not _port_free(opts.host, port):
            print(
                f"taskcast up: port {port} on {opts.host} is in use; pick another with {flag}",
                file=sys.stderr,
            )
            return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "status_api.audit", "taskcast.gateway", "taskcast.relay.publisher"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    async def go() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await run(opts, stop)

    return asyncio.run(go())
