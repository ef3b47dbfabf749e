"""``taskcast gateway --config FILE``: load settings, refuse bad ones by name, build the gateway
(gateway/app.py) and serve it (gateway/server.py). No logic beyond wiring."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gateway.app import build
from gateway.config import ConfigError, load_settings
from gateway.logging_setup import configure_logging
from gateway.server import build_server


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
    try:
        configure_logging(settings.log)
    except ConfigError as exc:
        print(f"taskcast gateway: invalid configuration: {exc}", file=sys.stderr)
        return 2
    log = logging.getLogger("taskcast.gateway")
    for warning in warnings:
        log.warning("config: %s", warning)
    try:
        served = build(settings)
    except ValueError as exc:
        print(f"taskcast gateway: {exc}", file=sys.stderr)
        return 2
    build_server(settings, served).run()
    return 0
