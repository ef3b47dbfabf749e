"""Builds the Status API application from a :class:`Config`: the only module that decides which
database, keys and background loops are in use. Background work (the health reconciler) is owned
by the lifespan's TaskGroup and stopped on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from httpwire.shutdown import StopBudget
from httpwire.tracing import OFF, Tracing, setup
from status_api import board, operator_ui, subscribe_proxy, telemetry
from status_api.auth import (
    ServiceAuthenticator,
    ServiceAuthSettings,
    UserAuthenticator,
    UserAuthSettings,
    service_keys_from_config,
)
from status_api.body_limit import BodyLimitMiddleware
from status_api.config import Config
from status_api.cors import CorsMiddleware, normalize_origin
from status_api.event_inline import EventInline
from status_api.event_route import EventFastPath
from status_api.http import Api, routes
from status_api.metrics import MetricsMiddleware, StatusMetrics
from status_api.queries import RealtimeQuota, TaskQueries
from status_api.ratelimit import RateLimiter
from status_api.reconciler import HealthReconciler
from status_api.schemas import DEFAULT_SCHEMA_DIR, SchemaStore
from status_api.service import Clock, ServiceSettings, StatusService, utc_now
from status_api.storage.database import create_engine, init_db
from status_api.tokens import TokenIssuer, TokenSettings
from status_api.wake import RedisWakePublisher, UdpWakeSender

log = logging.getLogger("status_api.shutdown")


@dataclass
class Components:
    engine: AsyncEngine
    service: StatusService
    queries: TaskQueries
    reconciler: HealthReconciler
    api: Api
    #: The wake-up hint sender (``wake.redis_url`` or ``wake.udp_targets``), closed with the app.
    waker: RedisWakePublisher | UdpWakeSender | None = None
    #: OpenTelemetry (``opentelemetry.enabled``), shut down (flushed) with the app.
    tracing: Tracing = OFF


def build_components(
    cfg: Config,
    *,
    engine: AsyncEngine | None = None,
    clock: Clock = utc_now,
    on_commit: Callable[[int], None] | None = None,
) -> Components:
    """``on_commit``: the post-commit wake-up hook (``taskcast up`` hands its relay's ``wake``);
    without it, ``wake.redis_url`` makes one (``status_api.wake``)."""
    schema_dir = Path(cfg.schema_dir) if cfg.schema_dir else DEFAULT_SCHEMA_DIR
    schemas = SchemaStore(schema_dir)
    engine = engine or create_engine(
        cfg.database.url,
        pool_size=cfg.database.pool_size,
        max_overflow=cfg.database.max_overflow,
        echo=cfg.database.echo,
    )
    rt = cfg.realtime
    tokens = TokenIssuer(
        TokenSettings(
            execution_secret=cfg.execution_token.secret or "",
            execution_ttl_seconds=cfg.execution_token.ttl_seconds,
            execution_issuer=cfg.execution_token.issuer,
            execution_max_lifetime_seconds=cfg.execution_token.max_lifetime_seconds,
            execution_renew_grace_seconds=cfg.execution_token.renew_grace_seconds,
            execution_heartbeat_renewal_seconds=(
                cfg.execution_token.ttl_seconds // 2
                if cfg.execution_token.heartbeat_renewal_seconds is None
                else cfg.execution_token.heartbeat_renewal_seconds
            ),
            realtime_algorithm=rt.algorithm,
            realtime_secret=rt.secret,
            realtime_private_key=rt.private_key,
            realtime_audience=rt.audience,
            realtime_issuer=rt.issuer,
            connection_ttl_seconds=rt.connection_ttl_seconds,
            subscription_ttl_seconds=rt.subscription_ttl_seconds,
            subject_format=rt.subject_format,
        ),
        clock,
    )
    service = StatusService(
        engine,
        schemas,
        tokens,
        clock,
        ServiceSettings(
            max_data_bytes=cfg.limits.max_data_bytes,
            user_message_limit=cfg.limits.user_message_limit,
            max_task_attempts=cfg.limits.max_task_attempts,
            event_log_retention_seconds=(
                cfg.retention.event_log_days * 86400 if cfg.retention.event_log_days else None
            ),
            retention_interval_seconds=cfg.retention.interval_seconds,
            retention_batch_size=cfg.retention.batch_size,
            ingest_batch_max=cfg.ingest.batch_max,
            ingest_batch_runners=cfg.ingest.batch_runners,
            ingest_commit_delay_ms=cfg.ingest.commit_delay_ms,
            progress_min_interval_ms=cfg.progress.min_interval_ms,
        ),
    )
    queries = TaskQueries(
        service,
        RealtimeQuota(
            rt.max_detail_subscriptions_per_session,
            rt.max_sessions_per_user,
            rt.max_detail_subscriptions_per_user,
        ),
    )
    ia = cfg.internal_auth
    service_auth = ServiceAuthenticator(
        ServiceAuthSettings(
            mode=ia.mode,
            jwt_secret=ia.jwt_secret,
            jwt_public_key=ia.jwt_public_key,
            jwt_algorithms=tuple(ia.jwt_algorithms),
            audience=ia.audience,
            issuer=ia.issuer,
            keys=service_keys_from_config(ia.keys),
        ),
        tokens,
    )
    ua = cfg.user_auth
    user_auth = UserAuthenticator(
        UserAuthSettings(
            mode=ua.mode,
            secret=ua.secret,
            public_key=ua.public_key,
            jwks_url=ua.jwks_url,
            algorithms=tuple(ua.algorithms),
            audience=ua.audience,
            issuer=ua.issuer,
            tenant_claim=ua.tenant_claim,
            user_claim=ua.user_claim,
            projects_claim=ua.projects_claim,
        )
    )
    openapi = yaml.safe_load((schema_dir / "openapi.yaml").read_text(encoding="utf-8"))
    api = Api(
        service,
        queries,
        service_auth,
        user_auth,
        RateLimiter(ia.rate_per_second, ia.burst),
        openapi,
        cfg.http.max_json_depth,
    )
    rc = cfg.reconciler
    reconciler = HealthReconciler(service, rc.heartbeat_timeout_seconds, rc.batch_size, rc.interval_seconds)
    waker: RedisWakePublisher | UdpWakeSender | None = None
    if on_commit is None and cfg.wake.redis_url:
        waker = RedisWakePublisher(cfg.wake.redis_url, cfg.wake.channel)
        on_commit = waker.notify
    elif on_commit is None and cfg.wake.udp_targets:
        waker = UdpWakeSender(list(cfg.wake.udp_targets))
        on_commit = waker.notify
    service.on_commit = on_commit
    tracing = setup(cfg.opentelemetry.enabled, "taskcast-status-api")
    service.tracing = api.tracing = tracing
    return Components(engine, service, queries, reconciler, api, waker, tracing)


def create_app(
    cfg: Config, *, components: Components | None = None, on_commit: Callable[[int], None] | None = None
) -> Starlette:
    """The ASGI app. With ``database.auto_init`` the schema and registry files are applied at startup.
    ``on_commit``: see :func:`build_components`."""
    comp = components or build_components(cfg, on_commit=on_commit)
    budget = StopBudget(cfg.http.shutdown_timeout_seconds, option="http.shutdown_timeout_seconds", logger=log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        comp.tracing.correlate_logs()
        if cfg.database.auto_init:
            await init_db(comp.engine)
        await comp.service.load_registry_files()
        stop = asyncio.Event()
        reconciler = None
        if cfg.reconciler.enabled:
            reconciler = asyncio.create_task(comp.reconciler.run(stop), name="health reconciler")
        try:
            yield
        finally:
            # Each wait within what remains of http.shutdown_timeout_seconds (httpwire/shutdown.py).
            stop.set()
            budget.begin_lifespan()
            if reconciler is not None:
                await budget.wait("the health reconciler's pass", reconciler)
            if components is None:
                if comp.waker is not None:
                    await budget.step("closing the wake-up sender", comp.waker.aclose())
                await budget.step("closing the database pool", comp.engine.dispose())
                await budget.step("exporting traces", asyncio.to_thread(comp.tracing.shutdown))
            budget.report()

    metrics = StatusMetrics()
    if comp.service.ingestor.group is not None:
        comp.service.ingestor.group.observe = metrics.batch_events.observe

    async def metrics_endpoint(_: Request) -> Response:
        body = await metrics.render(comp.engine)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    extra_routes = [*telemetry.routes, *subscribe_proxy.routes, *operator_ui.routes]
    metrics_route = Route("/metrics", metrics_endpoint, methods=["GET"])
    all_routes = [*routes, *extra_routes, metrics_route, *board.routes(gateway_url=cfg.board.gateway_url)]
    app = Starlette(routes=all_routes, lifespan=lifespan)
    # Around every route (board and /metrics included): none ever sees more than the bound. Metrics
    # wrap it, so its 413s are counted.
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=cfg.http.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=[*routes, *extra_routes])
    # Outermost: a preflight or a refused origin never reaches the routes (nor the metrics).
    app.add_middleware(
        CorsMiddleware,
        allowed_origins=[normalize_origin(o) for o in cfg.cors.allowed_origins],
        allow_credentials=cfg.cors.allow_credentials,
        max_age_seconds=cfg.cors.max_age_seconds,
    )
    # In front of them all: the event POST answered without the stack, with its bound, metrics
    # and CORS rules kept (status_api/event_route.py); anything with an Origin goes the long way.
    app.add_middleware(
        EventFastPath,
        api=comp.api,
        metrics=metrics,
        max_body_bytes=cfg.http.max_body_bytes,
        cors_on=bool(cfg.cors.allowed_origins),
    )
    # The same route answered by the HTTP connection itself when nothing in the stack above could
    # answer it differently (status_api/event_inline.py; bound by status_api/server.py).
    app.state.event_inline = EventInline(
        comp.api, metrics, max_body_bytes=cfg.http.max_body_bytes, cors_on=bool(cfg.cors.allowed_origins)
    )
    app.state.api = comp.api
    app.state.stop = budget  # the server starts it when graceful shutdown begins (status_api/server.py)
    app.state.components = comp
    app.state.metrics = metrics
    tc = cfg.telemetry
    app.state.telemetry_settings = telemetry.TelemetrySettings(tc.enabled, tc.max_body_bytes, tc.max_samples)
    app.state.telemetry_limiter = RateLimiter(tc.reports_per_minute / 60.0, max(1.0, tc.reports_per_minute))
    app.state.subscribe_proxy = subscribe_proxy.SubscribeProxy.from_config(cfg, comp.queries)
    return app
