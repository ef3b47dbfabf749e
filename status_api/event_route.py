"""The event entry without the framework: ``POST /internal/v1/task-events`` answered by a plain
ASGI callable in front of the Starlette app.

The hot path of the Status API is one small POST per worker event. Through Starlette it crosses
five middlewares (server errors, CORS, metrics, the body bound, exceptions), the router's match of
every route, a ``Request`` and a ``Response`` object: a measurable share of a worker's CPU per
event. :class:`EventFastPath` answers that one route itself and keeps everything they add:

* the body bound of :class:`~status_api.body_limit.BodyLimitMiddleware` (a declared length above
  ``max_body_bytes`` is answered 413 before the body is read; a body passing the bound while read
  is cut there; ``Connection: close`` whenever the answer starts before the body was read whole);
* the metrics of :class:`~status_api.metrics.MetricsMiddleware` (request count by route template
  and status, duration);
* CORS: a request carrying an ``Origin`` header goes through the full stack (the CORS middleware
  decides); without one, the answer carries ``Vary: Origin`` when CORS is on, as there;
* the route's own error mapping (``status_api.http.event_answer``, shared with the Starlette
  route); an unexpected exception is logged and answered 500, as Starlette's error middleware does.

Every other request, and this path with another method, goes to the wrapped app unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from status_api.body_limit import BodyTooLarge
from status_api.http import JSON_TYPE, Api, error_body, event_answer, traced_event_answer
from status_api.metrics import StatusMetrics

log = logging.getLogger("status_api.http")

PATH = "/internal/v1/task-events"
_JSON = JSON_TYPE.encode()


class EventFastPath:
    """ASGI: answers ``POST`` :data:`PATH` itself (module docstring), the rest goes to ``app``."""

    def __init__(
        self, app: ASGIApp, api: Api, metrics: StatusMetrics, *, max_body_bytes: int, cors_on: bool
    ) -> None:
        self.app = app
        self.api = api
        self.metrics = metrics
        self.limit = max_body_bytes
        self.cors_on = cors_on
        self._requests: dict[int, Any] = {}  # status -> its counter child (labels() once each)
        self._duration = metrics.duration.labels(PATH)
        #: Chosen once: with tracing off the route pays nothing for it.
        self._event_answer = traced_event_answer if api.tracing.enabled else event_answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        if "origin" in headers:
            await self.app(scope, receive, send)  # CORS decides: the full stack
            return
        started = time.perf_counter()
        status = 500
        try:
            status = await self._answer(headers, receive, send)
        finally:
            counter = self._requests.get(status)
            if counter is None:
                counter = self._requests[status] = self.metrics.requests.labels(PATH, str(status))
            counter.inc()
            self._duration.observe(time.perf_counter() - started)

    async def _answer(self, headers: dict[str, str], receive: Receive, send: Send) -> int:
        limit = self.limit
        declared = headers.get("content-length")
        body_done = declared == "0"
        if declared is not None and declared.isdigit() and int(declared) > limit:
            status, body = 413, error_body(BodyTooLarge(limit))
        else:
            chunks: list[bytes] = []
            size = 0

            async def read_body() -> bytes:
                nonlocal body_done, size
                while not body_done:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        body_done = True
                        raise ClientDisconnect()
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if not message.get("more_body", False):
                        body_done = True
                    if size > limit:
                        raise BodyTooLarge(limit)
                    chunks.append(chunk)
                return b"".join(chunks)

            try:
                status, body = await self._event_answer(self.api, headers, read_body, self.metrics)
            except Exception:
                log.exception("event route failed")
                status, body = 500, b"Internal Server Error"
        out = [(b"content-length", str(len(body)).encode())]
        if status != 500 and body:
            out.append((b"content-type", _JSON))
        elif status == 500:
            out.append((b"content-type", b"text/plain; charset=utf-8"))
        if self.cors_on:
            out.append((b"vary", b"Origin"))
        if not body_done:
            out.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": body})
        return status
