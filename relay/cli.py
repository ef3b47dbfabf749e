"""``taskcast relay run|dead list|dead requeue|purge --config FILE`` (wired by taskcast/cli.py).

The composition root of a relay process: builds the engine (the plumbing shared with the Status
API, every database wait bounded), the lease store, the HTTP publisher, the metrics server and the
:class:`~relay.relay.Relay`, installs SIGTERM/SIGINT handlers and runs until told to stop. Exit
codes: 0 success, 1 runtime failure, 2 usage or configuration error.

Production code reads no test switches: crash tests run :func:`run` with a ``crash_hook`` from a
test-only entry point (``tests/relay/crashing_relay.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable

from httpwire.shutdown import StopBudget
from httpwire.tracing import TracingUnavailable, setup
from relay.claim import OutboxLeases
from relay.config import ConfigError, RelayConfig, load_config, uvloop_available
from relay.metrics import RelayMetrics, serve
from relay.publisher import HttpGatewayPublisher
from relay.relay import Relay
from status_api.storage.outbox import DeadRow, relay_wake_channel

log = logging.getLogger("taskcast.relay")


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
    dl.add_argument("--json", action="store_true", help="one JSON array on stdout ([] when none)")
    dr = dead_sub.add_parser("requeue", help="DEAD -> PENDING with attempts reset")
    dr.add_argument("--config", required=True)
    which = dr.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", type=int, action="append", dest="ids", help="row id (repeatable)")
    which.add_argument("--all", action="store_true", help="every DEAD row")
    purge = sub.add_parser("purge", help="delete PUBLISHED rows older than retention_seconds, once")
    purge.add_argument("--config", required=True)
    return p


def loop_factory(cfg: RelayConfig) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``run`` runs on (``event_loop``): uvloop's factory, or None for asyncio's
    default loop. ``auto`` picks uvloop when it can be imported."""
    if cfg.event_loop == "asyncio" or (cfg.event_loop == "auto" and not uvloop_available()):
        return None
    import uvloop

    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: what the start-up log line reports."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _leases(cfg: RelayConfig) -> OutboxLeases:
    return OutboxLeases.open(
        cfg.database_url,
        cfg.relay_id,
        lease_seconds=cfg.lease_seconds,
        pool_size=cfg.db_pool_size,
        lock_wait_timeout_seconds=cfg.db_lock_wait_timeout_seconds,
    )


async def run(cfg: RelayConfig, *, crash_hook: Callable[[str], None] | None = None) -> int:
    """Run a relay until SIGTERM/SIGINT; returns the exit code. ``crash_hook``: tests only
    (:class:`~relay.relay.Relay`)."""
    try:
        tracing = setup(cfg.opentelemetry_enabled, "taskcast-relay")
    except TracingUnavailable as exc:
        print(f"taskcast relay: configuration error: opentelemetry_enabled: {exc}", file=sys.stderr)
        return 2
    tracing.correlate_logs()
    metrics = RelayMetrics()
    server = None
    if cfg.metrics_port is not None:
        server = serve(metrics, cfg.metrics_host, cfg.metrics_port)
        log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, server.port)
    leases = _leases(cfg)
    publisher = HttpGatewayPublisher(
        cfg.gateway_api_url, cfg.gateway_api_key, cfg.publish_timeout_seconds, tracing=tracing
    )
    relay = Relay(leases, publisher, cfg, metrics=metrics, crash_hook=crash_hook)
    stop = asyncio.Event()
    # The closes after the in-flight batches share shutdown_timeout_seconds, counted from the signal.
    budget = StopBudget(cfg.shutdown_timeout_seconds, option="shutdown_timeout_seconds", logger=log)

    def signalled() -> None:
        budget.begin()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled)
    log.info(
        "relay %s started (%s, %s loop, batch %d x %d, wake-up %s, poll %gs, %gs while hints flow)",
        cfg.relay_id,
        leases.dialect,
        loop_name(loop),
        cfg.batch_size,
        cfg.concurrency,
        "+".join(n for n, on in (("redis", cfg.wake_redis_url), ("udp", cfg.wake_udp_listen)) if on) or "off",
        cfg.poll_interval_seconds,
        cfg.wake_poll_interval_seconds if cfg.wake_redis_url else cfg.poll_interval_seconds,
    )
    udp = None
    if cfg.wake_udp_listen is not None:
        from relay.wake_udp import UdpWakeListener

        udp = UdpWakeListener(cfg.wake_udp_listen, lambda: relay.wake("udp"))
        await udp.start()
        relay.hints_up(True)  # hints flow while bound: the safety net polls at wake_poll_interval_seconds
    wake: asyncio.Task[None] | None = None
    failed: list[BaseException] = []
    try:
        if cfg.wake_redis_url is not None:
            from relay.wake import RedisWakeListener  # only with wake-up: redis costs start-up time

            listener = RedisWakeListener(
                cfg.wake_redis_url,
                cfg.wake_channel,
                lambda: relay.wake("redis"),
                metrics,
                on_state=relay.hints_up,
                own_channel=relay_wake_channel(cfg.wake_channel, cfg.relay_id),
            )
            wake = loop.create_task(listener.run(stop), name="wake-listener")
            wake.add_done_callback(lambda task: _listener_ended(task, stop, failed))
        await relay.run(stop)
    finally:
        # Each wait within what remains of the budget (httpwire/shutdown.py): the listener may be
        # inside a connect to a stalled Redis, the pool may hold connections to a hung database.
        budget.begin_lifespan()
        if wake is not None:
            await budget.cancel("the wake-up listener", wake)
        if udp is not None:
            udp.close()
        await budget.step("closing the gateway client", publisher.aclose())
        await budget.step("closing the database pool", leases.dispose())
        if server is not None:
            server.close()
        await budget.step("exporting traces", asyncio.to_thread(tracing.shutdown))
        budget.report()
    return 1 if failed else 0


def _listener_ended(task: asyncio.Task[None], stop: asyncio.Event, failed: list[BaseException]) -> None:
    """The wake-up listener ends only when cancelled or stopped; a failure (a bug) stops the relay,
    which then exits 1."""
    if task.cancelled() or task.exception() is None:
        return
    failed.append(task.exception())  # type: ignore[arg-type]  # not None: checked above
    log.error("wake-up listener failed: stopping", exc_info=task.exception())
    stop.set()


async def _dead_list(cfg: RelayConfig, limit: int, as_json: bool) -> int:
    leases = _leases(cfg)
    try:
        rows = await leases.list_dead(limit)
    finally:
        await leases.dispose()
    if as_json:
        # One document, always valid JSON: ``[]`` when there is nothing dead.
        print(json.dumps([_dead_item(r) for r in rows]))
        return 0
    for r in rows:
        print(
            f"{r.id}\t{r.aggregate_id}:{r.aggregate_version}\t{r.channel}\t{r.projection}\t"
            f"attempts={r.attempts}\t{r.last_error or ''}"
        )
    print(f"{len(rows)} dead rows", file=sys.stderr)
    return 0


def _dead_item(r: DeadRow) -> dict[str, object]:
    return {
        "id": r.id,
        "aggregateId": r.aggregate_id,
        "aggregateVersion": r.aggregate_version,
        "channel": r.channel,
        "projection": r.projection,
        "attempts": r.attempts,
        "lastError": r.last_error,
        "createdAt": r.created_at.isoformat(),
    }


async def _dead_requeue(cfg: RelayConfig, ids: list[int] | None) -> int:
    leases = _leases(cfg)
    try:
        n = await leases.requeue_dead(ids)
    finally:
        await leases.dispose()
    print(f"requeued {n} rows")
    return 0


async def _purge(cfg: RelayConfig) -> int:
    leases = _leases(cfg)
    try:
        n = await leases.purge(cfg.retention_seconds)
    finally:
        await leases.dispose()
    print(f"purged {n} published rows older than {cfg.retention_seconds:g}s")
    return 0


def configure(config_path: str) -> RelayConfig:
    """Load the config and set up logging, as ``main`` does.

    Raises:
        ConfigError: naming the offending option.
    """
    cfg = load_config(config_path)
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return cfg


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        cfg = configure(args.config)
    except ConfigError as exc:
        print(f"taskcast relay: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "run":
        with asyncio.Runner(loop_factory=loop_factory(cfg)) as runner:
            return runner.run(run(cfg))
    try:
        if args.command == "purge":
            return asyncio.run(_purge(cfg))
        if args.dead_command == "list":
            return asyncio.run(_dead_list(cfg, args.limit, args.json))
        return asyncio.run(_dead_requeue(cfg, None if args.all else list(args.ids)))
    except Exception as exc:  # an operator command's boundary: one line, no traceback
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        print(f"taskcast relay: database error: {type(exc).__name__}: {first_line[:300]}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
