"""The server API's HTTP adapter (PROTOCOL.md §6): a raw ASGI endpoint for ``POST
<http_api.handler_prefix>/<method>``, ``/batch`` and the legacy ``POST <prefix>``.

Raw ASGI on purpose: a publication is the gateway's most frequent request, and Starlette's
routing, middleware, ``Request`` and ``Response`` objects cost more per call than the publish
itself. ``ApiFirst`` (the app gateway/app.py builds) hands API paths straight to ``ApiEndpoint``
and everything else to Starlette. Every check of the Starlette version is kept: 405 for a method
other than POST, 401 with an empty body for a missing or wrong key (``X-API-Key``,
``Authorization: apikey <key>`` or ``?api_key=``, compared in constant time), 400 for a body cut
by a disconnect, 413 past the body bound, 400 for a body that is not JSON; coded errors come back
as HTTP 200 ``{"error": ...}`` or, in ``transport`` error mode, as the HTTP status of
``TRANSPORT_STATUS``. The JSON body is parsed once (orjson) and the response encoded once.

Executes nothing itself: each request is parsed into the typed requests of gateway/api/requests.py
(per method, per ``batch`` command, per legacy line) and run by ``ServerApi``
(gateway/api/executor.py), the executor every front door shares.

With ``opentelemetry.api`` each request that passed the key check is a server span named by its
path (``/api/publish``, as Centrifugo's otelhttp handler names it), a child of the request's
``traceparent`` header; an ``{"error": …}`` reply marks it as an error.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
from collections.abc import Coroutine, Iterable
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.applications import Starlette

from gateway.api.commands import Command, batch_command, command
from gateway.api.executor import TRANSPORT_STATUS, YIELD_EVERY, ServerApi, error_obj
from gateway.api.requests import ApiError, bad_request
from gateway.config.sections.endpoints import HttpApiSettings
from httpwire.inline import Deferred
from httpwire.tracing import TRACEPARENT

MAX_BODY_BYTES = 10 * 1024 * 1024
PAUSE_GC_ABOVE = 1024 * 1024
"""Bodies at least this large are parsed with the cyclic garbage collector paused (``_parse``)."""

Scope = dict[str, Any]
Response = tuple[int, bytes, bytes | None]
"""(status, body, content type or None)."""
Receive = Any
Send = Any

_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"
_BAD_REQUEST = (400, b"bad request", _TEXT)
_TOO_LARGE = (413, b"request entity too large", _TEXT)
_EMPTY_400 = (400, b"", None)
_TRACEPARENT = TRACEPARENT.encode()
_OVERSIZED = b"<over max_body>"
"""Returned by ``ApiEndpoint._body`` (by identity) for a body past the bound."""


class ApiEndpoint:
    """ASGI endpoint of the server API. Mounted by Starlette (``path_params["method"]``) or
    called by ``ApiFirst`` through ``handle`` with the method name ("" = legacy ``/api``)."""

    def __init__(self, api: ServerApi, settings: HttpApiSettings, max_body: int = MAX_BODY_BYTES) -> None:
        self.api = api
        self.settings = settings
        self.max_body = max_body
        self._key = settings.key.encode()
        self.prefix = settings.handler_prefix.rstrip("/")
        """The API's path ("" with ``handler_prefix: "/"``: then only Starlette routes it)."""
        self._methods_prefix = self.prefix + "/"
        self._tracing = api.tracing.enabled

    def route(self, path: str) -> str | None:
        """The method ``path`` names ("" = the legacy ``<prefix>``), None when it is not an API
        path served outside Starlette's routing (as Starlette's ``{method:str}``: one segment)."""
        if not self.prefix:
            return None
        if path.startswith(self._methods_prefix):
            method = path[len(self._methods_prefix) :]
            return method if method and "/" not in method else None
        return "" if path == self.prefix else None

    def respond_inline(
        self, method: str, http_method: str, headers: list[tuple[bytes, bytes]], query: bytes, body: bytes
    ) -> Response | Deferred:
        """The response to a request the HTTP protocol read itself (httpwire/inline.py):
        answered now (refusals), else deferred as the coroutine computing it, with whether it
        may run outside a task (``ServerApi.completes_inline``: a publish, or a sequential
        ``batch`` of publishes, on an engine that publishes without suspending)."""
        refused = self._refuse(http_method, headers, query)
        if refused is not None:
            return refused
        if len(body) > self.max_body:
            return _TOO_LARGE
        parsed = self._parse(method, body)
        if isinstance(parsed, tuple):
            return parsed
        api = self.api
        if method == "batch":
            args = _batch_args(parsed)
            if isinstance(args, bytes):
                return 200, args, _JSON
            commands, parallel = args
            try:
                api.check_batch(len(commands), "http")
            except ApiError as exc:
                return 200, orjson.dumps({"error": error_obj(exc)}), _JSON
            if self._tracing:
                work = self._replies(map(batch_command, commands), parallel)
                return Deferred(self._traced(method, headers, work), False)
            if parallel or len(commands) > YIELD_EVERY:
                return Deferred(self._replies(map(batch_command, commands), parallel), False)
            small = list(map(batch_command, commands))  # parsed once: its types decide
            return Deferred(self._replies(small, False), api.completes_inline_batch(small, parallel=False))
        work = self._execute(method, parsed, body, _transport_mode(self.settings, headers))
        if self._tracing:
            return Deferred(self._traced(method, headers, work), False)
        return Deferred(work, bool(method) and api.completes_inline(method))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.handle(scope, receive, send, scope.get("path_params", {}).get("method", ""))

    async def handle(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        status, body, content_type = await self.respond(scope, receive, method)
        headers = [(b"content-length", b"%d" % len(body))]
        if content_type is not None:
            headers.append((b"content-type", content_type))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def respond(self, scope: Scope, receive: Receive, method: str) -> Response:
        """(status, body, content type) of one ASGI request."""
        headers = scope["headers"]
        refused = self._refuse(scope["method"], headers, scope.get("query_string", b""))
        if refused is not None:
            return refused
        body = await self._body(receive)
        if body is None:  # gone mid-body (or cut by http_server.request_timeout)
            return _EMPTY_400
        if body is _OVERSIZED:
            return _TOO_LARGE
        parsed = self._parse(method, body)
        if isinstance(parsed, tuple):
            return parsed
        work = self._execute(method, parsed, body, _transport_mode(self.settings, headers))
        if self._tracing:
            return await self._traced(method, headers, work)
        return await work

    async def _traced(
        self, method: str, headers: list[tuple[bytes, bytes]], work: Coroutine[Any, Any, Response]
    ) -> Response:
        """``work`` as the request's server span (module docstring)."""
        tracing = self.api.tracing
        parent = next((v.decode("latin-1") for k, v in headers if k.lower() == _TRACEPARENT), "")
        path = f"{self._methods_prefix}{method}" if method else self.prefix
        attributes = {"http.request.method": "POST", "http.route": path, "rpc.method": method or "legacy"}
        with tracing.span(path, parent=parent, kind="server", attributes=attributes) as span:
            status, body, content_type = await work
            span.set_attribute("http.response.status_code", status)
            if status >= 400 or body.startswith(b'{"error"'):
                tracing.mark_error(span, body[:200].decode("utf-8", "replace") or f"HTTP {status}")
            return status, body, content_type

    def _refuse(self, http_method: str, headers: list[tuple[bytes, bytes]], query: bytes) -> Response | None:
        """405 for a method other than POST, 401 without the key; None: go on."""
        if http_method != "POST":
            return 405, b"", None
        if not self.settings.insecure and not self._authorized(headers, query):
            return 401, b"", None
        return None

    def _parse(self, method: str, body: bytes) -> Any:
        """The JSON params of a method's body (the legacy endpoint parses per line), or the
        response (a tuple) refusing it: 400 for a body that is not JSON, error 107 for a
        ``batch`` of more than ``http_api.max_batch_commands`` commands.

        A body of ``PAUSE_GC_ABOVE`` bytes or more is parsed with the cyclic collector paused
        (parsed JSON holds no cycles): the collections its allocations trigger cost twice the
        parse (10 MiB of tiny batch commands: 280 -> 100 ms), and a refused batch is freed
        before the collector runs again."""
        if not method:
            return None
        if len(body) < PAUSE_GC_ABOVE:
            try:
                return orjson.loads(body) if body.strip() else {}
            except orjson.JSONDecodeError:
                return _BAD_REQUEST
        paused = gc.isenabled()
        gc.disable()
        try:
            parsed = orjson.loads(body)
            if method == "batch" and isinstance(parsed, dict):
                commands = parsed.get("commands")
                if isinstance(commands, list):
                    try:
                        self.api.check_batch(len(commands), "http")
                    except ApiError as exc:
                        del commands, parsed  # freed by reference counts, no collection
                        return 200, orjson.dumps({"error": error_obj(exc)}), _JSON
            return parsed
        except orjson.JSONDecodeError:
            return _BAD_REQUEST
        finally:
            if paused:
                gc.enable()

    async def _execute(self, method: str, params: Any, body: bytes, transport_mode: bool) -> Response:
        if not method:
            try:
                return 200, await self._legacy(body), _JSON
            except _Refused:
                return _BAD_REQUEST
        if method == "batch":
            return 200, await self.batch_body(params), _JSON
        try:
            result = await self.api.execute(command(method, params))
        except ApiError as exc:
            return _error_response(exc, transport_mode)
        return 200, orjson.dumps({"result": result}), _JSON

    def _authorized(self, headers: list[tuple[bytes, bytes]], query: bytes) -> bool:
        api_key, authorization = _auth_headers(headers)
        if api_key and api_key.isascii():  # the same bytes as decoded and re-encoded below
            return bool(self._key) and hmac.compare_digest(api_key, self._key)
        supplied = api_key.decode("latin-1") if api_key else None
        if supplied is None and authorization is not None:
            scheme, _, value = authorization.decode("latin-1").partition(" ")
            if scheme.lower() == "apikey":
                supplied = value.strip()
        if supplied is None and query:
            supplied = dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True)).get("api_key")
        return supplied is not None and bool(self._key) and hmac.compare_digest(supplied.encode(), self._key)

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole request body (None: the client went away first). Past ``max_body`` the rest
        is read and dropped, so the answer is 413 whatever the body's size."""
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body: bytes = message.get("body", b"")
        if not message.get("more_body", False):
            return body if len(body) <= self.max_body else _OVERSIZED
        chunks = [body]
        size = len(body)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= self.max_body:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks) if size <= self.max_body else _OVERSIZED

    async def batch_body(self, params: Any) -> bytes:
        """The JSON body answering ``batch`` params (Centrifugo's ``commands`` / ``parallel``)."""
        args = _batch_args(params)
        if isinstance(args, bytes):
            return args
        commands, parallel = args
        try:
            replies = await self.api.batch(commands, parallel=parallel)
        except ApiError as exc:  # more commands than http_api.max_batch_commands
            return orjson.dumps({"error": error_obj(exc)})
        return orjson.dumps({"replies": replies})

    async def _replies(self, commands: Iterable[Command], parallel: bool) -> Response:
        """The response to a ``batch`` of parsed (or lazily parsed) commands within the bound."""
        replies = await self.api.execute_batch(commands, parallel=parallel, protocol="http")
        return 200, orjson.dumps({"replies": replies}), _JSON

    async def _legacy(self, body: bytes) -> bytes:
        """``POST /api`` with newline-delimited ``{"method","params"}`` commands (v5 legacy): at
        most ``http_api.max_batch_commands`` of them (else the whole body is refused, 400), the
        loop served every ``YIELD_EVERY``."""
        commands = [raw_line for raw_line in body.split(b"\n") if raw_line.strip()]
        if len(commands) > self.api.batch_limit("http"):
            raise _Refused
        alone = len(commands) == 1
        lines: list[bytes] = []
        for n, raw_line in enumerate(commands):
            if n and n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            try:
                cmd = orjson.loads(raw_line)
            except orjson.JSONDecodeError:
                raise _Refused from None
            if not isinstance(cmd, dict):
                raise _Refused
            method = cmd.get("method")
            try:
                if not isinstance(method, str):
                    raise bad_request("method")
                result = await self.api.execute(command(method, cmd.get("params") or {}), alone=alone)
                lines.append(orjson.dumps({"result": result}))
            except ApiError as exc:
                lines.append(orjson.dumps({"error": error_obj(exc)}))
        return b"\n".join(lines)


def _batch_args(params: Any) -> tuple[list[object], bool] | bytes:
    """``batch``'s (commands, parallel), or the error body answering params without them."""
    commands = params.get("commands") if isinstance(params, dict) else None
    parallel = params.get("parallel", False) if isinstance(params, dict) else False
    if not isinstance(commands, list):
        return orjson.dumps({"error": error_obj(bad_request("commands"))})
    if not isinstance(parallel, bool):
        return orjson.dumps({"error": error_obj(bad_request("parallel"))})
    return commands, parallel


def _error_response(exc: ApiError, transport_mode: bool) -> Response:
    """A method's coded error: HTTP 200 ``{"error"}``, or the mapped HTTP status in transport mode."""
    if transport_mode:
        return TRANSPORT_STATUS.get(exc.code, 400), orjson.dumps(error_obj(exc)), _JSON
    return 200, orjson.dumps({"error": error_obj(exc)}), _JSON


def _auth_headers(headers: list[tuple[bytes, bytes]]) -> tuple[bytes | None, bytes | None]:
    """The first ``x-api-key`` and ``authorization`` values."""
    api_key = authorization = None
    for name, value in headers:
        if name == b"x-api-key":
            if api_key is None:
                api_key = value
        elif name == b"authorization" and authorization is None:
            authorization = value
    return api_key, authorization


def _transport_mode(settings: HttpApiSettings, headers: list[tuple[bytes, bytes]]) -> bool:
    """Errors as HTTP statuses: ``http_api.error_mode`` or the first ``X-Centrifugo-Error-Mode``."""
    if settings.error_mode == "transport":
        return True
    for name, value in headers:
        if name == b"x-centrifugo-error-mode":
            return value == b"transport"
    return False


class _Refused(Exception):
    """A legacy body line that is not a JSON object: the whole request is answered 400."""


class ApiFirst(Starlette):
    """The gateway's ASGI app: the paths ``ApiEndpoint.route`` names go straight to the server
    API endpoint, everything else (and every other ASGI event) to Starlette's routes."""

    def __init__(self, *, api: ApiEndpoint | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        api = self.api
        if api is not None and scope["type"] == "http":
            method = api.route(scope["path"])
            if method is not None:
                await api.handle(scope, receive, send, method)
                return
        await super().__call__(scope, receive, send)
