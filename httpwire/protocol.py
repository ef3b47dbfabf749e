"""The HTTP/1.1 connection both services listen with: an ``asyncio.Protocol`` over httptools.

uvicorn runs it through its public extension point, ``uvicorn.Config(http=<class>)``: uvicorn
builds one instance per connection with the keyword arguments ``config``, ``server_state`` and
``app_state``, registers nothing itself, and at graceful shutdown calls ``shutdown()`` on every
connection in ``server_state.connections`` and waits for them and for ``server_state.tasks``.
Nothing of uvicorn's private modules is imported or subclassed (tests/test_dependency_privates.py).

What a connection does:

* **Requests to the ASGI app** (httpwire/cycle.py): keep-alive (HTTP/1.1 by default,
  HTTP/1.0 closes), pipelining (a request that arrives while a response is in progress waits,
  with reading paused, and the responses keep the requests' order), ``Content-Length`` and
  chunked bodies (reading pauses while more than 64 KiB of body waits for the app),
  ``Expect: 100-continue`` (answered when the app reads the body), ``root_path``, the server's
  default headers (``date``).
* **Head bound** (``Limits.max_head_bytes``): bytes received while a head is incomplete are
  counted; past the bound the request is answered 431 and never reaches the app (a head that ends
  inside the chunk crossing the bound is checked exactly, from the parsed URL and headers).
* **Body bound** (``Limits.max_body_bytes``, 0: the app's own): a declared ``Content-Length``
  over it is answered 413 before a body byte is read; a chunked body is counted as it arrives.
* **Request deadline** (``Limits.request_timeout``, 0: none): a connection must deliver a whole
  request (head and body) within that many seconds of opening or of the request's first byte. An
  unfinished head gets 408, a stalled body is closed (the app sees ``http.disconnect``). The
  deadline does not cover the response: a stream outlives it.
* **Idle keep-alive**: a connection idle for ``timeout_keep_alive`` after its last response is
  closed (one timer per connection, re-armed lazily, not one per response).
* **Garbage** (httptools refuses the bytes, or the URL): 400 and close, logged at debug level
  only (an exception of a callback of ours is logged as an error, and answered 400 too).
* **WebSocket upgrade**: handed to ``config.ws_protocol_class`` with the head as received, the
  way uvicorn does (the bounds above cover the handshake; the deadline stops there).
* **Graceful shutdown** (``shutdown()``): an idle connection closes now, a busy one after its
  response (``connection: close``).
* **Inline answers** (httpwire/inline.py): a server API request routed by the bound
  ``inline_handler`` is answered without an ASGI cycle.

Every refusal writes a canned response (``Limits``), half-closes, discards what still arrives for
``LINGER_SECONDS`` or ``LINGER_BYTES`` (so the peer reads the answer instead of a reset) and
closes. A refusal never writes into a response in progress: then the connection is just closed.
The bounds, their answers, the deadline and the refusal steps are httpwire/limits.py's.
Imports nothing from the gateway but http/cycle and http/inline; the Status API listens with it
too (status_api/server.py).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections import deque
from typing import Any, Protocol

import httptools

from httpwire.cycle import HIGH_WATER, Cycle, Writable
from httpwire.cycles import release_transport
from httpwire.inline import InlineRequests, Pending
from httpwire.limits import LINGER_BYTES, Limits, RequestBounds, canned

logger = logging.getLogger("taskcast.http")

__all__ = ["HttpProtocol", "Limits", "ServerState", "bound", "canned"]
"""A server binds its ``Limits`` (answers built with ``canned``) with ``bound``."""


class ServerState(Protocol):
    """What uvicorn's ``Server`` shares with its connections (``server_state``)."""

    connections: set[Any]
    tasks: set[asyncio.Task[None]]
    default_headers: list[tuple[bytes, bytes]]
    total_requests: int


def _address(info: Any) -> tuple[str, int | None] | None:
    if isinstance(info, (tuple, list)) and len(info) >= 2:
        return (str(info[0]), int(info[1]))
    if isinstance(info, str):
        return (info, None)
    return None


class HttpProtocol(RequestBounds, InlineRequests, asyncio.Protocol):
    """One HTTP/1.1 connection (module docstring). :func:`bound` makes a subclass carrying the
    limits and the inline handler of one server; uvicorn builds one instance per connection."""

    def __init__(
        self,
        config: Any,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_running_loop()
        self.ws_protocol_class: Any = config.ws_protocol_class
        self.root_path: str = config.root_path
        self.timeout_keep_alive: float = config.timeout_keep_alive
        self.asgi = {"version": config.asgi_version, "spec_version": "2.3"}
        self.access_log = bool(config.access_log) and logging.getLogger("uvicorn.access").hasHandlers()
        self.server_state = server_state
        self.connections = server_state.connections
        self.tasks = server_state.tasks
        self.app_state = app_state
        self.parser = httptools.HttpRequestParser(self)
        # Answer the first of pipelined requests sent after ``connection: close`` too.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)

        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.writable = Writable()
        self.server: tuple[str, int | None] | None = None
        self.client: tuple[str, int | None] | None = None
        self.scheme = "http"
        self.cycle: Cycle | Pending | None = None
        self.pipeline: deque[Cycle] = deque()
        self.read_paused = False

        # The request being received.
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.expect_100 = False
        self.content_length: bytes | None = None
        self.head_done = True
        self.upgrading = False
        self._head_bytes = 0
        self._head_exact = 0
        self._body_bytes = 0

        self._refused = False
        self._discarded = 0
        self._linger: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._request_open = False
        self._request_began = 0.0
        self._idle: asyncio.TimerHandle | None = None
        self._idle_since = 0.0

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connections.add(self)
        self.transport = transport  # type: ignore[assignment]
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = _address(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext"):
            self.scheme = "https"
        self.head_done = False  # the first request's head is pending
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self._cancel_deadline()
        for timer in (self._linger, self._idle):
            if timer is not None:
                timer.cancel()
        self._linger = self._idle = None
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.message_event.set()
        for queued in self.pipeline:
            queued.disconnected = True
        self.writable.resume()
        if exc is None:
            self.transport.close()
        # No reference cycle outlives the connection (httpwire/cycles.py): the parser's callbacks
        # are bound methods of this protocol.
        release_transport(self.transport)
        del self.parser

    def eof_received(self) -> bool | None:
        return None  # the transport closes

    def pause_writing(self) -> None:
        self.writable.pause()

    def resume_writing(self) -> None:
        self.writable.resume()

    def data_received(self, data: bytes) -> None:
        if self._refused:  # lingering after a refusal: discarded, up to LINGER_BYTES
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.transport.close()
            return
        if not self.head_done:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self.upgrading and not self._refused:
                self._upgrade()
        except (httptools.HttpParserError, httptools.HttpParserInvalidURLError) as exc:
            failure = exc.__context__ if isinstance(exc, httptools.HttpParserCallbackError) else None
            if failure is not None and not isinstance(failure, httptools.HttpParserInvalidURLError):
                # A defect of ours in a parser callback, not the client's bytes: say so.
                logger.error("HTTP request handling failed", exc_info=failure)
            if not self._refused:
                logger.debug("invalid HTTP request from %s", self.client)
                self._refuse(self.limits.bad_request)
            return
        if not self._refused and not self.head_done and self._head_bytes > self.limits.max_head_bytes:
            self._refuse(self.limits.head_too_large)

    def shutdown(self) -> None:
        """Graceful shutdown (uvicorn calls it on every connection): close when idle, else after
        the response in progress."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    # --- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._refused:
            return
        self.url = b""
        self.headers = []
        self.expect_100 = False
        self.content_length = None
        self.head_done = False
        self._head_bytes = 0
        self._head_exact = 0
        self._body_bytes = 0
        self._arm()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._head_exact += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_exact += len(name) + len(value) + 4
        name = name.lower()
        if name == b"content-length":
            self.content_length = value  # llhttp has checked its digits
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100 = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self.head_done = True
        limits = self.limits
        if self._head_exact > limits.max_head_bytes:
            self._refuse(limits.head_too_large)
            return
        if self.parser.should_upgrade() and self._websocket_upgrade():
            self.upgrading = True  # data_received hands the connection over
            return
        declared = self.content_length
        if declared is not None and 0 < limits.max_body_bytes < int(declared):
            self._refuse(limits.body_too_large)
            return
        if not self._inline_begin():
            self._start_cycle()

    def on_body(self, body: bytes) -> None:
        if self._refused or self.upgrading:
            return
        limit = self.limits.max_body_bytes
        if limit:
            self._body_bytes += len(body)
            if self._body_bytes > limit:
                self._refuse(self.limits.body_too_large)
                return
        if self._inline_method is not None:
            self._inline_body(body)
        else:
            self._cycle_body(body)

    def on_message_complete(self) -> None:
        if self._refused or self.upgrading:
            return
        self._request_open = False
        if self._inline_method is not None:
            self._inline_complete()
            return
        cycle = self.cycle
        if isinstance(cycle, Cycle) and not cycle.response_complete:
            cycle.more_body = False
            cycle.message_event.set()

    # --- requests to the ASGI app --------------------------------------------------------------

    def _start_cycle(self) -> None:
        parser = self.parser
        version = parser.get_http_version()
        parsed = httptools.parse_url(self.url)
        raw_path = parsed.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root = self.root_path
        scope = {
            "type": "http",
            "asgi": self.asgi,
            "http_version": version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": parser.get_method().decode("ascii"),
            "root_path": root,
            "path": root + path,
            "raw_path": root.encode("ascii") + raw_path if root else raw_path,
            "query_string": parsed.query or b"",
            "headers": self.headers,
            "state": self.app_state.copy(),
        }
        cycle = Cycle(
            scope,
            self.transport,
            self.writable,
            self.server_state.default_headers,
            keep_alive=version != "1.0" and parser.should_keep_alive(),
            expect_100=self.expect_100,
            on_response=self._response_complete,
            resume_reading=self._resume_reading,
        )
        if self.access_log:
            cycle.access_log = True
        previous = self.cycle
        self.cycle = cycle
        if previous is None or previous.response_complete:
            self._run(cycle)
        else:  # pipelined: waits for the response in progress
            self._pause_reading()
            self.pipeline.appendleft(cycle)

    def _cycle_body(self, body: bytes) -> None:
        cycle = self.cycle
        if not isinstance(cycle, Cycle) or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER:
            self._pause_reading()
        cycle.message_event.set()

    def _run(self, cycle: Cycle) -> None:
        task = self.loop.create_task(cycle.run(self.app))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _response_complete(self) -> None:
        """A response is complete: start the next pipelined request, or wait idle."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._resume_reading()
        if self.pipeline:
            self._run(self.pipeline.pop())
            return
        self._idle_since = self.loop.time()
        if self._idle is None and self.timeout_keep_alive > 0:
            self._idle = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

    def _idle_check(self) -> None:
        self._idle = None
        transport = self.transport
        if transport.is_closing() or transport.get_protocol() is not self:
            return  # closed, or upgraded
        cycle = self.cycle
        busy = cycle is not None and not cycle.response_complete
        if busy or not self.head_done or self._inline_method is not None:
            return  # a request is in progress: its response arms the check again
        left = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle = self.loop.call_later(left, self._idle_check)
        else:
            transport.close()

    def _pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    # --- WebSocket upgrade ---------------------------------------------------------------------

    def _websocket_upgrade(self) -> bool:
        if self.ws_protocol_class is None:
            return False
        tokens: list[bytes] = []
        upgrade = None
        for name, value in self.headers:
            if name == b"connection":
                tokens = [t.strip().lower() for t in value.split(b",")]
            elif name == b"upgrade":
                upgrade = value.lower()
        return upgrade == b"websocket" and b"upgrade" in tokens

    def _upgrade(self) -> None:
        """Hand the connection to the WebSocket protocol with the request head as received."""
        self._cancel_deadline()
        self.connections.discard(self)
        head = [self.parser.get_method(), b" ", self.url, b" HTTP/1.1\r\n"]
        for name, value in self.headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        protocol = self.ws_protocol_class(
            config=self.config, server_state=self.server_state, app_state=self.app_state
        )
        protocol.connection_made(self.transport)
        protocol.data_received(b"".join(head))
        self.transport.set_protocol(protocol)
        del self.parser  # its callbacks are bound methods of this protocol: a reference cycle


def bound(
    limits: Limits, *, inline_handler: Any = None, inline_port: int = 0, name: str = "BoundHttpProtocol"
) -> type[HttpProtocol]:
    """An ``HttpProtocol`` class carrying ``limits`` and the inline handler (None: no inline
    answers; ``inline_port``: only on the listener of this local port) of one server."""
    attributes = {"limits": limits, "inline_handler": inline_handler, "inline_port": inline_port}
    return type(name, (HttpProtocol,), attributes)
