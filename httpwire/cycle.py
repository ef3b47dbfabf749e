"""One HTTP request handed to the ASGI app: its ``receive`` and ``send`` (ASGI 3, HTTP spec 2.3).

A ``Cycle`` is built by the connection (httpwire/protocol.py) at the end of a request head
and run as a task the server owns. It writes the response as the app sends it: the status line,
the server's default headers (``date``), the app's headers (names and values checked), then the
body with ``content-length`` or chunked transfer encoding (chunked when the app gives no length,
except for HEAD, 204 and 304). The head goes out with the first body message when the app sends
that in the same step of its task (one socket write for a whole small response instead of two);
otherwise (a stream that waits before its first chunk) it is written as soon as the app's task
yields to the event loop, so a client never waits for the head longer than that. A request that
does not keep its connection alive (HTTP/1.0, ``connection: close``, or a server shutting down)
ends with the connection closed. An exception in the app before its response started is a 500
with ``connection: close``; after it started, the head is written and the connection closed.
``Expect: 100-continue`` is answered when the app first reads the body.

Imports nothing from the gateway.
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("taskcast.http")
access_logger = logging.getLogger("uvicorn.access")

HEADER_NAME_RE = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
HEADER_VALUE_RE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
HIGH_WATER = 65536
"""Body bytes buffered for the app before the connection stops reading."""


def _status_line(code: int) -> bytes:
    try:
        phrase = http.HTTPStatus(code).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (code, phrase)


STATUS_LINE = {code: _status_line(code) for code in range(100, 600)}
"""``HTTP/1.1 <code> <phrase>\\r\\n`` for every status code."""

_500_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]


class Writable:
    """Whether the transport takes more output (asyncio's ``pause_writing``/``resume_writing``)."""

    __slots__ = ("_event", "paused")

    def __init__(self) -> None:
        self.paused = False
        self._event = asyncio.Event()
        self._event.set()

    def pause(self) -> None:
        self.paused = True
        self._event.clear()

    def resume(self) -> None:
        self.paused = False
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


class Cycle:
    """The ASGI side of one request: ``run(app)`` calls the app with this request's ``scope``,
    ``receive`` and ``send``. The connection feeds ``body`` and sets ``more_body``/``disconnected``
    and ``message_event``; ``on_response`` is called once, when the response is complete."""

    __slots__ = (
        "access_log",
        "body",
        "chunked",
        "default_headers",
        "disconnected",
        "expect_100",
        "head",
        "keep_alive",
        "left",
        "message_event",
        "more_body",
        "on_response",
        "response_complete",
        "response_started",
        "resume_reading",
        "scope",
        "transport",
        "writable",
    )

    def __init__(
        self,
        scope: dict[str, Any],
        transport: asyncio.Transport,
        writable: Writable,
        default_headers: list[tuple[bytes, bytes]],
        *,
        keep_alive: bool,
        expect_100: bool,
        on_response: Callable[[], None],
        resume_reading: Callable[[], None],
    ) -> None:
        self.scope = scope
        self.transport = transport
        self.writable = writable
        self.default_headers = default_headers
        self.keep_alive = keep_alive
        self.expect_100 = expect_100
        self.on_response = on_response
        self.resume_reading = resume_reading
        self.message_event = asyncio.Event()
        self.disconnected = False
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked: bool | None = None
        self.head = b""
        """The response head, while it waits for the first body message (``_start``)."""
        self.left = 0
        """Body bytes still due under the response's ``content-length``."""
        self.access_log = False
        """Log each response on ``uvicorn.access`` (uvicorn's access log format)."""

    async def run(self, app: Any) -> None:
        try:
            result = await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError as exc:
            # The server's graceful-shutdown timeout cancelled a request still running: expected,
            # one line and no traceback; the connection closes without a response.
            logger.warning(
                "%s %s cancelled: %s",
                self.scope["method"],
                self.scope["path"],
                exc.args[0] if exc.args else "",
            )
            self.transport.close()
            raise
        except BaseException as exc:
            logger.error("Exception in ASGI application", exc_info=exc)
            if not self.response_started:
                await self._send_500()
            else:
                self._flush_head()
                self.transport.close()
        else:
            if result is not None:
                logger.error("ASGI callable returned %r instead of None", result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                logger.error("ASGI callable returned without starting a response")
                await self._send_500()
            elif not self.response_complete and not self.disconnected:
                logger.error("ASGI callable returned without completing its response")
                self._flush_head()
                self.transport.close()
        finally:
            # Both are bound methods of the connection, which references this cycle: dropped, the
            # two free each other by reference counting once closed (httpwire/cycles.py).
            self.on_response = _nothing
            self.resume_reading = _nothing

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": _500_HEADERS})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    async def send(self, message: dict[str, Any]) -> None:
        if self.writable.paused and not self.disconnected:
            await self.writable.wait()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got {kind!r}.")
            self._start(message)
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got {kind!r}.")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"Unexpected ASGI message {kind!r} after the response completed.")

    def _start(self, message: dict[str, Any]) -> None:
        self.response_started = True
        self.expect_100 = False
        status = message["status"]
        if self.access_log:
            scope = self.scope
            client = scope["client"]
            query = scope["query_string"]
            access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                f"{client[0]}:{client[1]}" if client else "",
                scope["method"],
                urllib.parse.quote(scope["path"]) + ("?" + query.decode("ascii") if query else ""),
                scope["http_version"],
                status,
            )
        content = [STATUS_LINE[status]]
        close_sent = False
        for headers in (self.default_headers, message.get("headers", ())):
            for raw_name, value in headers:
                if HEADER_NAME_RE.search(raw_name):
                    raise RuntimeError("Invalid HTTP header name.")
                if HEADER_VALUE_RE.search(value):
                    raise RuntimeError("Invalid HTTP header value.")
                name = raw_name.lower()
                if name == b"content-length" and self.chunked is None:
                    self.left = int(value.decode())
                    self.chunked = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.left = 0
                    self.chunked = True
                elif name == b"connection" and b"close" in [t.strip().lower() for t in value.split(b",")]:
                    self.keep_alive = False
                    close_sent = True
                content += [name, b": ", value, b"\r\n"]
        if not self.keep_alive and not close_sent:
            content.append(b"connection: close\r\n")
        if self.chunked is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            self.chunked = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.head = b"".join(content)
        asyncio.get_running_loop().call_soon(self._flush_head)

    def _flush_head(self) -> None:
        """Write the head if no body message took it along (scheduled by ``_start``)."""
        head = self.head
        if head:
            self.head = b""
            if not self.disconnected:
                self.transport.write(head)

    def _body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            self.left = 0
            out = b""
        elif self.chunked:
            out = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more_body:
                out += b"0\r\n\r\n"
        else:
            if len(body) > self.left:
                raise RuntimeError("Response content longer than Content-Length")
            self.left -= len(body)
            out = body
        if self.head:
            out, self.head = self.head + out, b""
        if out:
            self.transport.write(out)
        if not more_body:
            if self.left != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    async def receive(self) -> dict[str, Any]:
        if self.expect_100 and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.expect_100 = False
        if not self.disconnected and not self.response_complete:
            self.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message


def _nothing() -> None:
    pass
