"""The Status API listener: uvicorn, with bounds on what a connection may send before the app runs.

uvicorn (httptools) bounds neither the request head nor the time a client takes to send a request:
four 128 MiB headers were each buffered whole and answered after ~55 s, and a client dripping one
byte at a time would hold a connection forever. :class:`BoundedHttpProtocol` adds the gateway's
bounds (``http_server.request_timeout``; a 1 MiB head):

* **Head bound** (``http.max_head_bytes``, 1 MiB): the bytes of a request line and headers are
  counted as they arrive; the parser is never fed past the bound, and an unfinished head at the
  bound is answered ``431`` (``HEADERS_TOO_LARGE``) and the connection closed. Memory per
  connection stays below the bound plus one read chunk.
* **Request deadline** (``http.request_timeout_seconds``, 10 s): a connection must deliver a
  whole request — head and body — within that many seconds of opening or of the request's first
  byte. An unfinished head is answered ``408`` and closed; a stalled body is closed (the app sees
  ``http.disconnect``). The timer is disarmed once the request is complete, so slow handlers are
  not affected; idle keep-alive connections are closed by uvicorn's own keep-alive timeout.

The body bound is the app's (``status_api/body_limit.py``). This is the only module that knows how
the Status API is served; ``taskcast status-api serve`` and ``taskcast up`` go through :func:`run`
(``serve --workers N`` runs N of them on one port: ``status_api/workers.py``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from status_api.config import HttpConfig


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    max_head_bytes: int = 1048576
    #: 0 disables the deadline.
    request_timeout_seconds: float = 10.0


def _canned(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "retryable": False}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head bound and the request deadline (module docstring).
    :func:`protocol_class` makes a subclass carrying the configured :class:`ListenerLimits`."""

    limits: ClassVar[ListenerLimits] = ListenerLimits()

    _in_head = True  # between requests and until the current head is complete
    _head_bytes = 0
    _refused = False
    _deadline: asyncio.TimerHandle | None = None

    # --- the head bound ---------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        limit = self.limits.max_head_bytes
        while data and not self._refused:
            if not self._in_head:
                super().data_received(data)
                return
            room = limit - self._head_bytes
            if len(data) <= room:
                self._head_bytes += len(data)
                super().data_received(data)
                return
            # Feed exactly up to the bound: if the head is not complete there, it is too large.
            super().data_received(data[:room])
            self._head_bytes = limit
            if self.transport.is_closing():
                return
            if self._in_head:
                self._refuse(
                    _canned(
                        431,
                        "Request Header Fields Too Large",
                        "HEADERS_TOO_LARGE",
                        f"request line and headers exceed {limit} bytes",
                    )
                )
                return
            data = data[room:]

    def _refuse(self, response: bytes) -> None:
        self._refused = True
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        self._disarm()
        super().on_message_complete()

    # --- the request deadline ---------------------------------------------------------------

    def _arm(self) -> None:
        timeout = self.limits.request_timeout_seconds
        if timeout > 0 and self._deadline is None:
            self._deadline = self.loop.call_later(timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport is None or self.transport.is_closing():
            return
        if self._in_head:
            self._refuse(_canned(408, "Request Timeout", "REQUEST_TIMEOUT", "request not received in time"))
        else:
            self._refused = True
            self.transport.close()  # a stalled body: the app sees http.disconnect

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._arm()
        super().on_message_begin()


def protocol_class(limits: ListenerLimits) -> type[BoundedHttpProtocol]:
    """A :class:`BoundedHttpProtocol` subclass bound to ``limits`` (uvicorn instantiates the class)."""
    return type("StatusApiHttpProtocol", (BoundedHttpProtocol,), {"limits": limits})


def limits_of(http: HttpConfig) -> ListenerLimits:
    return ListenerLimits(http.max_head_bytes, http.request_timeout_seconds)


def uvicorn_config(
    app: Any, http: HttpConfig, *, host: str | None = None, port: int | None = None, **extra: Any
) -> uvicorn.Config:
    """The uvicorn configuration of a Status API listener (``host``/``port`` override ``http``)."""
    return uvicorn.Config(
        app,
        host=host or http.host,
        port=http.port if port is None else port,
        http=protocol_class(limits_of(http)),
        ws="none",
        lifespan="on",
        log_level=http.log_level,
        server_header=False,
        **extra,
    )


def run(
    app: Any, http: HttpConfig, *, host: str | None = None, port: int | None = None, reuse_port: bool = False
) -> None:
    """Serve ``app`` until SIGTERM/SIGINT (blocking). ``reuse_port``: listen on a ``SO_REUSEPORT``
    socket shared with sibling workers (``status_api/workers.py``)."""
    config = uvicorn_config(app, http, host=host, port=port)
    if not reuse_port:
        uvicorn.Server(config).run()
        return
    from status_api.workers import reuse_port_socket

    uvicorn.Server(config).run(sockets=[reuse_port_socket(config.host, config.port)])
