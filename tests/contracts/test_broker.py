"""Contract suite for the engine seam: every Broker and PresenceManager must pass it.

The ``broker`` and ``presence`` fixtures are parametrized over implementations: "memory",
"shared" (the memory engine of ``--workers N``: a ``BrokerServer`` on a real Unix socket and the
worker-side ``SharedMemoryBroker``/``SharedMemoryPresence``) and "redis" (a real Redis, marker
``redis``). The Redis branch runs each test under its own key
prefix, binds a ``TimeMachine`` advancer that lowers the PTTL of every key under it (presence
scores follow a fake clock), and deletes the prefix on teardown. Tests never sleep: they advance
time, and they wait for deliveries with ``Recorder.wait`` (immediate in memory, asynchronous
through PUB/SUB on Redis). Negative delivery checks publish a marker to a subscribed channel
afterwards and wait for it, which relies on per-connection ordering of PUB/SUB messages.

A section at the end tests memory-only behaviour (sweeps, handler failures).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.engine.base import Broker, HistoryOptions, PresenceManager, PresenceStats
from gateway.engine.memory import MemoryBroker, MemoryPresence, new_epoch
from gateway.engine.shared_memory import SharedMemoryBroker, SharedMemoryPresence
from gateway.engine.shared_server import BrokerServer
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition
from tests.helpers import redis_engine
from tests.support import wait_until
from tests.support.waiting import scaled

BROKERS = ["memory", "shared", pytest.param("redis", marks=pytest.mark.redis)]
PRESENCES = ["memory", "shared", pytest.param("redis", marks=pytest.mark.redis)]

HISTORY = HistoryOptions(size=10, ttl_seconds=60, meta_ttl_seconds=600)
NO_HISTORY = HistoryOptions()
ALICE = ClientInfo(user="alice", client="c1")
BOB = ClientInfo(user="bob", client="c2")


class FakeClock:
    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value

    async def advance(self, seconds: float) -> None:
        self.value += seconds


class TimeMachine:
    """Moves time forward for every engine a test uses."""

    def __init__(self) -> None:
        self._advancers: list[Callable[[float], Awaitable[None]]] = []

    def bind(self, advancer: Callable[[float], Awaitable[None]]) -> None:
        self._advancers.append(advancer)

    async def advance(self, seconds: float) -> None:
        for advancer in self._advancers:
            await advancer(seconds)


@dataclass(frozen=True)
class Delivered:
    kind: str
    channel: str
    pub: Publication | None = None
    position: StreamPosition | None = None
    info: ClientInfo | None = None


class Recorder:
    """A BrokerEventHandler that records what it is given."""

    def __init__(self) -> None:
        self.events: list[Delivered] = []
        self.controls: list[bytes] = []
        self.reconnects = 0
        self._changed = asyncio.Event()

    def on_publication(
        self, channel: str, pub: Publication, position: StreamPosition | None, write_now: bool = False
    ) -> None:
        self._record(Delivered("publication", channel, pub=pub, position=position))

    def on_join(self, channel: str, info: ClientInfo) -> None:
        self._record(Delivered("join", channel, info=info))

    def on_leave(self, channel: str, info: ClientInfo) -> None:
        self._record(Delivered("leave", channel, info=info))

    def on_control(self, data: bytes) -> None:
        self.controls.append(data)
        self._changed.set()

    def on_broker_reconnect(self) -> None:
        self.reconnects += 1
        self._changed.set()

    def _record(self, event: Delivered) -> None:
        self.events.append(event)
        self._changed.set()

    async def wait(self, count: int) -> list[Delivered]:
        async with asyncio.timeout(scaled(30)):
            while len(self.events) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.events

    def offsets(self, channel: str) -> list[int]:
        return [e.pub.offset for e in self.events if e.pub is not None and e.channel == channel]


@pytest.fixture
def time_machine() -> TimeMachine:
    return TimeMachine()


@pytest.fixture
def events() -> Recorder:
    return Recorder()


@contextlib.asynccontextmanager
async def shared_engine(clock: FakeClock) -> AsyncIterator[tuple[SharedMemoryBroker, SharedMemoryPresence]]:
    """A ``BrokerServer`` on a Unix socket (a short path: sun_path holds 107 bytes) and one
    worker's broker and presence connected to it, with every task owned here."""
    workdir = Path(tempfile.mkdtemp(prefix="tc-shared-"))
    server = BrokerServer(workdir / "engine.sock", presence_ttl_seconds=60, now=clock)
    broker = SharedMemoryBroker(server.path)
    presence = SharedMemoryPresence(server.path)
    try:
        async with asyncio.TaskGroup() as tg:
            serving = tg.create_task(server.run())
            await server.ready.wait()
            links = [tg.create_task(broker.run()), tg.create_task(presence.run())]
            await wait_until(lambda: broker.healthy() and presence.healthy(), 10, "shared engine links")
            try:
                yield broker, presence
            finally:
                await broker.close()
                await presence.close()
                for task in [*links, serving]:
                    task.cancel()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(params=BROKERS)
async def broker(
    request: pytest.FixtureRequest, time_machine: TimeMachine, events: Recorder
) -> AsyncIterator[Broker]:
    engine: Broker
    if request.param == "memory":
        clock = FakeClock()
        engine = MemoryBroker(now=clock)
        time_machine.bind(clock.advance)
    elif request.param == "shared":
        clock = FakeClock()
        time_machine.bind(clock.advance)
        async with shared_engine(clock) as (shared, _):
            shared.set_handler(events)
            yield shared
        return
    elif request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        prefix = redis_engine.unique_prefix()
        redis_broker = redis_engine.broker(redis_engine.settings(url, prefix=prefix))
        redis_broker.set_handler(events)
        admin = Redis.from_url(url)
        time_machine.bind(redis_engine.ttl_lowerer(admin, prefix))
        try:
            async with redis_engine.running(redis_broker):
                yield redis_broker
        finally:
            await redis_engine.delete_prefix(admin, prefix)
            await admin.aclose()
        return
    else:  # pragma: no cover
        raise AssertionError(f"unknown broker {request.param}")
    engine.set_handler(events)
    try:
        yield engine
    finally:
        await engine.close()


@pytest.fixture(params=PRESENCES)
async def presence(
    request: pytest.FixtureRequest, time_machine: TimeMachine
) -> AsyncIterator[PresenceManager]:
    engine: PresenceManager
    if request.param == "memory":
        clock = FakeClock()
        engine = MemoryPresence(ttl_seconds=60, now=clock)
        time_machine.bind(clock.advance)
    elif request.param == "shared":
        clock = FakeClock()
        time_machine.bind(clock.advance)
        async with shared_engine(clock) as (_, shared_presence):
            yield shared_presence
        return
    elif request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        prefix = redis_engine.unique_prefix()
        clock = FakeClock()
        admin = Redis.from_url(url)
        time_machine.bind(clock.advance)
        time_machine.bind(redis_engine.ttl_lowerer(admin, prefix))
        redis_presence = redis_engine.presence(redis_engine.settings(url, prefix=prefix), now=clock)
        try:
            yield redis_presence
        finally:
            await redis_presence.close()
            await redis_engine.delete_prefix(admin, prefix)
            await admin.aclose()
        return
    else:  # pragma: no cover
        raise AssertionError(f"unknown presence {request.param}")
    try:
        yield engine
    finally:
        await engine.close()


def pub(n: int | str = 0) -> Publication:
    return Publication(data=f'{{"n":{n!r}}}'.encode() if isinstance(n, int) else n.encode())


async def publish_many(broker: Broker, channel: str, count: int, history: HistoryOptions = HISTORY) -> None:
    for n in range(count):
        await broker.publish(channel, pub(n), history)


async def history_offsets(
    broker: Broker,
    channel: str,
    *,
    since: StreamPosition | None = None,
    limit: int = -1,
    reverse: bool = False,
    history: HistoryOptions = HISTORY,
) -> list[int]:
    result = await broker.history(channel, history, since=since, limit=limit, reverse=reverse)
    return [p.offset for p in result.publications]


async def top(broker: Broker, channel: str, history: HistoryOptions = HISTORY) -> StreamPosition:
    return (await broker.history(channel, history)).position


# Publish ---------------------------------------------------------------------------------------


async def test_offsets_start_at_one_and_increase_in_a_stable_epoch(broker: Broker) -> None:
    results = [await broker.publish("ch", pub(n), HISTORY) for n in range(3)]

    positions = [r.position for r in results]
    assert [p.offset for p in positions if p is not None] == [1, 2, 3]
    assert len({p.epoch for p in positions if p is not None}) == 1
    assert not any(r.suppressed for r in results)
    assert await top(broker, "ch") == positions[-1]


async def test_channels_have_independent_streams(broker: Broker) -> None:
    a = await broker.publish("a", pub(), HISTORY)
    await broker.publish("a", pub(), HISTORY)
    b = await broker.publish("b", pub(), HISTORY)

    assert a.position is not None and b.position is not None
    assert b.position.offset == 1
    assert a.position.epoch != b.position.epoch


async def test_history_keeps_payload_and_assigned_offset(broker: Broker) -> None:
    sent = Publication(data=b'{"x":1}', info=ALICE, tags={"k": "v"}, time=123)
    result = await broker.publish("ch", sent, HISTORY)

    (stored,) = (await broker.history("ch", HISTORY, limit=-1)).publications
    assert result.position is not None
    assert stored == Publication(
        data=b'{"x":1}', offset=result.position.offset, info=ALICE, tags={"k": "v"}, time=123
    )


# History ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("since", "limit", "reverse", "expected"),
    [
        (None, -1, False, [1, 2, 3, 4, 5]),
        (None, 0, False, []),
        (None, 2, False, [1, 2]),
        (None, 99, False, [1, 2, 3, 4, 5]),
        (0, -1, False, [1, 2, 3, 4, 5]),
        (2, -1, False, [3, 4, 5]),
        (2, 2, False, [3, 4]),
        (2, 0, False, []),
        (5, -1, False, []),
        (9, -1, False, []),
        (None, -1, True, [5, 4, 3, 2, 1]),
        (None, 2, True, [5, 4]),
        (None, 0, True, []),
        (4, -1, True, [3, 2, 1]),
        (4, 2, True, [3, 2]),
        (1, -1, True, []),
        (9, -1, True, [5, 4, 3, 2, 1]),
    ],
)
async def test_history_selection(
    broker: Broker, since: int | None, limit: int, reverse: bool, expected: list[int]
) -> None:
    await publish_many(broker, "ch", 5)
    position = await top(broker, "ch")
    since_position = None if since is None else StreamPosition(since, position.epoch)

    result = await broker.history("ch", HISTORY, since=since_position, limit=limit, reverse=reverse)

    assert [p.offset for p in result.publications] == expected
    assert result.position == position


FAR_OFFSETS = [10**14, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 10**30]
FAR_LIMITS = [2**31 - 1, 10**14, 2**63 - 1, 2**63, 2**64 - 1, 10**30]


@pytest.mark.parametrize("offset", FAR_OFFSETS)
async def test_history_since_a_far_offset_answers_like_any_offset_past_the_top(
    broker: Broker, offset: int
) -> None:
    # Defect 5: from 10^14 on, Redis answered error 100 (Lua formats such numbers as "1e+14").
    # Any offset a client sends is a question with an answer: nothing after it, all before it.
    await publish_many(broker, "ch", 3)
    position = await top(broker, "ch")
    far = StreamPosition(offset, position.epoch)

    forward = await broker.history("ch", HISTORY, since=far, limit=-1)
    backward = await broker.history("ch", HISTORY, since=far, limit=2, reverse=True)

    assert (forward.publications, forward.position) == ([], position)
    assert [p.offset for p in backward.publications] == [3, 2]
    assert backward.position == position


@pytest.mark.parametrize("limit", FAR_LIMITS)
async def test_history_with_a_far_limit_reads_everything(broker: Broker, limit: int) -> None:
    await publish_many(broker, "ch", 3)
    position = await top(broker, "ch")

    assert await history_offsets(broker, "ch", limit=limit) == [1, 2, 3]
    assert await history_offsets(broker, "ch", limit=limit, reverse=True) == [3, 2, 1]
    assert await history_offsets(broker, "ch", since=StreamPosition(1, position.epoch), limit=limit) == [2, 3]


async def test_history_with_negative_offset_or_limit_reads_like_zero_offset_and_all(broker: Broker) -> None:
    await publish_many(broker, "ch", 3)
    epoch = (await top(broker, "ch")).epoch

    assert await history_offsets(broker, "ch", since=StreamPosition(-5, epoch), limit=-7) == [1, 2, 3]
    assert await history_offsets(broker, "ch", since=StreamPosition(-5, epoch), reverse=True) == []
    assert await history_offsets(broker, "ch", limit=-(2**63)) == [1, 2, 3]


async def test_history_selection_matches_a_reference_model_after_trimming(broker: Broker) -> None:
    # size 4 after 7 publishes keeps offsets 4..7.
    options = HistoryOptions(size=4, ttl_seconds=60, meta_ttl_seconds=600)
    await publish_many(broker, "ch", 7, options)
    kept = [4, 5, 6, 7]
    epoch = (await top(broker, "ch", options)).epoch

    for reverse in (False, True):
        for since in (None, *range(10)):
            for limit in (-1, 0, 1, 2, 3, 10):
                if since is None:
                    selected = kept[::-1] if reverse else kept
                elif reverse:
                    selected = [o for o in reversed(kept) if o < since]
                else:
                    selected = [o for o in kept if o > since]
                expected = selected if limit < 0 else selected[:limit]
                position = None if since is None else StreamPosition(since, epoch)
                got = await history_offsets(
                    broker, "ch", since=position, limit=limit, reverse=reverse, history=options
                )
                assert got == expected, (reverse, since, limit)


async def test_history_since_does_not_check_the_epoch(broker: Broker) -> None:
    await publish_many(broker, "ch", 3)

    assert await history_offsets(broker, "ch", since=StreamPosition(1, "another")) == [2, 3]


async def test_history_trims_to_size(broker: Broker) -> None:
    options = HistoryOptions(size=3, ttl_seconds=60, meta_ttl_seconds=600)
    await publish_many(broker, "ch", 5, options)

    assert await history_offsets(broker, "ch", history=options) == [3, 4, 5]
    assert await history_offsets(broker, "ch", since=StreamPosition(0, ""), history=options) == [3, 4, 5]
    assert (await top(broker, "ch", options)).offset == 5


async def test_history_size_change_applies_on_next_publish(broker: Broker) -> None:
    await publish_many(broker, "ch", 5)
    smaller = HistoryOptions(size=2, ttl_seconds=60, meta_ttl_seconds=600)

    await broker.publish("ch", pub(), smaller)

    assert await history_offsets(broker, "ch", history=smaller) == [5, 6]


async def test_history_read_creates_meta(broker: Broker) -> None:
    first = await broker.history("fresh", HISTORY, limit=-1)

    assert first.publications == []
    assert first.position.offset == 0
    assert first.position.epoch
    assert await top(broker, "fresh") == first.position
    result = await broker.publish("fresh", pub(), HISTORY)
    assert result.position == StreamPosition(1, first.position.epoch)


async def test_remove_history_keeps_epoch_and_top(broker: Broker) -> None:
    await publish_many(broker, "ch", 3)
    before = await top(broker, "ch")

    await broker.remove_history("ch")

    after = await broker.history("ch", HISTORY, limit=-1)
    assert after.publications == []
    assert after.position == before
    result = await broker.publish("ch", pub(), HISTORY)
    assert result.position == StreamPosition(4, before.epoch)
    assert await history_offsets(broker, "ch") == [4]


async def test_remove_history_of_unknown_channel_is_a_no_op(broker: Broker) -> None:
    await broker.remove_history("nothing")


# Expiry ----------------------------------------------------------------------------------------

TTL = HistoryOptions(size=10, ttl_seconds=10, meta_ttl_seconds=100)


async def test_stream_expires_as_a_whole_when_nothing_is_published(
    broker: Broker, time_machine: TimeMachine
) -> None:
    await publish_many(broker, "ch", 2, TTL)
    before = await top(broker, "ch", TTL)

    await time_machine.advance(11)

    expired = await broker.history("ch", TTL, limit=-1)
    assert expired.publications == []
    assert expired.position == before
    result = await broker.publish("ch", pub(), TTL)
    assert result.position == StreamPosition(3, before.epoch)
    assert await history_offsets(broker, "ch", history=TTL) == [3]


async def test_publish_refreshes_the_stream_ttl(broker: Broker, time_machine: TimeMachine) -> None:
    await broker.publish("ch", pub(), TTL)
    await time_machine.advance(6)
    await broker.publish("ch", pub(), TTL)
    await time_machine.advance(6)

    assert await history_offsets(broker, "ch", history=TTL) == [1, 2]


async def test_history_read_does_not_refresh_the_stream_ttl(
    broker: Broker, time_machine: TimeMachine
) -> None:
    await broker.publish("ch", pub(), TTL)
    await time_machine.advance(6)
    assert await history_offsets(broker, "ch", history=TTL) == [1]
    await time_machine.advance(6)

    assert await history_offsets(broker, "ch", history=TTL) == []


async def test_meta_expiry_mints_a_new_epoch_and_restarts_offsets(
    broker: Broker, time_machine: TimeMachine
) -> None:
    await publish_many(broker, "ch", 3, TTL)
    old = await top(broker, "ch", TTL)

    await time_machine.advance(101)

    fresh = await broker.history("ch", TTL, limit=-1)
    assert fresh.publications == []
    assert fresh.position.offset == 0
    assert fresh.position.epoch != old.epoch
    result = await broker.publish("ch", pub(), TTL)
    assert result.position == StreamPosition(1, fresh.position.epoch)
    assert await history_offsets(broker, "ch", history=TTL) == [1]


async def test_meta_expiry_on_publish_drops_old_entries(broker: Broker, time_machine: TimeMachine) -> None:
    # Stream TTL above meta TTL: entries would outlive the meta if the new epoch did not drop them.
    long_stream = HistoryOptions(size=10, ttl_seconds=100, meta_ttl_seconds=50)
    await publish_many(broker, "ch", 3, long_stream)
    old = await top(broker, "ch", long_stream)

    await time_machine.advance(51)
    result = await broker.publish("ch", pub(), long_stream)

    assert result.position is not None
    assert result.position.offset == 1
    assert result.position.epoch != old.epoch
    assert await history_offsets(broker, "ch", history=long_stream) == [1]


async def test_publish_refreshes_the_meta_ttl(broker: Broker, time_machine: TimeMachine) -> None:
    first = await broker.publish("ch", pub(), TTL)
    await time_machine.advance(60)
    await broker.publish("ch", pub(), TTL)
    await time_machine.advance(60)

    assert first.position is not None
    assert await top(broker, "ch", TTL) == StreamPosition(2, first.position.epoch)


async def test_history_read_refreshes_the_meta_ttl(broker: Broker, time_machine: TimeMachine) -> None:
    first = await broker.publish("ch", pub(), TTL)
    await time_machine.advance(60)
    await broker.history("ch", TTL)
    await time_machine.advance(60)

    assert first.position is not None
    assert await top(broker, "ch", TTL) == StreamPosition(1, first.position.epoch)


# Idempotency -----------------------------------------------------------------------------------


async def test_duplicate_idempotency_key_returns_the_first_result(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")
    first = await broker.publish("ch", pub(1), HISTORY, idempotency_key="k")
    again = await broker.publish("ch", pub(2), HISTORY, idempotency_key="k")
    marker = await broker.publish("ch", pub(3), HISTORY)

    await events.wait(2)
    assert not first.suppressed
    assert again.suppressed
    assert again.position == first.position
    assert marker.position is not None and marker.position.offset == 2
    assert events.offsets("ch") == [1, 2]
    history = (await broker.history("ch", HISTORY, limit=-1)).publications
    assert [p.data for p in history] == [pub(1).data, pub(3).data]


async def test_idempotency_key_is_per_channel(broker: Broker) -> None:
    await broker.publish("a", pub(), HISTORY, idempotency_key="k")
    other = await broker.publish("b", pub(), HISTORY, idempotency_key="k")

    assert not other.suppressed
    assert other.position is not None and other.position.offset == 1


async def test_idempotency_result_expires(broker: Broker, time_machine: TimeMachine) -> None:
    first = await broker.publish("ch", pub(), HISTORY, idempotency_key="k", idempotent_result_ttl_seconds=30)
    await time_machine.advance(31)

    later = await broker.publish("ch", pub(), HISTORY, idempotency_key="k", idempotent_result_ttl_seconds=30)

    assert first.position is not None
    assert not later.suppressed
    assert later.position == StreamPosition(2, first.position.epoch)


async def test_idempotency_without_history(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")
    first = await broker.publish("ch", pub(1), NO_HISTORY, idempotency_key="k")
    again = await broker.publish("ch", pub(2), NO_HISTORY, idempotency_key="k")
    await broker.publish("ch", pub(3), NO_HISTORY)

    await events.wait(2)
    assert first.position is None and not first.suppressed
    assert again.position is None and again.suppressed
    assert [e.pub.data for e in events.events if e.pub is not None] == [pub(1).data, pub(3).data]


# Publication version (centrifuge PublishOptions.Version) ----------------------------------------


async def test_older_or_equal_version_is_dropped_at_the_current_top(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")
    first = await broker.publish("ch", pub(1), HISTORY, version=5)
    equal = await broker.publish("ch", pub(2), HISTORY, version=5)
    older = await broker.publish("ch", pub(3), HISTORY, version=4)
    newer = await broker.publish("ch", pub(4), HISTORY, version=6)

    await events.wait(2)
    assert first.position is not None and not first.suppressed
    assert equal.suppressed and equal.position == first.position
    assert older.suppressed and older.position == first.position
    assert not newer.suppressed and newer.position == StreamPosition(2, first.position.epoch)
    assert events.offsets("ch") == [1, 2]
    history = (await broker.history("ch", HISTORY, limit=-1)).publications
    assert [p.data for p in history] == [pub(1).data, pub(4).data]


async def test_version_epoch_change_accepts_a_lower_version(broker: Broker) -> None:
    await broker.publish("ch", pub(1), HISTORY, version=9, version_epoch="a")
    same_epoch = await broker.publish("ch", pub(2), HISTORY, version=3, version_epoch="a")
    new_epoch = await broker.publish("ch", pub(3), HISTORY, version=3, version_epoch="b")
    no_epoch = await broker.publish("ch", pub(4), HISTORY, version=2)

    assert same_epoch.suppressed
    assert not new_epoch.suppressed
    assert new_epoch.position is not None and new_epoch.position.offset == 2
    assert no_epoch.suppressed  # an empty version epoch compares the version alone


async def test_version_zero_and_other_channels_are_not_compared(broker: Broker) -> None:
    await broker.publish("ch", pub(1), HISTORY, version=7)
    unversioned = await broker.publish("ch", pub(2), HISTORY)
    other = await broker.publish("other", pub(3), HISTORY, version=1)

    assert not unversioned.suppressed and not other.suppressed


async def test_versions_compare_exactly_across_the_uint64_range(broker: Broker) -> None:
    top = 2**64 - 1
    await broker.publish("ch", pub(1), HISTORY, version=top - 1)
    newer = await broker.publish("ch", pub(2), HISTORY, version=top)
    again = await broker.publish("ch", pub(3), HISTORY, version=top)

    assert not newer.suppressed  # 2**64-2 and 2**64-1 are one double apart from nothing in Lua
    assert again.suppressed


async def test_meta_expiry_forgets_the_version(broker: Broker, time_machine: TimeMachine) -> None:
    await broker.publish("ch", pub(1), HISTORY, version=9)
    await time_machine.advance(HISTORY.meta_ttl_seconds + 1)

    later = await broker.publish("ch", pub(2), HISTORY, version=1)

    assert not later.suppressed
    assert later.position is not None and later.position.offset == 1


# Channels without history ----------------------------------------------------------------------


async def test_channel_without_history_delivers_without_position_and_keeps_nothing(
    broker: Broker, events: Recorder
) -> None:
    await broker.subscribe("ch")

    result = await broker.publish("ch", pub(), NO_HISTORY)

    (event,) = await events.wait(1)
    assert result.position is None
    assert event.position is None
    assert event.pub is not None and event.pub.offset == 0
    empty = await broker.history("ch", HISTORY, limit=-1)
    assert empty.publications == []
    assert empty.position.offset == 0


@pytest.mark.parametrize("options", [HistoryOptions(size=10), HistoryOptions(ttl_seconds=60)])
async def test_history_needs_both_size_and_ttl(broker: Broker, options: HistoryOptions) -> None:
    result = await broker.publish("ch", pub(), options)

    assert result.position is None
    assert (await top(broker, "ch")).offset == 0


# Delivery --------------------------------------------------------------------------------------


async def test_delivery_carries_the_assigned_position(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")

    result = await broker.publish("ch", pub(), HISTORY)

    (event,) = await events.wait(1)
    assert event == Delivered(
        "publication", "ch", pub=Publication(pub().data, offset=1), position=result.position
    )


async def test_delivery_follows_offset_order(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")

    await publish_many(broker, "ch", 50)

    await events.wait(50)
    assert events.offsets("ch") == list(range(1, 51))
    assert [e.position.offset for e in events.events if e.position is not None] == list(range(1, 51))


async def test_delivery_only_for_subscribed_channels(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("marker")
    await broker.publish("other", pub(), HISTORY)
    await broker.publish("marker", pub(), HISTORY)

    await events.wait(1)
    assert [e.channel for e in events.events] == ["marker"]


async def test_no_delivery_after_unsubscribe(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")
    await broker.subscribe("marker")
    await broker.publish("ch", pub(), HISTORY)
    await events.wait(1)

    await broker.unsubscribe("ch")
    await broker.publish("ch", pub(), HISTORY)
    await broker.publish("marker", pub(), HISTORY)

    await events.wait(2)
    assert [e.channel for e in events.events] == ["ch", "marker"]


async def test_unsubscribed_publish_still_enters_history(broker: Broker) -> None:
    await broker.publish("ch", pub(), HISTORY)

    assert await history_offsets(broker, "ch") == [1]


async def test_join_and_leave_delivery(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")
    await broker.publish_join("other", ALICE)
    await broker.publish_join("ch", ALICE)
    await broker.publish_leave("other", BOB)
    await broker.publish_leave("ch", BOB)

    await events.wait(2)
    assert events.events == [Delivered("join", "ch", info=ALICE), Delivered("leave", "ch", info=BOB)]


async def test_publications_and_joins_keep_their_relative_order(broker: Broker, events: Recorder) -> None:
    await broker.subscribe("ch")
    await broker.publish("ch", pub(), HISTORY)
    await broker.publish_join("ch", ALICE)
    await broker.publish("ch", pub(), HISTORY)

    await events.wait(3)
    assert [e.kind for e in events.events] == ["publication", "join", "publication"]


# Presence --------------------------------------------------------------------------------------


async def test_presence_add_and_read(presence: PresenceManager) -> None:
    await presence.add("ch", "c1", ALICE)
    await presence.add("ch", "c2", BOB)
    await presence.add("other", "c3", ALICE)

    assert dict(await presence.presence("ch")) == {"c1": ALICE, "c2": BOB}
    assert await presence.stats("ch") == PresenceStats(num_clients=2, num_users=2)


async def test_presence_of_unknown_channel_is_empty(presence: PresenceManager) -> None:
    assert dict(await presence.presence("none")) == {}
    assert await presence.stats("none") == PresenceStats(num_clients=0, num_users=0)


async def test_presence_stats_count_distinct_users(presence: PresenceManager) -> None:
    await presence.add("ch", "c1", ALICE)
    await presence.add("ch", "c2", ClientInfo(user="alice", client="c2"))
    await presence.add("ch", "c3", BOB)

    assert await presence.stats("ch") == PresenceStats(num_clients=3, num_users=2)


async def test_presence_re_add_replaces_info(presence: PresenceManager) -> None:
    await presence.add("ch", "c1", ALICE)
    updated = ClientInfo(user="alice", client="c1", conn_info=b'{"v":2}')
    await presence.add("ch", "c1", updated)

    assert dict(await presence.presence("ch")) == {"c1": updated}


async def test_presence_remove(presence: PresenceManager) -> None:
    await presence.add("ch", "c1", ALICE)
    await presence.add("ch", "c2", BOB)

    await presence.remove("ch", "c1")
    await presence.remove("ch", "unknown")
    await presence.remove("none", "c1")

    assert dict(await presence.presence("ch")) == {"c2": BOB}


async def test_presence_entries_expire_unless_re_added(
    presence: PresenceManager, time_machine: TimeMachine
) -> None:
    await presence.add("ch", "c1", ALICE)
    await presence.add("ch", "c2", BOB)
    await time_machine.advance(40)
    await presence.add("ch", "c2", BOB)
    await time_machine.advance(40)

    assert dict(await presence.presence("ch")) == {"c2": BOB}
    assert await presence.stats("ch") == PresenceStats(num_clients=1, num_users=1)
    await time_machine.advance(40)
    assert dict(await presence.presence("ch")) == {}


# Memory-only behaviour -------------------------------------------------------------------------


def test_epochs_are_eight_ascii_letters() -> None:
    epochs = {new_epoch() for _ in range(100)}

    assert len(epochs) == 100
    assert all(len(e) == 8 and e.isascii() and e.isalpha() for e in epochs)


async def test_memory_broker_uses_the_epoch_factory() -> None:
    epochs = iter(["one", "two"])
    clock = FakeClock()
    broker = MemoryBroker(now=clock, epoch_factory=lambda: next(epochs))

    assert (await broker.history("a", TTL)).position == StreamPosition(0, "one")
    await clock.advance(101)
    assert (await broker.history("a", TTL)).position == StreamPosition(0, "two")


async def test_memory_sweep_reclaims_idle_channels_in_bounded_batches() -> None:
    clock = FakeClock()
    broker = MemoryBroker(now=clock, sweep_batch=2)
    for channel in "abcde":
        await broker.publish(channel, pub(), TTL, idempotency_key="k", idempotent_result_ttl_seconds=30)
    await clock.advance(101)

    dropped = [broker.sweep() for _ in range(5)]

    # Each sweep drops at most 2 results and examines at most 2 channels.
    assert all(d <= 4 for d in dropped)
    assert sum(dropped) == 10
    assert broker.sweep() == 0
    assert (await broker.history("a", TTL)).position.offset == 0


async def test_memory_sweep_keeps_live_channels() -> None:
    clock = FakeClock()
    broker = MemoryBroker(now=clock)
    await broker.publish("ch", pub(), TTL)
    await clock.advance(50)

    assert broker.sweep() == 0
    assert await history_offsets(broker, "ch", history=TTL) == []
    assert (await top(broker, "ch", TTL)).offset == 1


async def test_memory_handler_failure_does_not_fail_publish(caplog: pytest.LogCaptureFixture) -> None:
    class Failing(Recorder):
        def on_publication(
            self, channel: str, pub: Publication, position: StreamPosition | None, write_now: bool = False
        ) -> None:
            raise RuntimeError("boom")

        def on_join(self, channel: str, info: ClientInfo) -> None:
            raise RuntimeError("boom")

        def on_leave(self, channel: str, info: ClientInfo) -> None:
            raise RuntimeError("boom")

    broker = MemoryBroker()
    broker.set_handler(Failing())
    await broker.subscribe("ch")

    with caplog.at_level(logging.ERROR):
        result = await broker.publish("ch", pub(), HISTORY)
        for _ in range(100):
            await broker.publish("ch", pub(), HISTORY)
            await broker.publish_join("ch", ALICE)
            await broker.publish_leave("ch", ALICE)

    assert result.position is not None and result.position.offset == 1
    # One line with the first traceback for the whole run, not one per message (defect 6).
    assert len(caplog.records) == 1 and caplog.records[0].exc_info


async def test_memory_run_sweeps_until_cancelled() -> None:
    clock = FakeClock()
    broker = MemoryBroker(now=clock, sweep_interval_seconds=0)
    presence = MemoryPresence(now=clock, sweep_interval_seconds=0)
    await broker.publish("ch", pub(), TTL)
    await presence.add("ch", "c1", ALICE)
    await clock.advance(101)

    tasks = [asyncio.create_task(broker.run()), asyncio.create_task(presence.run())]
    for _ in range(5):
        await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert broker.sweep() == 0
    assert presence.sweep() == 0


async def test_memory_presence_sweep_drops_expired_entries() -> None:
    clock = FakeClock()
    presence = MemoryPresence(ttl_seconds=60, now=clock, sweep_batch=1)
    await presence.add("a", "c1", ALICE)
    await presence.add("b", "c2", BOB)
    await clock.advance(61)

    assert presence.sweep() + presence.sweep() == 2
    assert presence.sweep() == 0


async def test_memory_close_stops_delivery() -> None:
    broker = MemoryBroker()
    events = Recorder()
    broker.set_handler(events)
    await broker.subscribe("ch")
    await broker.close()

    await broker.publish("ch", pub(), HISTORY)

    assert events.events == []
