"""gateway/gc_pauses.py: startup's survivors frozen out of every scan, every pause exported — against
this process's real collector (each test restores it), and in a gateway process through /metrics."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway import gc_pauses
from gateway.gc_pauses import GcPauses, freeze_startup, thaw
from tests.support import GatewayProcess, scaled


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector() -> Iterator[None]:
    """Every test leaves the collector unfrozen and without our callbacks."""
    callbacks = list(gc.callbacks)
    yield
    assert gc.get_freeze_count() == 0
    assert gc.callbacks == callbacks


def test_startup_survivors_leave_every_scan_and_come_back_when_the_last_holder_thaws(collector: None) -> None:
    garbage = Cycle()
    garbage_ref = weakref.ref(garbage)
    del garbage  # cyclic garbage present at startup is collected, not frozen
    kept = Cycle()
    frozen = freeze_startup()
    try:
        assert garbage_ref() is None
        assert frozen > 1000 and frozen == gc.get_freeze_count()  # modules, functions, classes…
        scanned = len(gc.get_objects())
        assert scanned < frozen  # what collections still scan: far less than what startup left
        assert freeze_startup() == frozen  # a second runtime in the process: one more holder only
        kept_ref = weakref.ref(kept)
        del kept
        gc.collect()
        assert kept_ref() is not None  # a frozen cycle waits for the thaw…
        thaw()
        assert gc.get_freeze_count() == frozen  # …of the last holder
    finally:
        thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert kept_ref() is None


def test_every_collection_pause_is_exported_by_generation(collector: None) -> None:
    ticks = iter(range(1000))
    pauses = GcPauses(registry := CollectorRegistry(), clock=lambda: next(ticks) * 0.002)  # 2 ms each
    pauses.install()
    pauses.install()  # idempotent
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        pauses.close()
        pauses.close()
    gc.collect(2)  # not observed any more
    text = generate_latest(registry).decode()
    assert 'taskcast_gateway_gc_pause_seconds_count{generation="0"} 1.0' in text
    assert 'taskcast_gateway_gc_pause_seconds_count{generation="2"} 1.0' in text
    assert 'taskcast_gateway_gc_pause_seconds_bucket{generation="2",le="0.0025"} 1.0' in text
    assert 'taskcast_gateway_gc_pause_seconds_bucket{generation="2",le="0.001"} 0.0' in text


async def _loop_turns() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_survivors_of_each_full_collection_are_frozen_on_the_loop(collector: None) -> None:
    pauses = GcPauses(CollectorRegistry())
    pauses.install(asyncio.get_running_loop(), lambda: 0)
    frozen = freeze_startup()
    try:
        kept = [Cycle() for _ in range(1000)]  # made after startup: scanned until a full collection
        garbage_ref = weakref.ref(Cycle())
        gc.collect()
        assert garbage_ref() is None  # cyclic garbage is collected, not frozen
        await _loop_turns()
        assert gc.get_freeze_count() >= frozen + 900  # the survivors left every later scan
        scanned = len(gc.get_objects())
        assert scanned < 1000
        freed = weakref.ref(kept[0])
        kept[0].me = None
        kept.pop(0)
        assert freed() is None  # a frozen object without a cycle still goes by reference counting
    finally:
        pauses.close()
        thaw()


async def test_past_what_the_connections_explain_the_valve_unfreezes_and_collects(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CollectorRegistry()
    pauses = GcPauses(registry)
    live = [100]
    pauses.install(asyncio.get_running_loop(), lambda: live[0])
    monkeypatch.setattr(gc_pauses, "FROZEN_SLACK", 0)
    monkeypatch.setattr(gc_pauses, "FROZEN_PER_CONNECTION", 50)
    freeze_startup()
    try:
        leaked = [Cycle() for _ in range(2000)]
        gc.collect()
        await _loop_turns()  # 100 connections explain 5,000 objects: frozen
        assert pauses.frozen_bound() == gc_pauses._startup_frozen[0] + 5000
        assert gc.get_freeze_count() >= gc_pauses._startup_frozen[0] + 1900
        leaked_ref = weakref.ref(leaked[0])
        del leaked  # frozen cyclic garbage: only a thaw can collect it
        live[0] = 0  # the connections went: the frozen count is past the bound
        gc.collect()
        await _loop_turns()
        assert leaked_ref() is None
        text = generate_latest(registry).decode()
        assert "taskcast_gateway_gc_thaws_total 1.0" in text
        assert gc.get_freeze_count() > 0  # what survived is frozen again
    finally:
        pauses.close()
        thaw()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess({"prometheus": {"enabled": True}}, tmp_path).start()
    yield gw
    gw.terminate()


async def test_a_gateway_process_freezes_its_startup_and_exports_the_pauses(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.internal_url, timeout=scaled(30)) as http:
        text = (await http.get("/metrics")).text
    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("taskcast_gateway_gc_")
    )
    # The startup collection before the freeze is observed; then the frozen objects stay out of scans.
    assert float(samples['taskcast_gateway_gc_pause_seconds_count{generation="2"}']) >= 1
    assert float(samples["taskcast_gateway_gc_frozen_objects"]) > 10_000
