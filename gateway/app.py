"""Composition root of the gateway: builds the engine, node, verifiers, server API and routes,
and owns every background task (lifespan). The only module that knows which engine is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.api import ApiEndpoint, ServerApi
from gateway.auth import TokenVerifier
from gateway.client import Client, Transport
from gateway.config import Settings
from gateway.engine.base import Broker, PresenceManager
from gateway.engine.memory import MemoryBroker, MemoryPresence
from gateway.engine.redis import build_shards
from gateway.engine.redis_broker import RedisBroker
from gateway.engine.redis_presence import RedisPresence
from gateway.metrics import Metrics, NodeGauges
from gateway.node import VERSION, Node
from gateway.protocol import codes
from gateway.transports.emulation import EmulationEndpoint
from gateway.transports.streaming import StreamEndpoint

log = logging.getLogger("taskcast.gateway")

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class RateLimiter:
    """Token bucket for ``client.connection_rate_limit`` (new connections per second per node)."""

    def __init__(self, rate: float, clock: Any = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.clock = clock
        self.updated = clock()

    def take(self) -> float | None:
        """None when admitted; else seconds until a token is available."""
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


def build_engine(settings: Settings) -> tuple[Broker, PresenceManager]:
    if settings.engine.type == "memory":
        return MemoryBroker(), MemoryPresence(ttl_seconds=settings.engine.redis.presence_ttl)
    if settings.engine.type == "redis":
        redis = settings.engine.redis
        # Broker and presence get connections of their own; each closes what it owns.
        return (
            RedisBroker(build_shards(redis), prefix=redis.prefix),
            RedisPresence(build_shards(redis), prefix=redis.prefix, ttl_seconds=redis.presence_ttl),
        )
    raise ValueError(f'engine.type "{settings.engine.type}" is not available in this build')


class Runtime:
    """Everything one gateway process holds; reachable from transports via lifespan state."""

    def __init__(
        self, settings: Settings, *, broker: Broker | None = None, presence: PresenceManager | None = None
    ) -> None:
        self.settings = settings
        self.metrics = Metrics(VERSION)
        if broker is None or presence is None:
            broker, presence = build_engine(settings)
        name = settings.node.name or f"{socket.gethostname()}_{settings.http_server.port}"
        self.node = Node(settings, broker, presence, self.metrics, name=name)
        if isinstance(broker, RedisBroker):
            broker.set_node_id(self.node.uid)  # targeted control messages reach this node
        hub = self.node.hub
        self.metrics.register_node_gauges(
            NodeGauges(
                lambda: (
                    len(hub.clients),
                    len(hub.users),
                    hub.num_subscriptions,
                    len(hub.channels),
                    len(self.node.nodes()),
                    self.node.broker.healthy(),
                )
            )
        )
        self.http = httpx.AsyncClient(timeout=5.0)
        cfg = settings.client
        self.verifier = TokenVerifier(
            cfg.token, http=self.http, skip_signature=cfg.insecure_skip_token_signature_verify
        )
        self.sub_verifier = (
            TokenVerifier(
                cfg.subscription_token,
                http=self.http,
                skip_signature=cfg.insecure_skip_token_signature_verify,
            )
            if cfg.subscription_token.enabled
            else self.verifier
        )
        self.api = ServerApi(self)
        self.rate_limiter = RateLimiter(cfg.connection_rate_limit) if cfg.connection_rate_limit > 0 else None
        self.shutting_down = False
        self.streams: set[Client] = set()
        """Open SSE / HTTP-streaming connections (gateway/transports/streaming.py)."""

    def shutdown_streams(self) -> None:
        """uvicorn's graceful shutdown began: every streaming response gets the 3001 disconnect
        push and ends (uvicorn would otherwise wait for them until the shutdown timeout)."""
        self.shutting_down = True
        for client in list(self.streams):
            client.disconnect(codes.DISCONNECT_SHUTDOWN)

    def admit(self) -> int | None:
        """Handshake admission: None to accept, or a Retry-After in seconds (503)."""
        if self.shutting_down:
            return 1
        limit = self.settings.client.handshake_limit
        if limit and len(self.node.connecting) >= limit:
            return 1
        if self.rate_limiter is not None:
            wait = self.rate_limiter.take()
            if wait is not None:
                return max(1, int(wait + 0.999))
        return None

    def new_client(self, transport: Transport) -> Client:
        return Client(self.node, transport, verifier=self.verifier, sub_verifier=self.sub_verifier)

    def connection_closed(self, client: Client) -> None:
        """Hook for transports; the client already released its state."""

    async def presence_loop(self) -> None:
        interval = self.settings.client.presence_update_interval
        while True:
            await asyncio.sleep(interval)
            for client in list(self.node.hub.clients.values()):
                if isinstance(client, Client):
                    client.presence_tick()

    async def close(self) -> None:
        await self.node.drain()
        await self.node.broker.close()
        await self.node.presence.close()
        await self.http.aclose()


def create_app(settings: Settings, runtime: Runtime | None = None) -> Starlette:
    """The ASGI app: server API, health, metrics. WebSocket upgrades are served by
    ``gateway.transports.websocket.GatewayWebSocketProtocol`` (see ``gateway.cli``)."""
    rt = runtime or Runtime(settings)
    api_endpoint = ApiEndpoint(rt, rt.api)
    prefix = settings.http_api.handler_prefix.rstrip("/")

    async def health(_: Request) -> Response:
        if not rt.node.broker.healthy():
            return JSONResponse({"error": "engine unavailable"}, status_code=503)
        return JSONResponse({})

    async def metrics(_: Request) -> Response:
        return Response(rt.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def api(request: Request) -> Response:
        return await api_endpoint(request)

    routes = [
        Route(prefix + "/{method:str}", api, methods=ALL_METHODS),
        Route(prefix, api, methods=ALL_METHODS),
    ]
    for name, cfg, sse, uni in (
        ("sse", settings.sse, True, False),
        ("http_stream", settings.http_stream, False, False),
        ("uni_sse", settings.uni_sse, True, True),
        ("uni_http_stream", settings.uni_http_stream, False, True),
    ):
        if cfg.enabled:
            endpoint = StreamEndpoint(
                rt, name, sse=sse, unidirectional=uni, max_body=cfg.max_request_body_size
            )
            routes.append(Route(cfg.handler_prefix, endpoint, methods=ALL_METHODS))
    if settings.sse.enabled or settings.http_stream.enabled:
        emulation = EmulationEndpoint(rt)

        async def emulate(request: Request) -> Response:
            return await emulation(request)

        routes.append(Route(settings.emulation.handler_prefix, emulate, methods=ALL_METHODS))
    if settings.health.enabled:
        routes.append(Route("/health", health, methods=["GET"]))
    if settings.prometheus.enabled:
        routes.append(Route("/metrics", metrics, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(rt.node.broker.run()),
                tg.create_task(rt.node.presence.run()),
                tg.create_task(rt.presence_loop()),
                tg.create_task(rt.node.info_loop()),
                tg.create_task(rt.node.position_check_loop()),
            ]
            try:
                yield {"taskcast": rt}
            finally:
                rt.shutting_down = True
                for task in tasks:
                    task.cancel()
        await rt.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.runtime = rt
    return app
