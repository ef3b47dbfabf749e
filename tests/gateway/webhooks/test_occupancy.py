"""Occupancy rules (gateway/webhooks/occupancy.py) as one contract over both stores: the
in-process ``MemoryOccupancy`` and ``RedisOccupancy`` (the Lua script on the suite's real
Redis). Several node ids report to one store, as the nodes of a cluster do."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.config.schema import RedisSettings
from gateway.engine.redis import build_shards
from gateway.webhooks.occupancy import Transitions
from gateway.webhooks.redis_occupancy import RedisOccupancy
from gateway.webhooks.store import MemoryOccupancy, OccupancyStore
from tests.helpers.redis_engine import unique_prefix
from tests.support import wait_until

GRACE = 0.3
TTL = 0.6


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[OccupancyStore]:
    if request.param == "memory":
        yield MemoryOccupancy(GRACE, TTL, clock=Clock())
        return
    url = request.getfixturevalue("redis_url")
    config = RedisSettings(address=(url,), prefix=unique_prefix())
    redis = RedisOccupancy(build_shards(config)[0], prefix=config.prefix, grace_seconds=GRACE, node_ttl=TTL)
    yield redis
    await redis.close()


async def later(store: OccupancyStore, node: str, what: str) -> Transitions:
    """Advance time past the grace (the memory store's clock; Redis' own by polling) and return
    the first update that reports a vacated channel."""
    if isinstance(store, MemoryOccupancy):
        store._clock.now += GRACE + 0.01  # type: ignore[attr-defined]
        result = await store.update(node, [])
        assert result is not None
        return result

    async def vacated() -> Transitions | None:
        result = await store.update(node, [])
        return result if result is not None and result.vacated else None

    found: Transitions = await wait_until(vacated, within=5.0, what=what)
    return found


async def test_first_join_occupies_once_and_the_last_leave_vacates_once_after_grace(
    store: OccupancyStore,
) -> None:
    assert await store.update("a", [], reset=True) == Transitions()
    assert await store.update("b", [], reset=True) == Transitions()
    assert (await store.update("a", [("ch", True)])) == Transitions(occupied=["ch"])
    assert (await store.update("b", [("ch", True)])) == Transitions()  # already occupied
    assert (await store.update("a", [("ch", False)])) == Transitions()  # b still holds it
    assert (await store.update("b", [("ch", False)])) == Transitions()  # grace starts
    assert (await later(store, "a", "vacated")).vacated == ["ch"]
    assert (await store.update("b", [])) == Transitions()  # reported once, by one node


async def test_a_join_within_the_grace_cancels_the_vacate(store: OccupancyStore) -> None:
    await store.update("a", [("ch", True)], reset=True)
    assert await store.update("a", [("ch", False)]) == Transitions()
    assert await store.update("a", [("ch", True)]) == Transitions()  # no second occupied
    if isinstance(store, MemoryOccupancy):
        store._clock.now += GRACE + 0.01  # type: ignore[attr-defined]
    assert await store.update("a", []) == Transitions()


async def test_an_unknown_node_is_asked_for_its_whole_membership(store: OccupancyStore) -> None:
    assert await store.update("fresh", [("ch", True)]) is None  # nothing applied
    assert await store.update("fresh", [("ch", True)], reset=True) == Transitions(occupied=["ch"])
    # A reset replaces the membership: ch left (grace), other joined.
    assert await store.update("fresh", [("other", True)], reset=True) == Transitions(occupied=["other"])
    assert (await later(store, "fresh", "ch vacated")).vacated == ["ch"]


async def test_a_dead_nodes_channels_are_vacated_by_a_survivor(store: OccupancyStore) -> None:
    await store.update("dead", [("ch", True)], reset=True)
    await store.update("alive", [], reset=True)
    if isinstance(store, MemoryOccupancy):
        store._clock.now += TTL + 0.01  # type: ignore[attr-defined]
        assert await store.update("alive", []) == Transitions()  # dead released: grace starts
    else:

        async def released() -> bool:
            result = await store.update("alive", [])
            return result is not None and result.vacated == [] and await _gone(store)

        async def _gone(s: OccupancyStore) -> bool:
            assert isinstance(s, RedisOccupancy)
            nodes = await s.shard.client.zrange(f"{s.base}.nodes", 0, -1)
            return b"dead" not in nodes

        await wait_until(released, within=5.0, what="the dead node released")
    assert (await later(store, "alive", "vacated after the dead node")).vacated == ["ch"]
    assert await store.update("dead", []) is None  # forgotten: it must resync if it ever returns


async def test_a_retiring_node_leaves_everything(store: OccupancyStore) -> None:
    await store.update("a", [("x", True), ("y", True)], reset=True)
    await store.update("b", [], reset=True)
    await store.retire("a")
    result = await later(store, "b", "vacated after retire")
    assert sorted(result.vacated) == ["x", "y"]
