"""``taskcast gateway --config FILE [--workers N]``: load settings (the file, the environment and,
as Centrifugo v6 does, a ``.env`` file in the working directory whose variables the environment
overrides), refuse bad ones by name, build
the gateway (gateway/app.py) and serve it (gateway/http/server.py); with ``--workers N`` (or
``http_server.workers``) above 1, run the supervisor of N worker processes instead
(gateway/workers.py), each of which re-enters here with the hidden ``--worker-index``.
No logic beyond wiring."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
from pathlib import Path

from gateway.app import Runtime, build
from gateway.config.dotenv import DOTENV, read_dotenv
from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings
from gateway.http.server import build_server
from gateway.logging_setup import configure_logging
from gateway.workers import Supervisor, die_with_parent, listening_socket


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="taskcast gateway", description="Run the Taskcast realtime gateway."
    )
    parser.add_argument("--config", "-c", help="JSON, YAML or TOML file with Centrifugo v6 option names")
    parser.add_argument("--port", type=int, help="override http_server.port")
    parser.add_argument(
        "--workers", type=int, help="override http_server.workers: gateway processes on one port"
    )
    # Set by the supervisor on the workers it starts (gateway/workers.py).
    parser.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--engine-socket", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.port is not None:
        env["TASKCAST_HTTP_SERVER_PORT"] = str(args.port)
    if args.workers is not None:
        env["TASKCAST_HTTP_SERVER_WORKERS"] = str(args.workers)
    try:
        with_dotenv = read_dotenv(env)
        settings, warnings = load_settings(args.config, with_dotenv or env)
    except ConfigError as exc:
        print(f"taskcast gateway: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        configure_logging(settings.log)
    except ConfigError as exc:
        print(f"taskcast gateway: invalid configuration: {exc}", file=sys.stderr)
        return 2
    log = logging.getLogger("taskcast.gateway")
    if args.worker_index is None:
        if with_dotenv is not None:
            log.info("environment variables have been loaded from %s file", DOTENV)
        for warning in warnings:
            log.warning("config: %s", warning)
        if settings.http_server.workers > 1:
            worker_argv = [sys.executable, "-m", "gateway"]
            if args.config:
                worker_argv += ["--config", args.config]
            return Supervisor(settings, settings.http_server.workers, worker_argv).run()
        return _serve(settings)
    return _worker(settings, args.worker_index, args.supervisor_pid, args.engine_socket)


def _worker(settings: Settings, index: int, supervisor_pid: int | None, engine_socket: str | None) -> int:
    """One worker of a supervisor: its own node name, the shared engine, a SO_REUSEPORT socket."""
    if supervisor_pid is not None:
        die_with_parent(supervisor_pid)
    node = dataclasses.replace(settings.node, name=f"{settings.node.name}.w{index}")
    settings = dataclasses.replace(settings, node=node)
    http = settings.http_server
    sock = listening_socket(http.address or "0.0.0.0", http.port)
    return _serve(settings, Path(engine_socket) if engine_socket else None, sock)


def _serve(settings: Settings, shared_engine: Path | None = None, sock: socket.socket | None = None) -> int:
    try:
        served = build(settings, Runtime(settings, shared_engine=shared_engine))
    except ValueError as exc:
        print(f"taskcast gateway: {exc}", file=sys.stderr)
        return 2
    build_server(settings, served).run(sockets=[sock] if sock is not None else None)
    return 0
