"""``taskcast status-api serve|init-db|reconcile|purge-events --config FILE`` (wired by taskcast.cli to
:func:`main`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from httpwire.tracing import TracingUnavailable
from status_api.config import Config, ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="taskcast status-api", description="Taskcast Status API")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server (uvicorn)")
    serve.add_argument("--config", required=True, help="JSON or YAML config file")
    serve.add_argument("--host", help="override http.host")
    serve.add_argument("--port", type=int, help="override http.port")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run N worker processes on one port (SO_REUSEPORT; docs/status-api.md 'Workers')",
    )
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for workers
    init = sub.add_parser(
        "init-db", help="create or upgrade the schema and load schema/registry (idempotent)"
    )
    init.add_argument("--config", required=True, help="JSON or YAML config file")
    rec = sub.add_parser(
        "reconcile", help="run only the health reconciler loop (a separate process in the topology)"
    )
    rec.add_argument("--config", required=True, help="JSON or YAML config file")
    purge = sub.add_parser(
        "purge-events",
        help="purge event-log (timeline) entries older than retention.event_log_days (or --older-than-days)",
    )
    purge.add_argument("--config", required=True, help="JSON or YAML config file")
    purge.add_argument(
        "--older-than-days", type=float, help="override retention.event_log_days for this run (> 0)"
    )
    return p


async def _purge_events(config_path: str, older_than_days: float | None) -> int:
    """One retention run; prints how many entries it purged. Exit 2 when no bound is configured."""
    from datetime import timedelta

    from status_api.app import build_components

    cfg = load_config(config_path)
    days = older_than_days if older_than_days is not None else cfg.retention.event_log_days
    if days is None or days <= 0:
        print(
            "taskcast status-api purge-events: set retention.event_log_days or --older-than-days (> 0)",
            file=sys.stderr,
        )
        return 2
    comp = build_components(cfg)
    try:
        purged = await comp.service.purge_event_log(comp.service.clock() - timedelta(days=days))
    finally:
        await comp.engine.dispose()
    print(f"purged {purged} event-log entries older than {days:g} days")
    return 0


async def _reconcile(config_path: str) -> int:
    """Run the health reconciler until SIGTERM/SIGINT. Several can run: each change is its own
    transaction with the task row locked and the condition re-checked there."""
    import signal

    from status_api.app import build_components

    cfg = load_config(config_path)
    comp = build_components(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await comp.reconciler.run(stop)
    finally:
        if comp.waker is not None:
            await comp.waker.aclose()
        await comp.engine.dispose()
    return 0


async def _init_db(config_path: str) -> int:
    from status_api.app import build_components
    from status_api.storage.database import init_db

    cfg = load_config(config_path)
    comp = build_components(cfg)
    try:
        actions = await init_db(comp.engine)
        loaded = await comp.service.load_registry_files()
    finally:
        await comp.engine.dispose()
    for a in actions:
        print(a)
    print(f"schema up to date ({len(actions)} changes); {loaded} definition sets registered")
    return 0


def main(argv: list[str]) -> int:
    """Entry point. Returns the process exit code (2 for configuration errors)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "init-db":
            return asyncio.run(_init_db(args.config))
        if args.command == "purge-events":
            return asyncio.run(_purge_events(args.config, args.older_than_days))
        if args.command == "reconcile":
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
            return asyncio.run(_reconcile(args.config))
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"taskcast status-api: configuration error: {exc}", file=sys.stderr)
        return 2
    from status_api import server
    from status_api.app import create_app

    logging.basicConfig(
        level=cfg.http.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if args.workers != 1:
        return _serve_workers(args, cfg)
    try:
        app = create_app(cfg)
    except TracingUnavailable as exc:
        print(f"taskcast status-api: configuration error: opentelemetry.enabled: {exc}", file=sys.stderr)
        return 2
    stop = app.state.stop  # the shutdown timeout's budget starts when the server begins to stop
    server.run(
        app, cfg.http, host=args.host, port=args.port, reuse_port=args.reuse_port, on_shutdown=stop.begin
    )
    return 0


def _serve_workers(args: argparse.Namespace, cfg: Config) -> int:
    """``serve --workers N``: the schema once, then N workers on one port (status_api/workers.py)."""
    from status_api import workers

    host, port = args.host or cfg.http.host, cfg.http.port if args.port is None else args.port
    if not 1 <= args.workers <= 64:
        print("taskcast status-api: --workers: must be 1..64", file=sys.stderr)
        return 2
    if port == 0:
        print(
            "taskcast status-api: --workers needs a fixed port (http.port or --port), not 0", file=sys.stderr
        )
        return 2
    try:
        workers.reuse_port_socket(host, port).close()  # refuse early if the port is taken
    except OSError as exc:
        print(f"taskcast status-api: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 2
    if cfg.database.auto_init:
        asyncio.run(_init_db(args.config))
    return workers.supervise(args.config, args.workers, host, port, cfg.http.shutdown_timeout_seconds)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
