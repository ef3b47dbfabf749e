"""The event POST answered by the HTTP connection itself: ``POST /internal/v1/task-events`` without
an ASGI cycle, uvicorn's proxy-headers middleware, Starlette's error middleware or the
``EventFastPath`` ASGI callable (httpwire/inline.py's inline requests; the server binds it in
``status_api/server.py``).

:class:`EventInline` is an ``InlineHandler``. It takes a request only when nothing in the ASGI
stack could answer it differently; every other request goes to the ASGI app unchanged
(``accepts_head``):

* an ``Origin`` header: CORS decides (the full stack, as ``EventFastPath`` does);
* no declared ``Content-Length`` (a chunked body), or one above ``max_body_bytes``: the body bound
  of the ASGI path (a 413 before the body, a cut while reading, ``Connection: close``);
* ``X-Forwarded-For`` / ``X-Forwarded-Proto`` / ``Forwarded``: uvicorn's proxy-headers middleware
  rewrites the client the access log names;
* ``Expect: 100-continue``, an upgrade, a percent-encoded path, a pipelined request behind an
  unfinished response: httpwire/inline.py never takes those.

What a taken request gets is what ``EventFastPath`` gives it: the same answer function
(``status_api.http.event_answer``, traced when ``opentelemetry.enabled``: auth, rate limit, JSON
input bounds, the ingest, error bodies with their codes), the same request metrics (count by route
and status, duration), ``Vary: Origin`` when CORS is on, the access log line on ``uvicorn.access``
(written by httpwire), and an unexpected exception logged and answered 500.
``answered`` counts the requests answered here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from httpwire.inline import AnyResponse, Deferred
from status_api.http import JSON_TYPE, Api, event_answer, traced_event_answer
from status_api.metrics import StatusMetrics

log = logging.getLogger("status_api.http")

PATH = "/internal/v1/task-events"
_JSON = JSON_TYPE.encode()
_TEXT = b"text/plain; charset=utf-8"
_PROXY_HEADERS = frozenset((b"x-forwarded-for", b"x-forwarded-proto", b"forwarded"))


class EventInline:
    """``InlineHandler`` of the event POST (module docstring)."""

    access_log = True
    """httpwire writes the access log line of each inline answer (when uvicorn's is on)."""

    def __init__(self, api: Api, metrics: StatusMetrics, *, max_body_bytes: int, cors_on: bool) -> None:
        self.api = api
        self.metrics = metrics
        self.limit = max_body_bytes
        self.vary = b"vary: Origin\r\n" if cors_on else b""
        self.answered = 0
        """Requests answered inline (tests prove the event POST does not fall back)."""
        self._requests: dict[int, Any] = {}  # status -> its counter child (labels() once each)
        self._duration = metrics.duration.labels(PATH)
        self._event_answer = traced_event_answer if api.tracing.enabled else event_answer

    def route(self, path: str) -> str | None:
        return "event" if path == PATH else None

    def accepts_head(self, method: str, headers: list[tuple[bytes, bytes]]) -> bool:
        declared = None
        for name, value in headers:
            if name == b"origin" or name in _PROXY_HEADERS or name == b"transfer-encoding":
                return False
            if name == b"content-length":
                declared = value
        return declared is not None and declared.isdigit() and int(declared) <= self.limit

    def respond_inline(
        self, method: str, http_method: str, headers: list[tuple[bytes, bytes]], query: bytes, body: bytes
    ) -> AnyResponse | Deferred:
        return Deferred(self._respond(headers, body), False)

    async def _respond(self, raw_headers: list[tuple[bytes, bytes]], body: bytes) -> AnyResponse:
        started = time.perf_counter()
        headers: dict[str, str] = {}
        for k, v in raw_headers:
            headers[k.decode("latin-1")] = v.decode("latin-1")

        async def read_body() -> bytes:
            return body

        try:
            status, out = await self._event_answer(self.api, headers, read_body, self.metrics)
        except Exception:
            log.exception("event route failed")
            status, out = 500, b"Internal Server Error"
        self.answered += 1
        counter = self._requests.get(status)
        if counter is None:
            counter = self._requests[status] = self.metrics.requests.labels(PATH, str(status))
        counter.inc()
        self._duration.observe(time.perf_counter() - started)
        ctype = _TEXT if status == 500 else _JSON if out else None
        return status, out, ctype, self.vary
