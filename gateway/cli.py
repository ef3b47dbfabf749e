"""``taskcast gateway --config FILE``: load settings, refuse bad ones by name, run uvicorn with
the gateway's WebSocket protocol. No logic beyond wiring."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from gateway.app import create_app
from gateway.config import ConfigError, load_settings
from gateway.transports.streaming import GatewayHttpProtocol
from gateway.transports.websocket import GatewayWebSocketProtocol

LOG_LEVELS = {"debug": "debug", "info": "info", "warn": "warning", "error": "error", "none": "critical"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="taskcast gateway", description="Run the Taskcast realtime gateway."
    )
    parser.add_argument("--config", "-c", help="JSON, YAML or TOML file with Centrifugo v6 option names")
    parser.add_argument("--port", type=int, help="override http_server.port")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.port is not None:
        env["TASKCAST_HTTP_SERVER_PORT"] = str(args.port)
    try:
        settings, warnings = load_settings(args.config, env)
    except ConfigError as exc:
        print(f"taskcast gateway: invalid configuration: {exc}", file=sys.stderr)
        return 2
    level = LOG_LEVELS.get(settings.log.level, "info")
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("taskcast.gateway")
    for warning in warnings:
        log.warning("config: %s", warning)
    try:
        app = create_app(settings)
    except ValueError as exc:
        print(f"taskcast gateway: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        app,
        host=settings.http_server.address or "0.0.0.0",
        port=settings.http_server.port,
        ws=GatewayWebSocketProtocol,
        http=GatewayHttpProtocol,
        lifespan="on",
        log_level=level,
        access_log=False,
        timeout_graceful_shutdown=max(1, int(settings.shutdown.timeout)),
        server_header=False,
    )
    server = uvicorn.Server(config)
    server.run()
    return 0
