"""A gateway served in the test's own process: its uvicorn server (the production HTTP protocol,
``gateway.http.server.build_server``) on a loopback port, for tests that need the node's objects
and real sockets at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gateway.config.schema import Settings
from gateway.http.server import Served, build_server
from tests.support.waiting import scaled


@contextlib.asynccontextmanager
async def serving(settings: Settings, served: Served) -> AsyncIterator[int]:
    """Serve ``served`` with ``settings`` on a free loopback port of this process; yields the port
    once the server listens, and stops it (waiting for its shutdown) on exit."""
    server = build_server(settings, served, host="127.0.0.1", port=0, handle_signals=False)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(scaled(10)):
            while not server.started:
                assert not task.done(), "server did not start"
                await asyncio.sleep(0.01)  # polling a flag uvicorn sets, not timing
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task
