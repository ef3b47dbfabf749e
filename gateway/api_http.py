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

Executes nothing itself: every method goes to ``ServerApi`` (gateway/api.py).
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.applications import Starlette

from gateway.api import TRANSPORT_STATUS, ServerApi, error_obj
from gateway.api_requests import ApiError, bad_request
from gateway.config_schema import HttpApiSettings

MAX_BODY_BYTES = 10 * 1024 * 1024

Scope = dict[str, Any]
Receive = Any
Send = Any

_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"
_BAD_REQUEST = (400, b"bad request", _TEXT)
_TOO_LARGE = (413, b"request entity too large", _TEXT)
_EMPTY_400 = (400, b"", None)
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.handle(scope, receive, send, scope.get("path_params", {}).get("method", ""))

    async def handle(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        status, body, content_type = await self.respond(scope, receive, method)
        headers = [(b"content-length", b"%d" % len(body))]
        if content_type is not None:
            headers.append((b"content-type", content_type))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def respond(self, scope: Scope, receive: Receive, method: str) -> tuple[int, bytes, bytes | None]:
        """(status, body, content type) of one request."""
        if scope["method"] != "POST":
            return 405, b"", None
        api_key, authorization, error_mode = _headers(scope["headers"])
        if not self.settings.insecure and not self._authorized(scope, api_key, authorization):
            return 401, b"", None
        body = await self._body(receive)
        if body is None:  # gone mid-body (or cut by http_server.request_timeout)
            return _EMPTY_400
        if body is _OVERSIZED:
            return _TOO_LARGE
        if not method:
            try:
                return 200, await self._legacy(body), _JSON
            except _Refused:
                return _BAD_REQUEST
        transport_mode = self.settings.error_mode == "transport" or error_mode == b"transport"
        try:
            params = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError:
            return _BAD_REQUEST
        if method == "batch":
            return 200, await self.batch_body(params), _JSON
        try:
            result = await self.api.call(method, params)
        except ApiError as exc:
            if transport_mode:
                return TRANSPORT_STATUS.get(exc.code, 400), orjson.dumps(error_obj(exc)), _JSON
            return 200, orjson.dumps({"error": error_obj(exc)}), _JSON
        return 200, orjson.dumps({"result": result}), _JSON

    def _authorized(self, scope: Scope, api_key: bytes | None, authorization: bytes | None) -> bool:
        supplied = api_key.decode("latin-1") if api_key else None
        if supplied is None and authorization is not None:
            scheme, _, value = authorization.decode("latin-1").partition(" ")
            if scheme.lower() == "apikey":
                supplied = value.strip()
        if supplied is None and scope.get("query_string"):
            query = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
            supplied = query.get("api_key")
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
        commands = params.get("commands") if isinstance(params, dict) else None
        parallel = params.get("parallel", False) if isinstance(params, dict) else False
        if not isinstance(commands, list):
            return orjson.dumps({"error": error_obj(bad_request("commands"))})
        if not isinstance(parallel, bool):
            return orjson.dumps({"error": error_obj(bad_request("parallel"))})
        return orjson.dumps({"replies": await self.api.batch(commands, parallel=parallel)})

    async def _legacy(self, body: bytes) -> bytes:
        """``POST /api`` with newline-delimited ``{"method","params"}`` commands (v5 legacy)."""
        lines: list[bytes] = []
        for raw_line in body.split(b"\n"):
            if not raw_line.strip():
                continue
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
                result = await self.api.call(method, cmd.get("params") or {})
                lines.append(orjson.dumps({"result": result}))
            except ApiError as exc:
                lines.append(orjson.dumps({"error": error_obj(exc)}))
        return b"\n".join(lines)


def _headers(headers: list[tuple[bytes, bytes]]) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The first ``x-api-key``, ``authorization`` and ``x-centrifugo-error-mode`` values."""
    api_key = authorization = error_mode = None
    for name, value in headers:
        if name == b"x-api-key":
            if api_key is None:
                api_key = value
        elif name == b"authorization":
            if authorization is None:
                authorization = value
        elif name == b"x-centrifugo-error-mode" and error_mode is None:
            error_mode = value
    return api_key, authorization, error_mode


class _Refused(Exception):
    """A legacy body line that is not a JSON object: the whole request is answered 400."""


class ApiFirst(Starlette):
    """The gateway's ASGI app: requests for ``<prefix>/<method>`` and ``<prefix>`` go straight to
    the server API endpoint, everything else (and every other ASGI event) to Starlette's routes.
    With an empty prefix (``handler_prefix: "/"``) the API is left to Starlette's routes."""

    def __init__(self, *, api: ApiEndpoint | None, api_prefix: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._api = api if api_prefix else None
        self._api_root = api_prefix
        self._api_methods = api_prefix + "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        api = self._api
        if api is not None and scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith(self._api_methods):
                method = path[len(self._api_methods) :]
                if method and "/" not in method:
                    await api.handle(scope, receive, send, method)
                    return
            elif path == self._api_root:
                await api.handle(scope, receive, send, "")
                return
        await super().__call__(scope, receive, send)
