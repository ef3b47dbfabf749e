"""gateway/gc_pacing.py: full collections on the pacer's schedule, startup objects frozen, pauses
exported — in-process against the real collector, and in a gateway process through /metrics.

The in-process tests change this process's collector; each restores it (``pacer`` fixture)."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.config import ConfigError, load_settings
from gateway.gc_pacing import FULL_COLLECTIONS_OFF, GcPacer
from tests.support import GatewayProcess, scaled, wait_until


class Node:
    """A reference cycle with a weak handle on it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
async def pacer() -> AsyncIterator[list[GcPacer]]:
    """Pacers a test starts; all are stopped and the collector is checked back to normal."""
    before = gc.get_threshold()
    made: list[GcPacer] = []
    yield made
    for p in made:
        p.close()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def started(made: list[GcPacer], interval: float) -> tuple[GcPacer, asyncio.Task[None]]:
    p = GcPacer(interval, CollectorRegistry())
    p.install()
    made.append(p)
    task = asyncio.get_running_loop().create_task(p.run())
    await asyncio.sleep(0)  # run() takes over before its first sleep
    return p, task


async def test_run_freezes_startup_objects_and_takes_full_collections_over(pacer: list[GcPacer]) -> None:
    young, middle, _ = gc.get_threshold()
    p, task = await started(pacer, 3600)
    try:
        assert gc.get_freeze_count() > 1000  # modules, functions, classes: out of every scan
        assert gc.get_threshold() == (young, middle, FULL_COLLECTIONS_OFF)
    finally:
        task.cancel()
    p.close()
    assert gc.get_threshold()[2] != FULL_COLLECTIONS_OFF and gc.get_freeze_count() == 0


async def test_old_cyclic_garbage_waits_for_the_paced_collection(pacer: list[GcPacer]) -> None:
    p, task = await started(pacer, 3600)
    try:
        cycle = Node()
        ref = weakref.ref(cycle)
        gc.collect(1)  # survives two young collections: now in the oldest generation
        gc.collect(1)
        del cycle
        gc.collect(1)  # young collections never look at it, and no automatic full one comes due
        assert ref() is not None
        assert p.collect() >= 1
        assert ref() is None
    finally:
        task.cancel()


async def test_the_pacer_collects_every_interval_and_exports_the_pauses(pacer: list[GcPacer]) -> None:
    p, task = await started(pacer, 0.05)
    try:
        cycle = Node()
        ref = weakref.ref(cycle)
        gc.collect(1)
        gc.collect(1)
        del cycle
        await wait_until(lambda: ref() is None, 30, "the paced collection to free the cycle")
    finally:
        task.cancel()
    registry = CollectorRegistry()
    registry.register(p.pause)
    registry.register(p.paced)
    text = generate_latest(registry).decode()
    paced = next(
        line for line in text.splitlines() if line.startswith("taskcast_gateway_gc_paced_collections_total")
    )
    assert float(paced.split()[-1]) >= 1
    full = next(
        line
        for line in text.splitlines()
        if line.startswith('taskcast_gateway_gc_pause_seconds_count{generation="2"}')
    )
    assert float(full.split()[-1]) >= 1


async def test_interval_zero_leaves_the_collector_alone(pacer: list[GcPacer]) -> None:
    before = gc.get_threshold()
    p = GcPacer(0)
    pacer.append(p)
    await asyncio.wait_for(p.run(), scaled(5))  # returns at once
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


async def test_two_pacers_in_one_process_share_the_collector(pacer: list[GcPacer]) -> None:
    """``taskcast up`` and tests run several runtimes in one process: the last to close gives back."""
    first, t1 = await started(pacer, 3600)
    second, t2 = await started(pacer, 3600)
    t1.cancel()
    t2.cancel()
    first.close()
    assert gc.get_threshold()[2] == FULL_COLLECTIONS_OFF and gc.get_freeze_count() > 0
    second.close()
    assert gc.get_threshold()[2] != FULL_COLLECTIONS_OFF and gc.get_freeze_count() == 0


def test_a_negative_interval_is_refused_naming_the_option(tmp_path: Path) -> None:
    def load(value: object) -> float:
        path = tmp_path / "gw.json"
        path.write_text(json.dumps({"node": {"gc_full_collection_interval": value}}))
        return load_settings(str(path), {})[0].node.gc_full_collection_interval

    with pytest.raises(ConfigError) as err:
        load(-1)
    assert "node.gc_full_collection_interval" in str(err.value)
    assert load("30s") == 30 and load(0) == 0


@pytest.fixture
def paced_gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        {"node": {"gc_full_collection_interval": "1s"}, "prometheus": {"enabled": True}}, tmp_path
    ).start()
    yield gw
    gw.terminate()


async def test_a_gateway_process_paces_its_full_collections(paced_gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=paced_gateway.internal_url, timeout=scaled(30)) as http:

        async def paced() -> float:
            text = (await http.get("/metrics")).text
            line = next(
                (x for x in text.splitlines() if x.startswith("taskcast_gateway_gc_paced_collections_total")),
                "",
            )
            return float(line.split()[-1]) if line else 0.0

        async def two_paced() -> bool:
            return await paced() >= 2

        await wait_until(two_paced, 60, "two paced collections")
        text = (await http.get("/metrics")).text
        assert 'taskcast_gateway_gc_pause_seconds_bucket{generation="0"' in text
