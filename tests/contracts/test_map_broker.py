"""Contract suite for the map engine seam (gateway/maps/state.py states the contract): every
``MapBroker`` must pass it. ``maps`` is parametrized over the memory engine (a fake clock) and
the Redis engine (a real Redis, marker ``redis``; its own key prefix, deleted on teardown;
deliveries arrive through the ``RedisBroker``'s PUB/SUB, which subscribes the test channel).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest
from redis.asyncio import Redis

from gateway.engine.map_base import MapBroker, MapChange, PositionLost
from gateway.engine.map_memory import MemoryMapBroker
from gateway.engine.map_redis import RedisMapBroker
from gateway.engine.map_shared import SharedMemoryMapBroker
from gateway.maps.options import MapOptions
from gateway.maps.state import UNWRITTEN_META_TTL
from gateway.protocol.messages import StreamPosition
from tests.contracts.test_broker import FakeClock, Recorder, shared_engine
from tests.helpers import redis_engine
from tests.support import wait_until

PERSISTENT = MapOptions(mode="persistent", stream_size=5, stream_ttl=60)
RECOVERABLE = MapOptions(mode="recoverable", key_ttl=60, stream_size=100, stream_ttl=60, meta_ttl=600)
EPHEMERAL = MapOptions(mode="ephemeral", key_ttl=60, stream_size=0, stream_ttl=0)


@dataclass
class Engine:
    maps: MapBroker
    events: Recorder
    clock: FakeClock | None
    subscribe: object


@pytest.fixture(params=["memory", "shared", pytest.param("redis", marks=pytest.mark.redis)])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    events = Recorder()
    if request.param == "shared":  # --workers N: the supervisor's map engine over the socket
        clock = FakeClock()
        async with shared_engine(clock) as (shared, _):
            shared.set_handler(events)
            yield Engine(SharedMemoryMapBroker(shared), events, clock, shared.subscribe)
        return
    if request.param == "memory":
        clock = FakeClock()
        maps = MemoryMapBroker(now=clock, wall=clock)
        maps.set_handler(events)

        async def nothing(channel: str) -> None:
            return None

        yield Engine(maps, events, clock, nothing)
        return
    url: str = request.getfixturevalue("redis_url")
    prefix = redis_engine.unique_prefix()
    broker = redis_engine.broker(redis_engine.settings(url, prefix=prefix))
    broker.set_handler(events)
    admin = Redis.from_url(url)
    try:
        async with redis_engine.running(broker):
            yield Engine(RedisMapBroker(broker.shards, prefix=prefix), events, None, broker.subscribe)
    finally:
        await redis_engine.delete_prefix(admin, prefix)
        await admin.aclose()


def change(key: str, n: int, **kw: object) -> MapChange:
    return MapChange(key=key, data=b'{"n":%d}' % n, **kw)  # type: ignore[arg-type]


async def channel_of(engine: Engine) -> str:
    channel = f"m:{uuid.uuid4().hex[:8]}"
    await engine.subscribe(channel)  # type: ignore[operator]
    return channel


async def test_changes_are_numbered_stored_and_delivered_atomically(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    results = [await maps.publish(ch, change(f"k{i}", i, tags={"t": str(i)}), PERSISTENT) for i in (3, 1, 2)]
    epoch = results[0].position.epoch
    assert [r.position for r in results] == [StreamPosition(i, epoch) for i in (1, 2, 3)]
    delivered = await engine.events.wait(3)
    assert [(e.pub.key, e.pub.offset, e.position) for e in delivered if e.pub and e.position] == [
        ("k3", 1, StreamPosition(1, epoch)),
        ("k1", 2, StreamPosition(2, epoch)),
        ("k2", 3, StreamPosition(3, epoch)),
    ]
    first = await maps.read_state(ch, PERSISTENT, limit=2)
    assert [(p.key, p.offset, p.data, p.tags) for p in first.publications] == [
        ("k1", 2, b'{"n":1}', {"t": "1"}),
        ("k2", 3, b'{"n":2}', {"t": "2"}),
    ]
    assert first.cursor == "k2" and first.position == StreamPosition(3, epoch)
    last = await maps.read_state(ch, PERSISTENT, cursor=first.cursor, limit=2)
    assert [p.key for p in last.publications] == ["k3"] and last.cursor == ""
    assert [p.key for p in (await maps.read_state(ch, PERSISTENT, limit=-1)).publications] == [
        "k1",
        "k2",
        "k3",
    ]
    assert (await maps.read_state(ch, PERSISTENT, limit=0)).publications == []
    assert [p.key for p in (await maps.read_state(ch, PERSISTENT, key="k2")).publications] == ["k2"]
    stream = await maps.read_stream(ch, PERSISTENT, since=StreamPosition(1, epoch), limit=-1)
    assert [p.offset for p in stream.publications] == [2, 3]
    assert await maps.stats(ch, PERSISTENT) == 3


async def test_removal_is_a_change_and_missing_keys_are_suppressed(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    await maps.publish(ch, change("a", 1, tags={"x": "y"}), PERSISTENT)
    removed = await maps.remove(ch, "a", PERSISTENT)
    assert removed.position.offset == 2 and not removed.suppressed
    missing = await maps.remove(ch, "a", PERSISTENT)
    assert missing.suppressed and missing.reason == "key_not_found" and missing.position.offset == 2
    events = await engine.events.wait(2)
    removal = events[1].pub
    assert removal is not None and (removal.key, removal.removed, removal.offset, removal.tags) == (
        "a",
        True,
        2,
        {"x": "y"},
    )
    assert (await maps.read_state(ch, PERSISTENT)).publications == []
    stream = await maps.read_stream(ch, PERSISTENT, limit=-1)
    assert [(p.key, p.removed) for p in stream.publications] == [("a", False), ("a", True)]


async def test_suppressed_writes_change_nothing(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    await maps.publish(ch, change("a", 1, version=5), PERSISTENT)
    assert (await maps.publish(ch, change("a", 2, key_mode="if_new"), PERSISTENT)).reason == "key_exists"
    assert (
        await maps.publish(ch, change("b", 2, key_mode="if_exists"), PERSISTENT)
    ).reason == "key_not_found"
    assert (await maps.publish(ch, change("a", 3, version=5), PERSISTENT)).reason == "version"
    assert (await maps.publish(ch, change("a", 4, version=4), PERSISTENT)).reason == "version"
    first = await maps.publish(ch, change("c", 5, idempotency_key="once"), PERSISTENT)
    again = await maps.publish(ch, change("c", 6, idempotency_key="once"), PERSISTENT)
    assert again.suppressed and again.reason == "idempotency" and again.position == first.position
    assert (await maps.publish(ch, change("a", 7, version=6), PERSISTENT)).position.offset == 3
    state = await maps.read_state(ch, PERSISTENT)
    assert [(p.key, p.data) for p in state.publications] == [("a", b'{"n":7}'), ("c", b'{"n":5}')]


async def test_positions_of_another_epoch_or_lost_from_the_stream_are_refused(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    for i in range(8):  # the stream keeps 5
        await maps.publish(ch, change(f"k{i}", i), PERSISTENT)
    top = (await maps.read_stream(ch, PERSISTENT, limit=0)).position
    with pytest.raises(PositionLost):
        await maps.read_state(ch, PERSISTENT, cursor="k3", limit=2, revision=replace(top, epoch="other"))
    with pytest.raises(PositionLost):
        await maps.read_stream(ch, PERSISTENT, since=replace(top, epoch="other"))
    with pytest.raises(PositionLost):  # offsets 2 and 3 left the stream
        await maps.read_stream(ch, PERSISTENT, since=StreamPosition(1, top.epoch))
    with pytest.raises(PositionLost):
        await maps.read_stream(ch, PERSISTENT, since=StreamPosition(top.offset + 1, top.epoch))
    kept = await maps.read_stream(ch, PERSISTENT, since=StreamPosition(3, top.epoch), limit=2)
    assert [p.offset for p in kept.publications] == [4, 5]
    await maps.clear(ch)
    after = await maps.read_state(ch, PERSISTENT)
    assert after.publications == [] and after.position.epoch != top.epoch and after.position.offset == 0
    with pytest.raises(PositionLost):
        await maps.read_state(ch, PERSISTENT, revision=top)


async def test_ephemeral_maps_number_nothing(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    result = await maps.publish(ch, change("a", 1), EPHEMERAL)
    assert result.position.offset == 0
    (event,) = await engine.events.wait(1)
    assert event.position is None and event.pub is not None and event.pub.key == "a"
    assert [(p.key, p.offset) for p in (await maps.read_state(ch, EPHEMERAL)).publications] == [("a", 0)]


async def test_keys_expire_with_a_delivered_removal(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    opts = replace(RECOVERABLE, key_ttl=60 if engine.clock is not None else 0.05)
    await maps.publish(ch, change("gone", 1), opts)
    if engine.clock is not None:
        engine.clock.value += 61

    async def gone() -> bool:  # any operation removes expired keys first (Redis: by its clock)
        return await maps.stats(ch, opts) == 0

    await wait_until(gone, 10, "the key to expire")
    events = await engine.events.wait(2)
    assert events[1].pub is not None and (events[1].pub.key, events[1].pub.removed) == ("gone", True)
    assert events[1].position is not None and events[1].position.offset == 2


async def test_an_if_new_write_may_refresh_the_ttl_of_an_existing_key(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    await maps.publish(ch, change("p", 1), RECOVERABLE)
    if engine.clock is not None:
        engine.clock.value += 50
    refresh = change("p", 2, key_mode="if_new", refresh_ttl_on_suppress=True)
    again = await maps.publish(ch, refresh, RECOVERABLE)
    assert again.suppressed and again.reason == "key_exists" and again.position.offset == 1
    if engine.clock is not None:
        engine.clock.value += 50  # 100 s after the write, 50 s after the refresh: still there
    state = await maps.read_state(ch, RECOVERABLE)
    assert [(p.key, p.data) for p in state.publications] == [("p", b'{"n":1}')]


async def test_reads_of_missing_maps_keep_nothing_for_ever(engine: Engine) -> None:
    """A read mints the epoch (a position on an empty map is tied to it), but a map only read is
    forgotten after the unwritten TTL even in persistent mode; removing from it creates nothing."""
    maps = engine.maps
    removed = await maps.remove(f"m:gone-{uuid.uuid4().hex[:6]}", "k", PERSISTENT)
    assert removed.suppressed and removed.reason == "key_not_found"
    ch = f"m:read-{uuid.uuid4().hex[:6]}"
    state = await maps.read_state(ch, PERSISTENT, limit=10)
    assert state.publications == [] and state.position.offset == 0 and state.position.epoch
    assert (await maps.read_stream(ch, PERSISTENT, limit=-1)).position == state.position
    with pytest.raises(PositionLost):
        await maps.read_state(ch, PERSISTENT, revision=StreamPosition(3, "gone"))
    if isinstance(maps, MemoryMapBroker):
        assert list(maps._channels) == [ch]
        assert engine.clock is not None
        engine.clock.value += UNWRITTEN_META_TTL + 1
        assert maps.sweep() == 1 and maps._channels == {}
    elif isinstance(maps, RedisMapBroker):
        shard = maps.shards[0]
        prefix = maps.keys.prefix
        keys = await shard.call(lambda client: client.keys(f"{prefix}.map.*"))
        assert keys == [maps.keys.map_keys(ch)[4].encode()]  # the meta only
        ttl = await shard.call(lambda client: client.pttl(keys[0]))
        assert 0 < ttl <= UNWRITTEN_META_TTL * 1000
    await maps.publish(ch, change("k", 1), PERSISTENT)  # written: persistent for ever
    if isinstance(maps, RedisMapBroker):
        meta = maps.keys.map_keys(ch)[4]
        assert await maps.shards[0].call(lambda client: client.pttl(meta)) == -1


async def test_the_background_sweep_delivers_removals_by_ttl_without_other_traffic(engine: Engine) -> None:
    maps, ch = engine.maps, await channel_of(engine)
    opts = replace(RECOVERABLE, key_ttl=60 if engine.clock is not None else 1.0)
    await maps.publish(ch, change("k", 1), opts)
    if isinstance(maps, MemoryMapBroker):
        assert engine.clock is not None
        engine.clock.value += 61
        assert maps.sweep() == 1
    elif isinstance(maps, SharedMemoryMapBroker):  # the supervisor sweeps every second
        assert engine.clock is not None
        engine.clock.value += 61
    else:
        assert isinstance(maps, RedisMapBroker)
        sweeper = RedisMapBroker(
            maps.shards, prefix=maps.keys.prefix, watched=lambda: [ch], sweep_interval_seconds=0.05
        )
        assert await sweeper.stats(ch, opts) == 1  # seen with an expiring mode: swept from now on
        task = asyncio.create_task(sweeper.run())
        try:
            await engine.events.wait(2)
        finally:
            task.cancel()
    events = await engine.events.wait(2)
    assert events[1].pub is not None and (events[1].pub.key, events[1].pub.removed) == ("k", True)


async def test_a_delta_write_hands_over_the_keys_previous_value(engine: Engine) -> None:
    """Per-key fossil delta (gateway/maps/delta.py): a write with ``delta`` to an existing key is
    delivered with that key's previous value (``prev``), never another key's; a new key, a
    write without ``delta``, a removal: none. Nothing of it is stored."""
    maps, ch = engine.maps, await channel_of(engine)
    await maps.publish(ch, change("a", 1), PERSISTENT)
    await maps.publish(ch, change("b", 2), PERSISTENT)
    await maps.publish(ch, change("a", 3, delta=True), PERSISTENT)
    await maps.publish(ch, change("c", 4, delta=True), PERSISTENT)  # new key
    await maps.publish(ch, change("b", 5), PERSISTENT)  # no delta
    await maps.remove(ch, "a", PERSISTENT)
    await maps.publish(ch, change("b", 6, delta=True), PERSISTENT)
    events = await engine.events.wait(7)
    assert [(e.pub.key, e.pub.offset, e.pub.prev) for e in events if e.pub] == [
        ("a", 1, None),
        ("b", 2, None),
        ("a", 3, b'{"n":1}'),
        ("c", 4, None),
        ("b", 5, None),
        ("a", 6, None),
        ("b", 7, b'{"n":5}'),
    ]
    stored = (await maps.read_stream(ch, PERSISTENT, limit=-1)).publications
    stored += (await maps.read_state(ch, PERSISTENT)).publications
    assert all(p.prev is None for p in stored)
