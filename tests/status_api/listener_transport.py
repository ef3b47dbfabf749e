"""An httpx transport that serves a Status API app on a real listener of this event loop: the
Status API's HTTP protocol (status_api/server.py, with the app's inline event handler) on a
loopback socket, started on the first request, stopped by ``aclose``.

The harness uses it instead of ``httpx.ASGITransport`` when ``TASKCAST_TEST_STATUS_LISTENER=1``,
so the same suites run through the connection's inline event path (status_api/event_inline.py)
as they run through the ASGI app.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx
import uvicorn

from status_api.server import ListenerLimits, protocol_class

ENV = "TASKCAST_TEST_STATUS_LISTENER"


def wanted() -> bool:
    """The harness serves its app on a listener (``TASKCAST_TEST_STATUS_LISTENER=1``)."""
    return os.environ.get(ENV, "") not in ("", "0")


class ListenerTransport(httpx.AsyncBaseTransport):
    """Requests to any host go to ``app`` served on 127.0.0.1 (module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.server: uvicorn.Server | None = None
        self.port = 0
        self.inner = httpx.AsyncHTTPTransport()

    async def _start(self) -> None:
        inline = getattr(self.app.state, "event_inline", None)
        config = uvicorn.Config(
            self.app,
            http=protocol_class(ListenerLimits(), inline),
            ws="none",
            lifespan="off",
            log_config=None,
            server_header=False,
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        await server.startup(sockets=[sock])
        await server.on_tick(0)  # the default headers (date) as the main loop sets them
        self.server = server

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.server is None:
            await self._start()
        request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.server is not None:
            self.server.should_exit = True
            await self.server.shutdown(sockets=[self._sock])
            self.server = None
