"""The request-body bound of every Status API route, as ASGI middleware.

A body is never read past ``max_body_bytes``: a declared ``Content-Length`` above the bound is
answered 413 before a byte of the body is read (and before ``100 Continue`` is sent), and a chunked
(or lying) body is cut the moment the bytes handed to the app pass the bound —
:class:`BodyTooLarge` is raised out of ``receive``, which the routes' error mapping turns into the
coded 413 (and this middleware does, for a route that lets it escape). Whenever a response starts
before its request body was read to the end, it carries ``Connection: close`` so the server stops
reading the rest instead of draining it for keep-alive.

Memory per request is therefore bounded by ``max_body_bytes`` plus one read chunk, on every route,
whether or not the route reads its body. The head bound and the request deadline live in
``status_api/server.py`` (the listener).
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from status_api.domain.errors import DomainError, ErrorKind


class BodyTooLarge(DomainError):
    """The request body passed the bound; maps to 413 ``BODY_TOO_LARGE``."""

    def __init__(self, limit: int) -> None:
        super().__init__(ErrorKind.TOO_LARGE, "BODY_TOO_LARGE", f"body exceeds {limit} bytes")


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large_body(limit: int) -> bytes:
    return (
        b'{"error":{"code":"BODY_TOO_LARGE","message":"body exceeds '
        + str(limit).encode()
        + b' bytes","retryable":false}}'
    )


class BodyLimitMiddleware:
    """Bound the body of every HTTP request to ``max_body_bytes`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _send_413(send, limit)
            return
        received = 0
        body_done = declared == 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    body_done = True
                if received > limit:
                    if started:
                        # The answer is already on its way from a route that did not want the body
                        # (a file response listening for a disconnect): read no more and let the
                        # answer finish; the connection closes after it (``Connection: close``).
                        await asyncio.Event().wait()
                    raise BodyTooLarge(limit)
            elif message["type"] == "http.disconnect":
                body_done = True
            return message

        async def closing_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if not body_done:
                    headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, limited_receive, closing_send)
        except BodyTooLarge:
            if started:
                return  # cut mid-answer by the bound: the server closes the connection after it
            await _send_413(send, limit)


async def _send_413(send: Send, limit: int) -> None:
    body = _too_large_body(limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
