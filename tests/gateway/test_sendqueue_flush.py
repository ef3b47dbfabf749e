"""The per-tick write path (gateway/connection/sendqueue.py ``Flusher`` and ``SendQueue``) in-process,
on a real event loop with recording transports: a fan-out wider than one chunk is written over
several loop callbacks (other callbacks run between them), a publication that arrives between chunks
joins the queues not yet written (still one write per connection, in order), connections that queued
the same pushes share one joined push, and a write that fails and re-enters the send queue writes
nothing twice. No timers: each step waits on a condition (tests/support)."""

from __future__ import annotations

import asyncio

from gateway.connection.sendqueue import Flusher, SendQueue
from gateway.hub import SharedPush
from gateway.protocol import codes
from tests.support import wait_until


class Recording:
    """A transport that records each write (a copy: the send queue reuses its lists)."""

    name = "websocket"
    emulation = False
    unidirectional = False

    def __init__(self, log: list[tuple[str, object]] | None = None, tag: str = "") -> None:
        self.writes: list[tuple[list[bytes], SharedPush | None]] = []
        self.log = log
        self.tag = tag
        self.fail = False

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        if self.fail:
            raise OSError("peer gone")
        self.writes.append((list(payloads), shared))
        if self.log is not None:
            self.log.append(("write", self.tag))

    def buffered_bytes(self) -> int:
        return 0

    def close(self, disconnect: codes.Disconnect) -> None:
        pass


def _send_queues(n: int, flusher: Flusher, log: list[tuple[str, object]] | None = None) -> list[SendQueue]:
    return [
        SendQueue(Recording(log, str(i)), flusher, limit_bytes=0, on_failure=lambda d: None) for i in range(n)
    ]


def _writes(box: SendQueue) -> list[tuple[list[bytes], SharedPush | None]]:
    transport = box.transport
    assert isinstance(transport, Recording)
    return transport.writes


async def test_a_wide_fan_out_is_written_in_chunks_with_the_loop_turning_between_them() -> None:
    log: list[tuple[str, object]] = []
    boxes = _send_queues(7, Flusher(chunk=3), log)
    push = SharedPush(b"p1")
    for box in boxes:
        box.put(push.payload, push)
    # Scheduled after the fan-out: runs after the first chunk, before the last one.
    asyncio.get_running_loop().call_soon(lambda: log.append(("other", None)))
    await wait_until(lambda: all(_writes(b) for b in boxes))
    order = [entry for entry in log]
    assert order.index(("other", None)) == 3, order  # after chunk 1 (3 writes), before chunk 2
    assert [tag for kind, tag in order if kind == "write"] == [str(i) for i in range(7)]


async def test_a_publication_between_chunks_joins_the_unwritten_queues_in_order() -> None:
    boxes = _send_queues(4, Flusher(chunk=2))
    first, second = SharedPush(b"p1"), SharedPush(b"p2")
    for box in boxes:
        box.put(first.payload, first)
    # Runs between the first chunk and the second: boxes 0 and 1 are written, 2 and 3 are not.
    asyncio.get_running_loop().call_soon(lambda: [box.put(second.payload, second) for box in boxes])
    await wait_until(lambda: all(sum(len(w[0]) for w in _writes(b)) == 2 for b in boxes))
    for box in boxes[:2]:
        assert [w[0] for w in _writes(box)] == [[b"p1"], [b"p2"]]
        assert [w[1] for w in _writes(box)] == [first, second]  # the shared pushes, unjoined
    joined = {id(_writes(box)[0][1]) for box in boxes[2:]}
    for box in boxes[2:]:
        ((payloads, shared),) = _writes(box)  # one write per connection
        assert payloads == [b"p1", b"p2"]
        assert shared is not None and shared.payload == b"p1\np2"
    assert len(joined) == 1  # one joined push for the connections of one chunk


async def test_queues_are_reused_and_a_failing_write_is_not_repeated_on_reentry() -> None:
    flusher = Flusher()
    failures: list[int] = []
    transport = Recording()

    def on_failure(d: codes.Disconnect) -> None:
        failures.append(d.code)
        box.flush()  # the connection flushes what it queued before closing (re-entry)
        box.close()

    box = SendQueue(transport, flusher, limit_bytes=0, on_failure=on_failure)
    for n in range(3):
        box.put(b"m%d" % n)
        box.flush()
    assert [w[0] for w in transport.writes] == [[b"m0"], [b"m1"], [b"m2"]]
    transport.fail = True
    box.put(b"lost")
    box.flush()
    assert failures == [codes.DISCONNECT_WRITE_ERROR.code]  # once: the re-entrant flush found nothing
    box.put(b"after close")
    box.flush()
    assert len(transport.writes) == 3


class Unsent(Recording):
    """A transport with unsent bytes."""

    def buffered_bytes(self) -> int:
        return 10


async def test_put_now_writes_an_idle_connection_at_once_and_queues_otherwise() -> None:
    """``put_now`` (a channel's only subscriber, gateway/hub.py): written in the call when nothing
    is queued and nothing is unsent; behind queued output it joins that tick's one write, in order;
    a transport with unsent bytes gets the per-tick write; the byte bound still answers 3008."""
    flusher = Flusher()
    failures: list[codes.Disconnect] = []
    box = SendQueue(Recording(), flusher, limit_bytes=100, on_failure=failures.append)
    a, b, c = (SharedPush(p) for p in (b"a", b"b", b"c"))
    box.put_now(b"a", a)
    assert _writes(box) == [([b"a"], a)]  # no loop turn needed
    box.put(b"b", b)
    box.put_now(b"c", c)
    assert len(_writes(box)) == 1
    await wait_until(lambda: len(_writes(box)) == 2)
    assert _writes(box)[1][0] == [b"b", b"c"]  # one write for the tick, in order

    busy = SendQueue(Unsent(), flusher, limit_bytes=100, on_failure=failures.append)
    busy.put_now(b"a", a)
    assert _writes(busy) == []
    await wait_until(lambda: len(_writes(busy)) == 1)

    box.put_now(b"x" * 200, SharedPush(b"x" * 200))
    assert failures == [codes.DISCONNECT_SLOW] and len(_writes(box)) == 2


async def test_put_now_reports_a_failing_write_once() -> None:
    failures: list[codes.Disconnect] = []
    transport = Recording()
    transport.fail = True
    box = SendQueue(transport, Flusher(), limit_bytes=0, on_failure=failures.append)
    box.put_now(b"a", SharedPush(b"a"))
    assert failures == [codes.DISCONNECT_WRITE_ERROR]
    box.close()
    box.put_now(b"b", SharedPush(b"b"))
    assert failures == [codes.DISCONNECT_WRITE_ERROR]
