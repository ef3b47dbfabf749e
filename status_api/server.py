"""The Status API listener: uvicorn, with bounds on what a connection may send before the app runs.

The connection is the gateway's HTTP/1.1 protocol (httpwire/protocol.py: an
``asyncio.Protocol`` on httptools, run through uvicorn's public ``Config(http=<class>)``; nothing
of uvicorn's private modules), bound to the Status API's limits and JSON refusals:

* **Head bound** (``http.max_head_bytes``, 1 MiB): the bytes of a request line and headers are
  counted as they arrive; an unfinished head past the bound is answered ``431``
  (``HEADERS_TOO_LARGE``) and the connection closed. Memory per connection stays below the bound
  plus one read chunk.
* **Request deadline** (``http.request_timeout_seconds``, 10 s): a connection must deliver a
  whole request — head and body — within that many seconds of opening or of the request's first
  byte. An unfinished head is answered ``408`` (``REQUEST_TIMEOUT``) and closed; a stalled body is
  closed (the app sees ``http.disconnect``). The timer is disarmed once the request is complete,
  so slow handlers are not affected; idle keep-alive connections are closed after uvicorn's
  ``timeout_keep_alive``.
* Bytes that are not HTTP: ``400`` and closed.

The body bound is the app's (``status_api/body_limit.py``). The event POST is answered by the
connection itself when the app offers an inline handler (``app.state.event_inline``:
status_api/event_inline.py, httpwire/inline.py); every other request goes to the app.

This is the only module that knows how the Status API is served; ``taskcast status-api serve``
and ``taskcast up`` go through :func:`run` (``serve --workers N`` runs N of them on one port:
``status_api/workers.py``).
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn

from httpwire.inline import InlineHandler
from httpwire.protocol import HttpProtocol, Limits, bound, canned
from status_api.config import HttpConfig


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    max_head_bytes: int = 1048576
    #: 0 disables the deadline.
    request_timeout_seconds: float = 10.0


def _refusal(status: bytes, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "retryable": False}}).encode()
    return canned(status, body, b"application/json")


def protocol_class(limits: ListenerLimits, inline: InlineHandler | None = None) -> type[HttpProtocol]:
    """The HTTP protocol class bound to ``limits``, the Status API's JSON refusals and the inline
    handler (None: every request goes to the app; uvicorn instantiates the class per connection)."""
    return bound(
        Limits(
            max_head_bytes=limits.max_head_bytes,
            request_timeout=limits.request_timeout_seconds,
            head_too_large=_refusal(
                b"431 Request Header Fields Too Large",
                "HEADERS_TOO_LARGE",
                f"request line and headers exceed {limits.max_head_bytes} bytes",
            ),
            timed_out=_refusal(b"408 Request Timeout", "REQUEST_TIMEOUT", "request not received in time"),
        ),
        inline_handler=inline,
        name="StatusApiHttpProtocol",
    )


def limits_of(http: HttpConfig) -> ListenerLimits:
    return ListenerLimits(http.max_head_bytes, http.request_timeout_seconds)


def uvicorn_config(
    app: Any, http: HttpConfig, *, host: str | None = None, port: int | None = None, **extra: Any
) -> uvicorn.Config:
    """The uvicorn configuration of a Status API listener (``host``/``port`` override ``http``):
    in-flight requests get ``http.shutdown_timeout_seconds`` at shutdown, then are cancelled.
    ``extra`` overrides what ``http`` sets (``access_log``, ``timeout_graceful_shutdown``)."""
    extra.setdefault("timeout_graceful_shutdown", math.ceil(http.shutdown_timeout_seconds))
    extra.setdefault("access_log", http.access_log)
    inline = getattr(getattr(app, "state", None), "event_inline", None)
    return uvicorn.Config(
        app,
        host=host or http.host,
        port=http.port if port is None else port,
        http=protocol_class(limits_of(http), inline),
        ws="none",
        lifespan="on",
        log_level=http.log_level,
        server_header=False,
        **extra,
    )


class StatusApiServer(uvicorn.Server):
    """``uvicorn.Server`` that calls ``on_shutdown`` when graceful shutdown begins (the shutdown
    timeout's budget starts there: httpwire/shutdown.py)."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        await super().shutdown(sockets)


def run(
    app: Any,
    http: HttpConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    reuse_port: bool = False,
    on_shutdown: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` until SIGTERM/SIGINT (blocking). ``reuse_port``: listen on a ``SO_REUSEPORT``
    socket shared with sibling workers (``status_api/workers.py``). ``on_shutdown``: called when
    graceful shutdown begins (the app's ``StopBudget.begin``)."""
    config = uvicorn_config(app, http, host=host, port=port)
    server = StatusApiServer(config, on_shutdown)
    if not reuse_port:
        server.run()
        return
    from status_api.workers import reuse_port_socket

    server.run(sockets=[reuse_port_socket(config.host, config.port)])
