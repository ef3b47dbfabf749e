"""Builds the gateway's uvicorn server from settings: the one place that knows uvicorn.

``build_server(settings, served)`` is used by ``taskcast gateway`` (gateway/cli.py), ``taskcast
up`` (taskcast/up.py) and the benchmarks (which run ``taskcast gateway``). It wires:

* ``GatewayHttpProtocol``: uvicorn's httptools protocol with the two guards every listener needs
  (Centrifugo's Go server has both): request heads over ``MAX_HEAD_BYTES`` (1 MiB) are refused
  with 431 before they are buffered, and ``http_server.request_timeout`` bounds how long a
  connection may take to deliver one whole request (slowloris). WebSocket upgrades pass through
  it first, so both guards cover the WebSocket handshake too.
* the WebSocket protocol class and the shutdown hook handed over by the composition root
  (gateway/app.py builds them; this module never imports it).

uvicorn's public API is used where it has one (``Config``, ``Server``, ``Config(http=<class>,
ws=<class>)``). The head bound and the request deadline have no public hook, so
``GatewayHttpProtocol`` subclasses the private ``HttpToolsProtocol``; pyproject.toml pins
uvicorn's version range for that reason. Imports nothing from the gateway but config (the TLS
material of ``http_server.tls`` included), logging_setup and http/inline. With
``http_server.internal_port`` one server listens on two sockets and ``ListenerSplit`` keeps the
internal endpoints off the public one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config.schema import Settings
from gateway.config.tls import uvicorn_ssl_kwargs
from gateway.http.inline import InlineHandler, InlineRequests
from gateway.logging_setup import uvicorn_log_level

logger = logging.getLogger("taskcast.gateway.server")

MAX_HEAD_BYTES = 1 << 20
"""Largest request head (request line + headers) accepted: Go's ``http.DefaultMaxHeaderBytes``,
which Centrifugo's HTTP server uses."""

LINGER_SECONDS = 0.5
"""After refusing a head: how long input is still read (and discarded) before the close."""


def _canned(status: bytes, text: bytes) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: "
        + str(len(text)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + text
    )


REQUEST_TIMEOUT_RESPONSE = _canned(b"408 Request Timeout", b"request timeout")
HEAD_TOO_LARGE_RESPONSE = _canned(b"431 Request Header Fields Too Large", b"request header fields too large")


class GatewayHttpProtocol(HttpToolsProtocol, InlineRequests):
    """uvicorn's HTTP protocol with a head bound and a request deadline.

    Head bound: httptools buffers a header until its end, and uvicorn keeps every header, so a
    request with a 512 MiB header would be held whole. The bytes received while a head is
    incomplete are counted; once they pass ``max_head_bytes`` the request is answered 431 and the
    connection closed, without feeding the parser further. (A head that ends inside the chunk that
    crosses the bound is also checked exactly, from the parsed URL and headers.)

    Request deadline: uvicorn has no deadline for receiving a request (its keep-alive timer only
    runs between requests), so a socket that drips header bytes, or never finishes a body, would
    be held forever. ``request_timeout`` arms a deadline when the connection opens and at each
    request's first byte; it is disarmed when the request is complete (head and body) or handed to
    the WebSocket protocol (whose own stale timer then applies). On expiry an unfinished head gets
    408 and the connection is closed; a stalled body is closed (the app sees ``http.disconnect``).
    Long-lived stream responses are not affected: their request is complete before they start.

    Server API requests are answered inline when ``inline_handler`` is set (gateway/http/inline.py).
    """

    max_head_bytes: ClassVar[int] = MAX_HEAD_BYTES
    request_timeout: ClassVar[float] = 0.0

    _request_deadline: asyncio.TimerHandle | None = None
    _request_open = False
    """A request's deadline runs (from ``_request_began``); the timer outlives requests."""
    _request_began = 0.0
    _head_done = True
    _head_bytes = 0
    _head_exact = 0
    _refused = False
    _linger: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        """Start the deadline of a request (unless one runs). One timer serves many requests:
        it is created only when none is pending and, when it fires, re-armed for what is left
        of the open request's deadline (no timer per keep-alive request)."""
        if self.request_timeout > 0 and not self._request_open:
            self._request_open = True
            self._request_began = self.loop.time()
            if self._request_deadline is None:
                self._request_deadline = self.loop.call_later(self.request_timeout, self._request_timed_out)

    def _disarm(self) -> None:
        self._request_open = False

    def _cancel_deadline(self) -> None:
        self._request_open = False
        if self._request_deadline is not None:
            self._request_deadline.cancel()
            self._request_deadline = None

    def _mine(self) -> bool:
        transport = self.transport
        return not (transport is None or transport.is_closing() or transport.get_protocol() is not self)

    def _request_timed_out(self) -> None:
        self._request_deadline = None
        if not self._request_open:
            return
        left = self._request_began + self.request_timeout - self.loop.time()
        if left > 0:
            self._request_deadline = self.loop.call_later(left, self._request_timed_out)
            return
        self._request_open = False
        if not self._mine():
            return
        if not self._head_done:
            self.transport.write(REQUEST_TIMEOUT_RESPONSE)
        self.transport.close()

    def _refuse_head(self) -> None:
        self._refused = True
        self._disarm()
        if not self._mine():
            return
        transport = self.transport
        transport.write(HEAD_TOO_LARGE_RESPONSE)
        if transport.can_write_eof():
            # Closing with unread input makes the kernel send RST, which can destroy the 431
            # before the peer reads it: half-close, discard the rest for a moment, then close
            # (what Go's server does for the same reason).
            transport.write_eof()
            self._linger = self.loop.call_later(LINGER_SECONDS, transport.close)
        else:
            transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_done = False  # a new connection's first request head is pending
        self._head_bytes = 0
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._head_done:
            self._head_bytes += len(data)
        super().data_received(data)
        if not self._refused and not self._head_done and self._head_bytes > self.max_head_bytes:
            self._refuse_head()

    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._head_done = False
        self._head_bytes = 0
        self._head_exact = 0
        self._arm()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            self._head_exact += len(url)
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused:
            self._head_exact += len(name) + len(value) + 4
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._head_done = True
        if self._head_exact > self.max_head_bytes:
            self._refuse_head()  # no ASGI task starts; the parser's later callbacks are ignored
            return
        if not self._inline_begin():
            super().on_headers_complete()

    def _uvicorn_headers_complete(self) -> None:
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        if self._inline_method is not None:
            self._inline_body(body)
        else:
            super().on_body(body)

    def _uvicorn_body(self, body: bytes) -> None:
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        if self._inline_method is not None:
            self._inline_complete()
        else:
            super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        if self._refused:
            return
        self._cancel_deadline()
        super().handle_websocket_upgrade()


def http_protocol(
    *,
    request_timeout: float,
    max_head_bytes: int = MAX_HEAD_BYTES,
    inline_handler: InlineHandler | None = None,
    inline_port: int = 0,
) -> type[GatewayHttpProtocol]:
    """A ``GatewayHttpProtocol`` class bound to these limits and this inline handler (uvicorn
    builds one per connection)."""

    class BoundHttpProtocol(GatewayHttpProtocol):
        pass

    BoundHttpProtocol.request_timeout = request_timeout
    BoundHttpProtocol.max_head_bytes = max_head_bytes
    BoundHttpProtocol.inline_handler = inline_handler
    BoundHttpProtocol.inline_port = inline_port
    return BoundHttpProtocol


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
    """Requests it routes are answered by the HTTP protocol itself (gateway/http/inline.py)."""


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
    the head bound, no access log and no ``server`` header."""
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
