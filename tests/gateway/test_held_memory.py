"""What a backed-up connection's held output costs (seed §13.3, gateway/connection/sendqueue.py): each held
message keeps its payload and nothing else. A publication's SharedPush also references the
channel's previous publication (``prev``, for delta variants, already encoded when the message is
queued): holding the push kept that data alive too, doubling the memory of every message a
stalled reader is owed (terminal states and notices accumulate until it reads)."""

from __future__ import annotations

import gc
import tracemalloc

from gateway.connection.sendqueue import Flusher, SendQueue
from gateway.hub import SharedPush
from gateway.protocol import codes

PREV = 16_000
"""Bytes of the previous publication each push references."""


class StalledTransport:
    name = "websocket"
    emulation = False
    unidirectional = False

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        self.writes.append(list(payloads))

    def buffered_bytes(self) -> int:
        return 1 << 20  # the peer stopped reading: far past the hold bound

    def close(self, disconnect: codes.Disconnect) -> None:
        pass


async def test_a_held_message_keeps_its_payload_not_the_previous_publication() -> None:
    transport = StalledTransport()
    box = SendQueue(transport, Flusher(), limit_bytes=0, hold_bytes=1_000, on_failure=lambda d: None)
    count = 20
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(count):
            prev = (n, "epoch", bytes(PREV) + n.to_bytes(4, "big"))
            payload = b"terminal-%03d" % n
            box.put(payload, SharedPush(payload, "task_user:u1", "epoch", prev, None))  # never conflated
            del prev
        gc.collect()
        kept = (tracemalloc.get_traced_memory()[0] - before) // count
    finally:
        tracemalloc.stop()
    assert transport.writes == []  # all held
    assert kept < PREV // 4, f"{kept} bytes kept per held message of 12 bytes"
    box.close()
