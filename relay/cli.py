"""``taskcast relay run|dead list|dead requeue|purge --config FILE`` (wired by taskcast_cli).

The composition root of a relay process: builds the engine, the lease store, the HTTP publisher,
the metrics server and the :class:`~relay.relay.Relay`, installs SIGTERM/SIGINT handlers and runs
until told to stop. Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.

``TASKCAST_TEST_RELAY_CRASH=<point>:<n>`` (tests only) kills the process with SIGKILL the n-th
time the relay reaches ``<point>`` (one of :data:`relay.relay.CRASH_POINTS`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable

from relay.claim import OutboxLeases, create_engine
from relay.config import ConfigError, RelayConfig, load_config
from relay.metrics import RelayMetrics, serve
from relay.publisher import HttpGatewayPublisher
from relay.relay import CRASH_POINTS, Relay

log = logging.getLogger("taskcast.relay")
CRASH_ENV = "TASKCAST_TEST_RELAY_CRASH"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="taskcast relay", description="Taskcast outbox relay")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="claim and publish outbox rows until SIGTERM")
    run.add_argument("--config", required=True, help="JSON or YAML config file")
    dead = sub.add_parser("dead", help="inspect or re-queue dead-lettered rows")
    dead_sub = dead.add_subparsers(dest="dead_command", required=True)
    dl = dead_sub.add_parser("list", help="list DEAD rows (no payloads)")
    dl.add_argument("--config", required=True)
    dl.add_argument("--limit", type=int, default=100)
    dl.add_argument("--json", action="store_true", help="one JSON object per line")
    dr = dead_sub.add_parser("requeue", help="DEAD -> PENDING with attempts reset")
    dr.add_argument("--config", required=True)
    which = dr.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", type=int, action="append", dest="ids", help="row id (repeatable)")
    which.add_argument("--all", action="store_true", help="every DEAD row")
    purge = sub.add_parser("purge", help="delete PUBLISHED rows older than retention_seconds, once")
    purge.add_argument("--config", required=True)
    return p


def crash_hook_from_env(value: str | None) -> Callable[[str], None] | None:
    """Parse ``point:n``; the hook SIGKILLs this process the n-th time ``point`` is reached."""
    if not value:
        return None
    point, _, count = value.partition(":")
    if point not in CRASH_POINTS:
        raise ConfigError(f"{CRASH_ENV}: point must be one of {', '.join(CRASH_POINTS)}")
    target = int(count or "1")
    seen = 0

    def hook(at: str) -> None:
        nonlocal seen
        if at == point:
            seen += 1
            if seen >= target:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _leases(cfg: RelayConfig) -> OutboxLeases:
    engine = create_engine(
        cfg.database_url,
        pool_size=cfg.db_pool_size,
        lock_wait_timeout_seconds=cfg.db_lock_wait_timeout_seconds,
    )
    return OutboxLeases(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds)


async def _run(cfg: RelayConfig) -> int:
    metrics = RelayMetrics()
    server = None
    if cfg.metrics_port is not None:
        server = serve(metrics, cfg.metrics_host, cfg.metrics_port)
        log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, server.port)
    leases = _leases(cfg)
    publisher = HttpGatewayPublisher(cfg.gateway_api_url, cfg.gateway_api_key, cfg.publish_timeout_seconds)
    relay = Relay(
        leases, publisher, cfg, metrics=metrics, crash_hook=crash_hook_from_env(os.environ.get(CRASH_ENV))
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "relay %s started (%s, batch %d x %d)", cfg.relay_id, leases.dialect, cfg.batch_size, cfg.concurrency
    )
    try:
        await relay.run(stop)
    finally:
        await publisher.aclose()
        await leases.engine.dispose()
        if server is not None:
            server.close()
    return 0


async def _dead_list(cfg: RelayConfig, limit: int, as_json: bool) -> int:
    leases = _leases(cfg)
    try:
        rows = await leases.list_dead(limit)
    finally:
        await leases.engine.dispose()
    for r in rows:
        if as_json:
            item = {
                "id": r.id,
                "aggregateId": r.aggregate_id,
                "aggregateVersion": r.aggregate_version,
                "channel": r.channel,
                "projection": r.projection,
                "attempts": r.attempts,
                "lastError": r.last_error,
                "createdAt": r.created_at.isoformat(),
            }
            print(json.dumps(item))
        else:
            print(
                f"{r.id}\t{r.aggregate_id}:{r.aggregate_version}\t{r.channel}\t{r.projection}\t"
                f"attempts={r.attempts}\t{r.last_error or ''}"
            )
    if not as_json:
        print(f"{len(rows)} dead rows", file=sys.stderr)
    return 0


async def _dead_requeue(cfg: RelayConfig, ids: list[int] | None) -> int:
    leases = _leases(cfg)
    try:
        n = await leases.requeue_dead(ids)
    finally:
        await leases.engine.dispose()
    print(f"requeued {n} rows")
    return 0


async def _purge(cfg: RelayConfig) -> int:
    leases = _leases(cfg)
    try:
        n = await leases.purge(cfg.retention_seconds)
    finally:
        await leases.engine.dispose()
    print(f"purged {n} published rows older than {cfg.retention_seconds:g}s")
    return 0


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.config)
        if args.command == "run":
            crash_hook_from_env(os.environ.get(CRASH_ENV))  # validate before starting
    except ConfigError as exc:
        print(f"taskcast relay: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.command == "run":
        return asyncio.run(_run(cfg))
    if args.command == "purge":
        return asyncio.run(_purge(cfg))
    if args.dead_command == "list":
        return asyncio.run(_dead_list(cfg, args.limit, args.json))
    return asyncio.run(_dead_requeue(cfg, None if args.all else list(args.ids)))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
