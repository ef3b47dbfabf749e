"""Builds the gateway's uvicorn server from settings: the one place that knows uvicorn.

``build_server(settings, served)`` is used by ``taskcast gateway`` (gateway/cli.py), ``taskcast
up`` (taskcast/up.py) and the benchmarks (which run ``taskcast gateway``). It wires:

* the HTTP protocol (httpwire/protocol.py, on httptools) with the guards every listener
  needs (Centrifugo's Go server has them): request heads over ``MAX_HEAD_BYTES`` (1 MiB) are
  refused with 431 before they are buffered, a declared body past the largest any endpoint
  accepts (``listener_body_bound``) with 413 before it is read, and ``http_server.request_timeout``
  bounds how long a connection may take to deliver one whole request (slowloris). WebSocket
  upgrades pass through it first, so the guards cover the WebSocket handshake too. Server API
  requests are answered by the protocol itself (httpwire/inline.py).
* the WebSocket protocol class and the shutdown hook handed over by the composition root
  (gateway/app.py builds them; this module never imports it).

Only uvicorn's public API is used: ``Config`` (with ``http=<class>``, ``ws=<class>``) and
``Server`` (subclassed for the shutdown hook and the owner's signal handling). Imports nothing
from the gateway but config (the TLS material of ``http_server.tls`` included), logging_setup and
http. With ``http_server.internal_port`` one server listens on two sockets and ``ListenerSplit``
keeps the internal endpoints off the public one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import uvicorn

from gateway.config.schema import Settings
from gateway.config.tls import uvicorn_ssl_kwargs
from gateway.logging_setup import uvicorn_log_level
from httpwire.inline import InlineHandler
from httpwire.limits import MAX_HEAD_BYTES, Limits
from httpwire.protocol import HttpProtocol, bound

logger = logging.getLogger("taskcast.gateway.server")

MAX_BODY_BYTES = 10 * 1024 * 1024
"""The listener's body bound at least: the server API's own (gateway/api/http.py); a configured
endpoint bound above it (``max_request_body_size`` of ``emulation`` and the stream transports)
raises it."""


def http_protocol(
    *,
    request_timeout: float,
    max_head_bytes: int = MAX_HEAD_BYTES,
    max_body_bytes: int = 0,
    inline_handler: InlineHandler | None = None,
    inline_port: int = 0,
) -> type[HttpProtocol]:
    """The gateway's HTTP protocol class bound to these limits and this inline handler (uvicorn
    builds one per connection)."""
    limits = Limits(
        max_head_bytes=max_head_bytes, max_body_bytes=max_body_bytes, request_timeout=request_timeout
    )
    return bound(limits, inline_handler=inline_handler, inline_port=inline_port, name="GatewayHttpProtocol")


def listener_body_bound(settings: Settings) -> int:
    """The largest body any endpoint of this gateway accepts (``MAX_BODY_BYTES`` at least): a
    declared body past it is answered 413 before it is read."""
    return max(
        MAX_BODY_BYTES,
        settings.emulation.max_request_body_size,
        settings.http_stream.max_request_body_size,
        settings.sse.max_request_body_size,
        settings.uni_sse.max_request_body_size,
        settings.uni_http_stream.max_request_body_size,
    )


@dataclass(frozen=True, slots=True)
class Served:
    """What the composition root hands to the server: the ASGI app, the WebSocket protocol class
    (None: no WebSocket endpoint) and a hook run when graceful shutdown begins."""

    app: Any
    websocket: type[asyncio.Protocol] | None = None
    on_shutdown: Callable[[], None] | None = None
    internal_prefixes: tuple[str, ...] = ()
    """With ``http_server.internal_port``: the paths served only on the internal listener."""
    inline: InlineHandler | None = None
    """Requests it routes are answered by the HTTP protocol itself (httpwire/inline.py)."""


NOT_FOUND = b"not found"


class ListenerSplit:
    """ASGI middleware for two listeners (``http_server.internal_port``): a request on the
    internal port reaches only ``prefixes`` (server API, metrics, health), a request on the
    public port everything else; the rest answers 404. The listener is the local port of the
    request's socket (ASGI ``scope["server"]``)."""

    def __init__(self, app: Any, internal_port: int, prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.internal_port = internal_port
        self.prefixes = prefixes

    def internal_path(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.prefixes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            server = scope.get("server")
            on_internal = server is not None and server[1] == self.internal_port
            if self.internal_path(scope["path"]) != on_internal:
                headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"9")]
                await send({"type": "http.response.start", "status": 404, "headers": headers})
                await send({"type": "http.response.body", "body": NOT_FOUND})
                return
        await self.app(scope, receive, send)


class GatewayServer(uvicorn.Server):
    """``uvicorn.Server`` that runs ``on_shutdown`` when graceful shutdown begins (streaming
    responses never end by themselves: the hook ends them with 3001 before uvicorn waits for
    connections) and, with ``handle_signals=False``, leaves signals to its owner (``taskcast
    up`` runs two servers in one loop)."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_shutdown: Callable[[], None] | None,
        handle_signals: bool,
        internal: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown
        self.handle_signals = handle_signals
        self.internal = internal
        """(address, port) of the internal listener, served with the public one."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None and self.internal is not None:
            sockets = [self.config.bind_socket(), _bind(*self.internal)]
        await super().serve(sockets=sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if not self.handle_signals:
            yield
            return
        with super().capture_signals():
            yield


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket for ``host:port`` (the internal listener), as uvicorn binds its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    logger.info("internal listener on %s:%d (server API, metrics, health)", host, port)
    return sock


def build_server(
    settings: Settings,
    served: Served,
    *,
    host: str | None = None,
    port: int | None = None,
    log_level: int | str | None = None,
    handle_signals: bool = True,
    timeout_graceful_shutdown: int | None = None,
) -> GatewayServer:
    """The uvicorn server of one gateway: ``http_server.address``/``port`` unless overridden,
    ``http_server.tls`` (certificate and key; client certificates required with
    ``client_ca_pem``), the internal listener of ``http_server.internal_address``/
    ``internal_port`` (the same TLS), ``http_server.request_timeout``, ``shutdown.timeout``,
    the head and body bounds, no access log and no ``server`` header."""
    http = settings.http_server
    app = served.app
    internal = None
    if http.internal_port:
        internal = (http.internal_address or "0.0.0.0", int(http.internal_port))
        app = ListenerSplit(app, internal[1], served.internal_prefixes)
    config = uvicorn.Config(
        app,
        host=host if host is not None else (http.address or "0.0.0.0"),
        port=port if port is not None else http.port,
        http=http_protocol(
            request_timeout=http.request_timeout,
            max_body_bytes=listener_body_bound(settings),
            inline_handler=served.inline,
            inline_port=internal[1] if internal is not None else 0,
        ),
        ws=served.websocket if served.websocket is not None else "none",
        lifespan="on",
        log_level=log_level if log_level is not None else uvicorn_log_level(settings.log.level),
        # uvicorn's loggers propagate to the root handler (gateway/logging_setup.py), so
        # ``log.file`` gets them too; uvicorn installs no handlers of its own.
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=(
            timeout_graceful_shutdown
            if timeout_graceful_shutdown is not None
            else max(1, int(settings.shutdown.timeout))
        ),
        server_header=False,
        **uvicorn_ssl_kwargs(http.tls, "http_server.tls"),
    )
    return GatewayServer(
        config, on_shutdown=served.on_shutdown, handle_signals=handle_signals, internal=internal
    )
