"""A client message leaves no container of its own alive on its connection.

What a message makes and keeps until the next message of the same connection (a pong every ping
interval) outlives the young collections and is scanned by every full collection of a node
holding many connections (gateway/gc_pauses.py). A real gateway (memory engine) served in this
process; connections through real sockets (a blocking socket on a worker thread, as in
test_connection_cycles.py); each sends a Centrifugo pong (``{}``) and a WebSocket ping, and reads
the WebSocket pong: the objects alive afterwards that were not before are counted.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import socket

import pytest

from tests.gateway.test_connection_cycles import SECRET, Gateway, _frame, _open, _read_frame, gateway
from tests.support.procs import mint_token

__all__ = ["gateway"]  # the fixture, shared with test_connection_cycles.py

pytestmark = pytest.mark.timeout(120)

CONNECTIONS = 20


def _exchange(socks: list[socket.socket]) -> None:
    """Every connection: a Centrifugo pong, then a WebSocket ping answered by its pong."""
    for sock in socks:
        sock.sendall(_frame(b"{}") + _frame(b"p", opcode=9))
    for sock in socks:
        while _read_frame(sock)[0] != 10:
            pass


async def test_a_client_message_leaves_nothing_alive(gateway: Gateway) -> None:
    socks = []
    try:
        for n in range(CONNECTIONS):
            token = mint_token(SECRET, f"u-{n}", channels=[f"ch-{n}"])
            socks.append(await asyncio.to_thread(_open, gateway.port, "ws", token))
        await asyncio.to_thread(_exchange, socks)  # first messages: lazy state settles
        gc.collect()
        # Held, so that no object freed meanwhile lends its address (its id) to a new one.
        before = gc.get_objects()
        ids = {id(o) for o in before}
        await asyncio.to_thread(_exchange, socks)
        gc.collect()
        new = collections.Counter(
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.get_objects()
            if id(o) not in ids and o is not before
        )
        # A few: the loop and the worker thread hold objects of their own now and then, never
        # one per connection.
        assert sum(new.values()) < CONNECTIONS, f"made by {CONNECTIONS} messages: {new.most_common(8)}"
    finally:
        for sock in socks:
            sock.close()
