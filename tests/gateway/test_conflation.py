"""Overload that keeps the truth (seed §13.3): the pure conflation rule and held queue
(gateway/conflation.py), and the per-connection SendQueue that holds output while its transport is
backed up (gateway/connection/sendqueue.py) — driven in-process with a transport whose unsent bytes the test
sets, on a real event loop (no timers waited on: ``writable()`` is the drain signal)."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from gateway.conflation import HeldQueue, conflation_key
from gateway.connection.sendqueue import Flusher, SendQueue
from gateway.hub import SharedPush
from gateway.protocol import codes
from tests.support import wait_until

# --- the rule ---------------------------------------------------------------------------------


def test_conflation_key_table() -> None:
    cases = [
        # (tags, namespace tag, conflatable?)
        ({"task": "t1"}, "task", True),
        ({"task": "t1", "committed_at_ms": "1"}, "task", True),
        ({"task": "t1", "conflate": "never"}, "task", False),  # terminal, notice, new task, attempt
        ({"task": ""}, "task", False),
        ({"other": "x"}, "task", False),
        ({"task": "t1"}, "", False),  # the namespace does not conflate
        (None, "task", False),
        ({}, "task", False),
    ]
    for tags, tag, conflatable in cases:
        assert (conflation_key("ns:a", tags, tag) is not None) is conflatable, (tags, tag)


def test_the_same_task_on_two_channels_has_two_keys() -> None:
    assert conflation_key("task_user:a", {"task": "t"}, "task") != conflation_key(
        "task_detail:t", {"task": "t"}, "task"
    )


# --- the held queue ---------------------------------------------------------------------------


def _push(text: str, key: str | None) -> tuple[bytes, SharedPush, str | None]:
    payload = text.encode()
    return payload, SharedPush(payload, conflation=key), key


def test_newest_per_key_is_kept_and_everything_else_in_order() -> None:
    q = HeldQueue()
    for text, key in [("a1", "a"), ("b1", "b"), ("n1", None), ("a2", "a"), ("r", None), ("a3", "a")]:
        payload, shared, k = _push(text, key)
        q.push(payload, shared, k)
    payloads, _ = q.take()
    assert payloads == [b"b1", b"n1", b"r", b"a3"]
    assert q.conflated == 2
    assert len(q) == 0 and q.bytes == 0


Message = tuple[int, str | None]  # (sequence number, key or None = never conflatable)


@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=300))
def test_held_queue_keeps_every_unkeyed_message_and_the_last_of_each_key(ops: list[tuple[int, bool]]) -> None:
    q = HeldQueue()
    sent: list[Message] = []
    for seq, (k, keyed) in enumerate(ops):
        key = f"k{k}" if keyed else None
        sent.append((seq, key))
        q.push(str(seq).encode(), None, key)
    payloads, _ = q.take()
    got = [int(p) for p in payloads]
    last = {key: seq for seq, key in sent if key is not None}
    expected = [seq for seq, key in sent if key is None or last[key] == seq]
    assert got == expected  # order kept, unkeyed never dropped, newest of each key present
    assert q.conflated == len(sent) - len(expected)


def test_a_long_replacement_stream_keeps_the_queue_small() -> None:
    q = HeldQueue()
    for n in range(100_000):
        q.push(b"x" * 10, None, f"k{n % 3}")
    assert len(q) == 3
    assert len(q._items) < 200  # holes are compacted away
    assert q.bytes == 3 * 11


# --- the send queue -------------------------------------------------------------------------------


class SlowTransport:
    """A transport whose unsent bytes the test controls (a peer that stopped reading)."""

    name = "websocket"
    emulation = False
    unidirectional = False

    def __init__(self) -> None:
        self.unsent = 0
        self.writes: list[list[bytes]] = []
        self.closed: codes.Disconnect | None = None

    def write(self, payloads: list[bytes], shared: SharedPush | None) -> None:
        self.writes.append(list(payloads))
        self.unsent += sum(len(p) + 1 for p in payloads)

    def buffered_bytes(self) -> int:
        return self.unsent

    def close(self, disconnect: codes.Disconnect) -> None:
        self.closed = disconnect

    def received(self) -> list[bytes]:
        return [p for w in self.writes for p in w]


async def _tick() -> None:
    await asyncio.sleep(0)  # lets the flusher's end-of-tick callback run (call_soon)
    await asyncio.sleep(0)


def _send_queue(
    transport: SlowTransport, *, limit: int = 10_000, hold: int = 1_000
) -> tuple[SendQueue, list[int]]:
    failures: list[int] = []
    box = SendQueue(
        transport, Flusher(), limit_bytes=limit, hold_bytes=hold, on_failure=lambda d: failures.append(d.code)
    )
    return box, failures


async def test_a_backed_up_connection_gets_the_newest_state_of_each_task_and_every_terminal_one() -> None:
    transport = SlowTransport()
    box, failures = _send_queue(transport)
    transport.unsent = 5_000  # the peer stopped reading: past hold_bytes
    for n in range(200):
        box.put(*_push(f"progress-a-{n}", "a")[:2])
        box.put(*_push(f"progress-b-{n}", "b")[:2])
    box.put(*_push("terminal-a", None)[:2])
    box.put(*_push("notice-1", None)[:2])
    box.put(b"reply")
    await _tick()
    assert transport.writes == []  # held, not written into the backed-up socket
    assert failures == []
    transport.unsent = 0  # the peer reads again
    box.writable()
    # One write: the newest progress of each task, then every terminal state, notice, reply.
    assert transport.writes == [[b"progress-a-199", b"progress-b-199", b"terminal-a", b"notice-1", b"reply"]]


async def test_a_queue_of_never_conflatable_messages_past_the_hard_bound_is_3008() -> None:
    transport = SlowTransport()
    box, failures = _send_queue(transport, limit=10_000, hold=1_000)
    transport.unsent = 5_000
    for n in range(1_000):
        box.put(*_push(f"notice-{n:04}", None)[:2])
        if failures:
            break
    assert failures == [codes.DISCONNECT_SLOW.code]
    box.flush()
    assert transport.writes == []  # the held queue is dropped, not pushed into the dead socket


async def test_conflatable_output_stays_under_the_hard_bound_forever() -> None:
    transport = SlowTransport()
    flusher = Flusher()
    box = SendQueue(transport, flusher, limit_bytes=10_000, hold_bytes=1_000, on_failure=lambda d: None)
    transport.unsent = 5_000
    for n in range(50_000):
        box.put(*_push(f"progress-{n % 10}-{n:06}", f"k{n % 10}")[:2])
    assert flusher.stats.connections == 1
    assert flusher.stats.bytes < 1_000
    assert flusher.stats.conflated == 50_000 - 10
    box.close()
    assert flusher.stats.connections == 0 and flusher.stats.bytes == 0


async def test_below_the_soft_bound_nothing_is_held_or_dropped() -> None:
    transport = SlowTransport()
    box, failures = _send_queue(transport)
    for n in range(3):
        box.put(*_push(f"progress-{n}", "a")[:2])
    await _tick()
    assert transport.received() == [b"progress-0", b"progress-1", b"progress-2"]
    assert failures == []


async def test_a_disconnect_flush_writes_held_output_before_the_close() -> None:
    transport = SlowTransport()
    box, _ = _send_queue(transport)
    transport.unsent = 5_000
    box.put(*_push("terminal", None)[:2])
    box.flush()
    assert transport.received() == [b"terminal"]


async def test_held_output_goes_out_when_the_transport_drains_without_telling() -> None:
    # Transports that never call writable() (streaming responses): the hold polls.
    transport = SlowTransport()
    box, _ = _send_queue(transport)
    transport.unsent = 5_000
    box.put(*_push("progress-1", "a")[:2])
    box.put(*_push("progress-2", "a")[:2])
    await _tick()
    assert transport.writes == []
    transport.unsent = 0
    await wait_until(lambda: transport.writes, 10, "held output written after the poll")
    assert transport.writes == [[b"progress-2"]]
