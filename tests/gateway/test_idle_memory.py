"""What an idle connection keeps (docs/PERFORMANCE.md "Idle connections on one gateway process"):
100,000 of them on one process is the seed's model, so every kilobyte per connection is
100 MB. An idle connected client keeps no instance dict, no empty deques, and its WebSocket
transport keeps no parsed upgrade request beyond the header map proxies forward."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from websockets.http11 import Request

from gateway.transports.websocket import WebSocketEndpoint, protocol_class
from tests.gateway.recording import Harness

UPGRADE = (
    b"GET /connection/websocket HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101\r\n"
    b"Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n"
    b"Cache-Control: no-cache\r\nPragma: no-cache\r\n\r\n"
)


class SocketTransport(asyncio.Transport):
    """What the protocol writes to (the 101 response), no socket."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closing = True


async def test_an_idle_client_keeps_no_instance_dict_and_no_empty_deques() -> None:
    h = Harness()
    client, _ = await h.connected()
    assert not hasattr(client, "__dict__")
    assert not hasattr(client.commands, "__dict__")
    assert client.commands._inbox is None  # a deque only while a command waits
    assert type(client.session._held) is list


async def test_an_idle_connected_client_costs_under_9_5_kib_of_python_memory() -> None:
    # The driver, its session, subscriptions and send queue, connected and idle (a recording
    # transport: the WebSocket protocol's own share is measured below): 11.0 KiB with an
    # instance dict and two empty deques, 8.4 KiB without on CPython 3.11.
    h = Harness()
    await h.connected()  # first-use caches
    clients: list[Any] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            clients.append(await h.connected())
        gc.collect()
        per_client = (tracemalloc.get_traced_memory()[0] - before) / len(clients)
    finally:
        tracemalloc.stop()
    assert per_client < 9.5 * 1024, f"{per_client:.0f} bytes per idle connected client"


async def test_the_websocket_transport_keeps_no_parsed_upgrade_headers() -> None:
    h = Harness()
    endpoint = WebSocketEndpoint(
        handler_prefix="/connection/websocket",
        message_size_limit=65536,
        allowed_origins=(),
        admit=lambda: None,
        connect=h.factory.connect,
    )
    proto: Any = protocol_class(endpoint)()
    transport = SocketTransport()
    proto.connection_made(transport)
    proto.data_received(UPGRADE)
    assert transport.written[0].startswith(b"HTTP/1.1 101"), transport.written
    assert proto.client is not None
    # The header map that proxies forward is kept; websockets' parsed Request, which its
    # suspended parser frame holds for the connection's life, is emptied.
    assert proto.request_headers["user-agent"].startswith("Mozilla")
    gc.collect()
    kept = [r for r in gc.get_objects() if isinstance(r, Request) and r.path == "/connection/websocket"]
    assert kept and all(len(r.headers) == 0 for r in kept)
    proto.connection_lost(None)


async def test_an_occupied_channel_keeps_no_finished_broker_subscription_task() -> None:
    # Every connection of the seed's model occupies a channel of its own (a personal or a task
    # channel): the node's record that the broker delivers the channel here must not be the
    # finished asyncio task that subscribed it (~650 bytes each on CPython 3.11, with its
    # coroutine and context), but a shared marker: 1,405 bytes per channel with the task, 750
    # without (the hub's entries, and CPython's bounded free list of contexts).
    h = Harness()
    await h.subscribed("warm")  # first-use caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            await h.node.add_subscriber(f"ch{n}", (await h.connected())[0])
        connected_only = tracemalloc.get_traced_memory()[0]
        clients = [(await h.connected())[0] for _ in range(200)]
        gc.collect()
        per_client = (tracemalloc.get_traced_memory()[0] - connected_only) / len(clients)
        gc.collect()
        per_channel = (connected_only - before) / 200 - per_client
    finally:
        tracemalloc.stop()
    assert per_channel < 1000, f"{per_channel:.0f} bytes per occupied channel"
