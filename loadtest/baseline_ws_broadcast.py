"""Baseline for the fan-out benchmark: the idiomatic raw ``websockets.broadcast()`` server.

Same wire as the gateway for the load client: a subscriber connects to ``/connection/websocket``,
sends its Centrifugo connect + subscribe frame and gets canned replies; the publisher connects to
``/pub`` and sends each publication's data as one text frame; the server wraps it in the same
Centrifugo push envelope the gateway sends and calls ``websockets.broadcast(SUBS, push)`` once per
publication (one frame serialised per connection, no coalescing: the "Python ceiling" of
../shared/PERFORMANCE-ANCHORS.md). uvloop, no compression, no keepalive pings.

    python loadtest/baseline_ws_broadcast.py --port 9201
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import uvloop
from websockets.asyncio.server import ServerConnection, broadcast, serve

SUBS: set[ServerConnection] = set()
CHANNEL = "bench"
PUSH_HEAD = '{"push":{"channel":"' + CHANNEL + '","pub":{"data":'
PUSH_TAIL = "}}}"


async def handler(ws: ServerConnection) -> None:
    path = ws.request.path if ws.request is not None else ""
    if path.startswith("/pub"):
        async for msg in ws:
            text = msg if isinstance(msg, str) else msg.decode()
            broadcast(SUBS, PUSH_HEAD + text + PUSH_TAIL)
        return
    try:
        await asyncio.wait_for(ws.recv(), 30)  # the connect + subscribe frame
    except Exception:  # timeout or closed: not a subscriber
        return
    client_id = uuid.uuid4()
    await ws.send(
        f'{{"id":1,"connect":{{"client":"{client_id}","version":"baseline"}}}}\n{{"id":2,"subscribe":{{}}}}'
    )
    SUBS.add(ws)
    try:
        await ws.wait_closed()
    finally:
        SUBS.discard(ws)


async def main(port: int) -> None:
    async with serve(handler, "127.0.0.1", port, compression=None, ping_interval=None, backlog=8192):
        print("LISTENING", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=9201)
    uvloop.run(main(ap.parse_args().port))
