"""gateway/gc_pauses.py: startup's survivors frozen out of every scan, every pause exported — against
this process's real collector (each test restores it), and in a gateway process through /metrics."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

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
