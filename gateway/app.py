"""Composition root of the gateway: builds the engine, node, verifiers, client factory, server
API, transports and routes, and owns every background task (lifespan). The only module that
knows which engine is used and the only one that wires parts together.

NOTHING in the gateway imports this module (tests/test_layering.py): entry points (gateway/cli.py,
taskcast/up.py) and tests call ``build(settings)`` and hand the result to gateway/http/server.py.
Transports get narrow callables (``admit``, ``connect``, ``route``), never this module's objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.admin.endpoints import AdminEndpoints
from gateway.api.executor import ServerApi
from gateway.api.grpc import server as grpc_api
from gateway.api.http import ApiEndpoint, ApiFirst
from gateway.config.endpoint_checks import internal_prefixes
from gateway.config.schema import Settings
from gateway.connection.authorization import ProxyAuthorizer, TokenAuthorizer
from gateway.connection.factory import ClientFactory
from gateway.connection.tokens import TokenVerifier
from gateway.consumers import build_consumers
from gateway.consumers.dispatch import Execute, traced_consuming
from gateway.engine.base import Broker, PresenceManager
from gateway.engine.map_base import MapBroker
from gateway.engine.map_memory import MemoryMapBroker
from gateway.engine.map_redis import RedisMapBroker
from gateway.engine.map_shared import SharedMemoryMapBroker
from gateway.engine.memory import MemoryBroker, MemoryPresence
from gateway.engine.redis import build_shards
from gateway.engine.redis_broker import RedisBroker
from gateway.engine.redis_presence import RedisPresence
from gateway.engine.shared_memory import SharedMemoryBroker, SharedMemoryPresence
from gateway.gc_pauses import GcPauses, freeze_startup, thaw
from gateway.http.admission import Admission
from gateway.http.server import Served
from gateway.metrics import HoldGauges, Metrics, NodeGauges
from gateway.node import VERSION, Node
from gateway.proxy.caller import Proxies
from gateway.sharedpoll.manager import SharedPollManager
from gateway.transports import websocket
from gateway.transports.deflate import deflate_settings
from gateway.transports.emulation import EmulationEndpoint
from gateway.transports.init import ConnectionInitEndpoint
from gateway.transports.streaming import OpenStreams, StreamEndpoint
from gateway.transports.uni_websocket import UniWebSocketEndpoint
from gateway.webhooks.lifecycle import Webhooks
from gateway.webhooks.metrics import WebhookMetrics
from gateway.webhooks.redis_occupancy import RedisOccupancy
from gateway.webhooks.store import MemoryOccupancy, OccupancyStore
from httpwire.shutdown import Loops, StopBudget
from httpwire.tracing import setup

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_stop_log = logging.getLogger("gateway.shutdown")
DOCS = "docs/gateway.md"
"""Where the gateway is documented (a path in the Taskcast source tree; no hosted site)."""


def build_engine(
    settings: Settings,
    *,
    on_error: Callable[[str], None] | None = None,
    shared_engine: Path | None = None,
) -> tuple[Broker, PresenceManager]:
    """The configured engine; ``on_error`` is called once per failed engine command with the
    operation name (the engine logs outages once per state change; the metric counts each).
    ``shared_engine``: in a worker of ``--workers N``, the supervisor's memory engine socket
    (gateway/workers.py); the memory engine is then that one, shared by all workers."""
    if settings.engine.type == "memory" and shared_engine is not None:
        return SharedMemoryBroker(shared_engine), SharedMemoryPresence(shared_engine)
    if settings.engine.type == "memory":
        return MemoryBroker(), MemoryPresence(ttl_seconds=settings.engine.redis.presence_ttl)
    if settings.engine.type == "redis":
        redis = settings.engine.redis
        # Broker and presence get connections of their own; each closes what it owns.
        return (
            RedisBroker(build_shards(redis, on_error=on_error), prefix=redis.prefix),
            RedisPresence(
                build_shards(redis, on_error=on_error), prefix=redis.prefix, ttl_seconds=redis.presence_ttl
            ),
        )
    raise ValueError(f'engine.type "{settings.engine.type}" is not available in this build')


def build_map_broker(broker: Broker, node: Node) -> MapBroker | None:
    """The map engine that goes with ``broker`` (None: an engine that keeps no maps; map
    subscriptions and the map API methods are then refused with 108)."""
    if isinstance(broker, SharedMemoryBroker):  # --workers N: the supervisor's one map engine
        return SharedMemoryMapBroker(broker)
    if isinstance(broker, RedisBroker):
        return RedisMapBroker(broker.shards, prefix=broker.keys.prefix, watched=lambda: node.hub.channels)
    if isinstance(broker, MemoryBroker):
        return MemoryMapBroker()
    return None


def build_webhooks(settings: Settings, node: str, metrics: Metrics) -> Webhooks | None:
    """The lifecycle webhooks (docs/webhooks.md), None when none is configured; occupancy is
    decided in Redis on the Redis engine, in this process otherwise (``--workers N`` on the
    memory engine: per worker)."""
    if not settings.webhooks:
        return None
    occupancy: OccupancyStore | None = None
    cfg = settings.occupancy
    if Webhooks.needs_occupancy(settings):
        if settings.engine.type == "redis":
            redis = settings.engine.redis
            shard = build_shards(redis, on_error=lambda op: metrics.engine_errors.labels(op).inc())[0]
            occupancy = RedisOccupancy(
                shard, prefix=redis.prefix, grace_seconds=cfg.vacated_grace, node_ttl=cfg.node_ttl
            )
        else:
            occupancy = MemoryOccupancy(cfg.vacated_grace, cfg.node_ttl)
    http = httpx.AsyncClient(follow_redirects=False)  # TLS and proxies as the JWKS client's
    return Webhooks(
        settings, node=node, metrics=WebhookMetrics(metrics.registry), occupancy=occupancy, http=http
    )


class Runtime:
    """Everything one gateway process holds. Built by ``build``; tests may build one directly
    (with an injected engine) and pass it to ``create_app``."""

    def __init__(
        self,
        settings: Settings,
        *,
        broker: Broker | None = None,
        presence: PresenceManager | None = None,
        shared_engine: Path | None = None,
    ) -> None:
        self.settings = settings
        otel = settings.opentelemetry
        # Centrifugo's default service.name (OTEL_SERVICE_NAME overrides): its dashboards match.
        self.tracing = setup(otel.enabled, "centrifugo")
        self.tracing.correlate_logs()
        self.metrics = Metrics(VERSION)
        if broker is None or presence is None:
            engine_errors = self.metrics.engine_errors
            broker, presence = build_engine(
                settings, on_error=lambda op: engine_errors.labels(op).inc(), shared_engine=shared_engine
            )
        name = settings.node.name or f"{socket.gethostname()}_{settings.http_server.port}"
        self.node = Node(settings, broker, presence, self.metrics, name=name)
        if isinstance(broker, RedisBroker | SharedMemoryBroker):
            broker.set_node_id(self.node.uid)  # targeted control messages reach this node
        maps = build_map_broker(broker, self.node)
        if maps is not None:
            self.node.attach_maps(maps)
        self.webhooks = build_webhooks(settings, self.node.uid, self.metrics)
        if self.webhooks is not None:
            self.node.lifecycle = self.webhooks
        hub = self.node.hub
        self.metrics.register_node_gauges(
            NodeGauges(
                lambda: (
                    len(hub.clients),
                    len(hub.users),
                    hub.num_subscriptions,
                    len(hub.channels),
                    len(self.node.cluster.nodes()),
                    self.node.broker.healthy(),
                )
            )
        )
        self.http = httpx.AsyncClient(timeout=5.0)
        cfg = settings.client
        verifier = TokenVerifier(
            cfg.token, http=self.http, skip_signature=cfg.insecure_skip_token_signature_verify
        )
        sub_verifier = (
            TokenVerifier(
                cfg.subscription_token,
                http=self.http,
                skip_signature=cfg.insecure_skip_token_signature_verify,
            )
            if cfg.subscription_token.enabled
            else verifier
        )
        # Proxies to the application backend, when configured (gateway/connection/authorization.py).
        self.proxies = Proxies(settings, self.metrics)
        cluster = self.node.cluster
        self.node.shared_poll = SharedPollManager(
            settings, self.proxies, self.metrics, send=cluster.shared_poll
        )
        cluster.on_shared_poll = self.node.shared_poll.on_control
        tokens = TokenAuthorizer(settings, verifier, sub_verifier)
        authorizer = ProxyAuthorizer(tokens, self.proxies) if self.proxies.any else tokens
        self.clients = ClientFactory(
            self.node, verifier=verifier, sub_verifier=sub_verifier, authorizer=authorizer
        )
        held = self.clients.flusher.stats
        self.metrics.register_node_gauges(HoldGauges(lambda: (held.bytes, held.connections, held.conflated)))
        self.api = ServerApi(self.node, settings)
        if otel.api:
            self.api.trace(self.tracing)
        execute: Execute = functools.partial(self.api.call, protocol="consuming")  # Centrifugo's label
        if otel.consuming and self.tracing.enabled:
            execute = traced_consuming(self.tracing, execute)
        self.consumers = build_consumers(settings.consumers, execute, self.metrics.registry, self.node.uid)
        self.admission = Admission(cfg, lambda: len(hub.clients), lambda: len(self.node.connecting))
        self.stop = StopBudget(settings.shutdown.timeout, option="shutdown.timeout", logger=_stop_log)
        self.streams = OpenStreams()
        self.gc = GcPauses(self.metrics.registry)

    def admit(self) -> int | None:
        """Handshake admission of every connection endpoint (gateway/http/admission.py)."""
        return self.admission.admit()

    def on_shutdown(self) -> None:
        """Graceful shutdown began: refuse new connections and end every streaming response
        with the 3001 disconnect push (uvicorn would otherwise wait for them until its
        shutdown timeout). WebSocket connections get 3001 from their protocol's shutdown.
        The ``shutdown.timeout`` budget (``stop``) starts here."""
        self.admission.shutting_down = True
        self.stop.begin()
        self.streams.shutdown()

    async def close(self) -> None:
        """The close steps, in order, each within what remains of ``shutdown.timeout`` (``stop``,
        counted from ``on_shutdown``): a step still running then is abandoned, the next one runs."""
        if self.node.shared_poll is not None:
            self.node.shared_poll.close()
        step = self.stop.step
        await step("background cleanup (presence, leave, unsubscribe)", self.node.drain())
        if self.webhooks is not None:
            await step("closing the webhooks", self.webhooks.close())
        await step("closing the broker", self.node.broker.close())
        await step("closing presence", self.node.presence.close())
        await step("closing the proxies", self.proxies.close())
        await step("closing the HTTP client", self.http.aclose())
        await step("exporting traces", asyncio.to_thread(self.tracing.shutdown))


def _routes(settings: Settings, rt: Runtime) -> list[Route]:
    routes: list[Route] = []
    links: dict[str, str] = {}
    ws = settings.websocket
    if not ws.disabled:
        links["websocket"] = ws.handler_prefix
    if not settings.http_api.disabled:
        prefix = settings.http_api.handler_prefix.rstrip("/")
        endpoint = ApiEndpoint(rt.api, settings.http_api)
        routes += [  # ApiFirst serves these paths before routing; with an empty prefix, here
            Route(prefix + "/{method:str}", endpoint, methods=ALL_METHODS),
            Route(prefix or "/", endpoint, methods=ALL_METHODS),
        ]
        links["api"] = prefix or "/"
    origins = tuple(settings.client.allowed_origins)
    for name, cfg, sse, uni in (
        ("sse", settings.sse, True, False),
        ("http_stream", settings.http_stream, False, False),
        ("uni_sse", settings.uni_sse, True, True),
        ("uni_http_stream", settings.uni_http_stream, False, True),
    ):
        if cfg.enabled:
            stream = StreamEndpoint(
                name,
                sse=sse,
                unidirectional=uni,
                max_body=cfg.max_request_body_size,
                allowed_origins=origins,
                admit=rt.admit,
                connect=rt.clients.connect,
                streams=rt.streams,
            )
            routes.append(Route(cfg.handler_prefix, stream, methods=ALL_METHODS))
            links[name] = cfg.handler_prefix
    if settings.init.enabled:
        init = ConnectionInitEndpoint(origins)
        routes.append(Route(settings.init.handler_prefix, init, methods=ALL_METHODS))
        links["init"] = settings.init.handler_prefix
    if settings.sse.enabled or settings.http_stream.enabled:
        emulation = EmulationEndpoint(
            max_body=settings.emulation.max_request_body_size,
            allowed_origins=origins,
            route=rt.node.cluster.route_emulation,
        )

        async def emulate(request: Request) -> Response:
            return await emulation(request)

        routes.append(Route(settings.emulation.handler_prefix, emulate, methods=ALL_METHODS))
        links["emulation"] = settings.emulation.handler_prefix
    if settings.health.enabled:

        async def health(_: Request) -> Response:
            if not rt.node.broker.healthy():
                return JSONResponse({"error": "engine unavailable"}, status_code=503)
            return JSONResponse({})

        routes.append(Route(settings.health.handler_prefix, health, methods=["GET"]))
        links["health"] = settings.health.handler_prefix
    if settings.prometheus.enabled:

        async def metrics(_: Request) -> Response:
            return Response(rt.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

        routes.append(Route(settings.prometheus.handler_prefix, metrics, methods=["GET"]))
        links["metrics"] = settings.prometheus.handler_prefix
    routes += _admin_routes(settings, rt, links)
    links["docs"] = DOCS
    about = {"name": "taskcast-gateway", "version": VERSION, "links": links}

    async def index(_: Request) -> Response:
        """What a person (or a probe) opening the gateway's root URL sees instead of a bare 404."""
        return JSONResponse(about)

    if not any(r.path == "/" for r in routes):
        routes.append(Route("/", index, methods=["GET"]))
    return routes


def _admin_routes(settings: Settings, rt: Runtime, links: dict[str, str]) -> list[Route]:
    """The admin web UI (gateway/admin/) when ``admin.enabled``."""
    if not settings.admin.enabled:
        return []
    admin = AdminEndpoints(settings, rt.api, rt.node)
    links["admin"] = admin.page_path
    return admin.routes()


def create_app(settings: Settings, runtime: Runtime | None = None) -> Starlette:
    """The ASGI app: server API, streaming transports, health, metrics, the root document.
    WebSocket upgrades never reach it: ``build`` hands their protocol class to the server."""
    rt = runtime or Runtime(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        loops = Loops(rt.stop.log)
        loops.add("broker", rt.node.broker.run())
        loops.add("presence", rt.node.presence.run())
        if rt.node.maps is not None:
            loops.add("maps", rt.node.maps.run())
        loops.add("presence updates", rt.node.presence_loop())
        loops.add("cluster", rt.node.cluster.run())
        loops.add("positions", rt.node.positions.check_loop())
        for consumer in rt.consumers:
            loops.add(f"consumer {consumer.name}", consumer.run())
        if rt.webhooks is not None:
            loops.add("webhooks", rt.webhooks.run())
        hub = rt.node.hub
        rt.gc.install(asyncio.get_running_loop(), lambda: len(hub.clients) + len(rt.node.connecting))
        freeze_startup()
        if settings.grpc_api.enabled:
            loops.add("grpc api", grpc_api.serve(rt.api, settings.grpc_api))
        await loops.start()
        try:
            yield
        finally:
            rt.admission.shutting_down = True
            rt.stop.begin_lifespan()
            await loops.stop(rt.stop)
            rt.gc.close()
            thaw()
            await rt.close()
            rt.stop.report()

    routes = _routes(settings, rt)
    api = next((r.app for r in routes if isinstance(r.app, ApiEndpoint)), None)
    app = ApiFirst(api=api, routes=routes, lifespan=lifespan)
    app.state.runtime = rt
    return app


def build(settings: Settings, runtime: Runtime | None = None) -> Served:
    """Everything gateway/http/server.py serves for these settings.

    Raises:
        ValueError: the configured engine is not available.
    """
    rt = runtime or Runtime(settings)
    ws, uni_ws = settings.websocket, settings.uni_websocket
    protocol = None
    if not ws.disabled or uni_ws.enabled:
        uni = None
        if uni_ws.enabled:
            uni = UniWebSocketEndpoint(
                handler_prefix=uni_ws.handler_prefix,
                message_size_limit=uni_ws.message_size_limit,
                join_push_messages=uni_ws.join_push_messages,
                connect=rt.clients.connect,
                disable_closing_handshake=uni_ws.disable_closing_handshake,
                disable_disconnect_push=uni_ws.disable_disconnect_push,
                compression=deflate_settings(uni_ws),
            )
        protocol = websocket.protocol_class(
            websocket.WebSocketEndpoint(
                handler_prefix="" if ws.disabled else ws.handler_prefix,
                message_size_limit=ws.message_size_limit,
                allowed_origins=tuple(settings.client.allowed_origins),
                admit=rt.admit,
                connect=rt.clients.connect,
                uni=uni,
                compression=deflate_settings(ws),
            )
        )
    app = create_app(settings, rt)
    return Served(
        app=app,
        inline=app.api if isinstance(app, ApiFirst) else None,
        websocket=protocol,
        on_shutdown=rt.on_shutdown,
        internal_prefixes=internal_prefixes(settings),
    )


__all__ = ["Runtime", "build", "build_engine", "create_app"]
