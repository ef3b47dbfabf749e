"""Inline requests: the HTTP connection answers the server API's requests itself, without an ASGI
cycle, a task or ASGI messages per request (the gateway's most frequent request is a publish).

``InlineRequests`` is a mixin of httpwire/protocol.py's ``HttpProtocol``. A request is taken
inline when an ``InlineHandler`` (gateway/api/http.py's ``ApiEndpoint``) routes its path and
nothing makes the ASGI path necessary: method POST, no upgrade, no ``Expect: 100-continue``, no
``%`` in the path, the connection's previous response complete and its writes not paused, and
(with ``http_server.internal_port``) the request arrived on the internal listener. Everything
else, and a body past ``INLINE_BODY_BYTES``, goes to the ASGI app unchanged (the buffered head
and body are handed over as they came).

When the handler says its coroutine does not suspend (publishes on the memory engine), the
coroutine is driven by hand, outside any task, and the response is written straight to the
transport (status line, the server's default headers, ``content-length``/``content-type``,
``connection: close`` when the request does not keep the connection alive). Otherwise (an engine
round trip; or it suspended after all) it runs in a task owned by the server (awaited at
shutdown), and a ``Pending`` placeholder holds later pipelined requests until the response is
written, so responses keep the requests' order. Imports nothing from the gateway but http/cycle.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol

import httptools

from httpwire.cycle import STATUS_LINE, Writable, access_logger

log = logging.getLogger("taskcast.gateway.server")

INLINE_BODY_BYTES = 1 << 20
"""Largest body buffered inline; a larger one is handed to the ASGI app (which bounds it)."""

Response = tuple[int, bytes, bytes | None]
"""(status, body, content type or None)."""

ResponseWithHeaders = tuple[int, bytes, bytes | None, bytes]
"""A ``Response`` with header lines of its own after the content type (each ``name: value\r\n``);
a handler may answer with either."""

AnyResponse = Response | ResponseWithHeaders

INTERNAL_ERROR: Response = (500, b"Internal Server Error", b"text/plain; charset=utf-8")


class Deferred:
    """A response that is not ready: the coroutine computing it, and whether it may run outside
    a task (it is not expected to suspend)."""

    __slots__ = ("coro", "inline")

    def __init__(self, coro: Coroutine[Any, Any, AnyResponse], inline: bool) -> None:
        self.coro = coro
        self.inline = inline


class InlineHandler(Protocol):
    """What the protocol needs from the server API's HTTP adapter."""

    def route(self, path: str) -> str | None:
        """The API method a path names ("" = the legacy single endpoint), None: not the API."""

    def respond_inline(
        self, method: str, http_method: str, headers: list[tuple[bytes, bytes]], query: bytes, body: bytes
    ) -> AnyResponse | Deferred:
        """The response to one complete request (every check of the ASGI endpoint included):
        computed now, or ``Deferred``."""


class HeadCheck(Protocol):
    """Optional on an ``InlineHandler``: a last look at a routed request's head. False leaves the
    request to the ASGI app (e.g. a header the ASGI stack must see). Without it, a routed request
    is taken inline whatever its headers."""

    def accepts_head(self, method: str, headers: list[tuple[bytes, bytes]]) -> bool:
        """``method``: what ``route`` returned; ``headers``: lower-cased names, as received."""


class Pending:
    """Stands in for a request's ``Cycle`` while an inline response is awaited: the connection
    queues pipelined requests behind it and tells it about disconnects and shutdown."""

    __slots__ = ("disconnected", "keep_alive", "message_event", "response_complete")

    response_started = False

    def __init__(self, keep_alive: bool) -> None:
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = keep_alive
        self.message_event = asyncio.Event()


class _Resume:
    """Awaitable continuing a coroutine that already yielded ``first`` (driven by a task)."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, AnyResponse], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, AnyResponse]:
        coro, value = self.coro, self.first
        while True:
            try:
                sent = yield value
            except BaseException as exc:  # cancellation and the like go into the coroutine
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]


class InlineRequests:
    """Mixin state and steps; the connection calls ``_inline_begin`` at the end of a head,
    ``_inline_body`` for each body chunk and ``_inline_complete`` at the end of the request."""

    inline_handler: InlineHandler | None = None
    inline_port: int = 0
    """Non-zero: inline only on the listener of this local port (``http_server.internal_port``)."""

    _inline_method: str | None = None
    _inline_chunks: list[bytes]
    _inline_size = 0
    _inline_query = b""
    _inline_keep_alive = True
    _inline_access: tuple[str, str, str] | None = None
    """With a handler whose ``access_log`` is True and the access log on: (client, path, version)
    of the request being answered, logged on ``uvicorn.access`` as an ASGI ``Cycle`` does."""

    if TYPE_CHECKING:  # the connection's state and steps (httpwire/protocol.py)
        parser: Any
        transport: asyncio.Transport
        writable: Writable
        url: bytes
        headers: list[tuple[bytes, bytes]]
        cycle: Any
        server: tuple[str, int | None] | None
        client: tuple[str, int | None] | None
        access_log: bool
        expect_100: bool
        server_state: Any
        loop: asyncio.AbstractEventLoop
        tasks: set[asyncio.Task[None]]

        def _response_complete(self) -> None: ...

        def _start_cycle(self) -> None: ...

        def _cycle_body(self, body: bytes) -> None: ...

    def _inline_begin(self) -> bool:
        """At the end of a head: take the request inline (True) or leave it to the ASGI app."""
        handler = self.inline_handler
        if handler is None:
            return False
        cycle = self.cycle
        parser = self.parser
        if (
            (cycle is not None and not cycle.response_complete)
            or self.expect_100
            or self.writable.paused
            or parser.get_method() != b"POST"
            or parser.should_upgrade()
        ):
            return False
        if self.inline_port and (self.server is None or self.server[1] != self.inline_port):
            return False
        url = self.url
        if url[:1] == b"/" and b"?" not in url and b"#" not in url:
            raw_path, query = url, b""  # origin-form without a query: the path as it is
        else:
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
        if b"%" in raw_path:
            return False
        method = handler.route(raw_path.decode("ascii"))
        if method is None:
            return False
        accepts_head = getattr(handler, "accepts_head", None)
        if accepts_head is not None and not accepts_head(method, self.headers):
            return False
        if self.access_log and getattr(handler, "access_log", False):
            client = self.client
            self._inline_access = (
                f"{client[0]}:{client[1]}" if client else "",
                urllib.parse.quote(raw_path.decode("ascii")) + ("?" + query.decode("ascii") if query else ""),
                parser.get_http_version(),
            )
        else:
            self._inline_access = None
        self._inline_method = method
        self._inline_query = query
        self._inline_chunks = []
        self._inline_size = 0
        self._inline_keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
        return True

    def _inline_body(self, body: bytes) -> None:
        self._inline_chunks.append(body)
        self._inline_size += len(body)
        if self._inline_size > INLINE_BODY_BYTES:
            # Too large to buffer here: the ASGI app takes over from the head on (it bounds it).
            chunks, self._inline_chunks = self._inline_chunks, []
            self._inline_method = None
            self._start_cycle()
            self._cycle_body(b"".join(chunks))

    def _inline_complete(self) -> None:
        method, self._inline_method = self._inline_method, None
        assert method is not None and self.inline_handler is not None
        chunks, self._inline_chunks = self._inline_chunks, []
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        handler = self.inline_handler
        keep_alive = self._inline_keep_alive
        access, self._inline_access = self._inline_access, None
        try:
            answer = handler.respond_inline(method, "POST", self.headers, self._inline_query, body)
        except Exception:
            log.exception("server API request failed")
            self._inline_write(INTERNAL_ERROR, False, access)
            return
        if not isinstance(answer, Deferred):
            self._inline_write(answer, keep_alive, access)
            return
        coro = answer.coro
        rest: Coroutine[Any, Any, AnyResponse] | _Resume = coro
        if answer.inline:
            try:
                first = coro.send(None)
            except StopIteration as stop:
                self._inline_write(stop.value, keep_alive, access)
                return
            except Exception:
                log.exception("server API request failed")
                self._inline_write(INTERNAL_ERROR, False, access)
                return
            rest = _Resume(coro, first)  # it suspended after all: a task drives the rest
        pending = Pending(keep_alive)
        self.cycle = pending
        task = self.loop.create_task(self._inline_finish(rest, pending, access))
        tasks = self.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _inline_finish(
        self,
        rest: Coroutine[Any, Any, AnyResponse] | _Resume,
        pending: Pending,
        access: tuple[str, str, str] | None = None,
    ) -> None:
        try:
            response: AnyResponse = await rest
        except Exception:
            log.exception("server API request failed")
            response, pending.keep_alive = INTERNAL_ERROR, False
        pending.response_complete = True
        if not pending.disconnected:
            self._inline_write(response, pending.keep_alive, access)

    def _inline_write(
        self, response: AnyResponse, keep_alive: bool, access: tuple[str, str, str] | None = None
    ) -> None:
        status, body, content_type = response[0], response[1], response[2]
        transport = self.transport
        if transport.is_closing():
            return
        if status == 500:
            keep_alive = False
        if access is not None:
            access_logger.info('%s - "%s %s HTTP/%s" %d', access[0], "POST", access[1], access[2], status)
        head = _head(self.server_state.default_headers, status, content_type, keep_alive, len(body))
        if len(response) > 3:
            extra = response[3]
            if extra:
                head = head[:-2] + extra + b"\r\n"
        transport.write(head + body)
        if not keep_alive:
            transport.close()
        self._response_complete()


_HEADS: dict[tuple[int, bytes | None, bool], tuple[bytes, bytes]] = {}
_HEADS_OF: list[object] = [None]
"""Response heads around their content-length, per (status, content type, keep-alive), for the
``default_headers`` list they were built from (the server replaces it when the date changes)."""


def _head(
    default_headers: list[tuple[bytes, bytes]], status: int, ctype: bytes | None, keep: bool, n: int
) -> bytes:
    """The status line and headers of an inline response with an ``n``-byte body: the server's
    default headers, ``content-length``, ``content-type``, ``connection: close`` unless kept."""
    if _HEADS_OF[0] is not default_headers:
        _HEADS.clear()
        _HEADS_OF[0] = default_headers
    key = (status, ctype, keep)
    cached = _HEADS.get(key)
    if cached is None:
        parts = [STATUS_LINE[status]]
        for name, value in default_headers:
            parts += [name, b": ", value, b"\r\n"]
        parts.append(b"content-length: ")
        tail = [b"\r\n"]
        if ctype is not None:
            tail += [b"content-type: ", ctype, b"\r\n"]
        if not keep:
            tail.append(b"connection: close\r\n")
        tail.append(b"\r\n")
        cached = _HEADS[key] = (b"".join(parts), b"".join(tail))
    prefix, suffix = cached
    return b"%s%d%s" % (prefix, n, suffix)
