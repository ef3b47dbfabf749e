"""Fossil delta (gateway/protocol/fossil.py): deltas apply back exactly, and ``create`` does work
linear in the sizes of its inputs on fossil's worst cases (repetitive data), counted
deterministically: every index or slice of the inputs goes through a counting ``bytes``."""

from __future__ import annotations

import os
import random
from typing import Any, SupportsIndex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocol import fossil


class BudgetExceeded(Exception):
    pass


class Counted(bytes):
    """Bytes that count the Python-level reads of themselves (``[i]`` and ``[a:b]``) and the
    bytes those reads touch, and stop the caller past a budget."""

    reads = 0
    touched = 0
    budget = 0

    def __getitem__(self, key: SupportsIndex | slice) -> Any:  # type: ignore[override]
        value = super().__getitem__(key)
        Counted.reads += 1
        Counted.touched += len(value) if isinstance(key, slice) else 1
        if Counted.reads > Counted.budget:
            raise BudgetExceeded
        return value


def counted_create(source: bytes, target: bytes, budget: int) -> tuple[bytes, int, int]:
    Counted.reads = Counted.touched = 0
    Counted.budget = budget
    delta = fossil.create(Counted(source), Counted(target))
    return delta, Counted.reads, Counted.touched


def worst_cases(n: int) -> dict[str, tuple[bytes, bytes]]:
    """Repetitive inputs, where every source block has the same hash."""
    return {
        # the case: {"s":"x"*n} then {"s":"y"+"x"*(n-1)}
        "one-byte-edit": (b'{"s":"' + b"x" * n + b'"}', b'{"s":"y' + b"x" * (n - 1) + b'"}'),
        "identical": (b"x" * n, b"x" * n),
        "shifted-period": (b"ab" * (n // 2), b"ba" * (n // 2)),
        "short-copies": (b"x" * n, (b"x" * 31 + b"y") * (n // 32)),
        "no-copies": (b"x" * n, (b"x" * 15 + b"y") * (n // 16)),
    }


@pytest.mark.parametrize("name", sorted(worst_cases(64)))
def test_worst_cases_reconstruct_exactly_and_cost_linear_reads(name: str):
    reads_at: dict[int, int] = {}
    for n in (4096, 16384):
        source, target = worst_cases(n)[name]
        size = len(source) + len(target)
        # The quadratic search read ~250 candidates x the match length per target position.
        delta, reads, touched = counted_create(source, target, budget=4 * size)
        assert fossil.apply(source, delta) == target
        assert touched <= 32 * size  # slices compared: memcmp, a few bytes per byte
        reads_at[n] = reads
    assert reads_at[16384] <= 5 * reads_at[4096] + 64  # 4x the input, about 4x the reads


def test_work_stays_proportional_to_the_input_on_every_worst_case():
    for n in (2048, 8192, 32768):
        for source, target in worst_cases(n).values():
            delta, work = fossil.create_counted(source, target)
            assert fossil.apply(source, delta) == target
            assert work <= 16 * (len(source) + len(target))


def test_typical_json_update_is_a_small_delta():
    rng = random.Random(7)
    steps = [{"id": i, "state": rng.choice(["queued", "running", "done"])} for i in range(600)]
    before = repr(steps).encode()
    steps[300]["state"] = "failed"
    after = repr(steps).encode()
    delta = fossil.create(before, after)
    assert fossil.apply(before, delta) == after
    assert len(delta) < 100


def test_random_data_and_edits():
    source = os.urandom(5000)
    edited = bytearray(source)
    for i in (10, 2000, 4999):
        edited[i] ^= 0xFF
    for target in (os.urandom(3000), bytes(edited), source[1000:] + source[:1000], b"", source[:10]):
        assert fossil.apply(source, fossil.create(source, target)) == target


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.binary(max_size=400), st.integers(0, 400), st.integers(0, 400))
def test_any_delta_applies(source: bytes, insert: bytes, cut: int, keep: int):
    target = source[:cut] + insert + source[cut + keep :]
    assert fossil.apply(source, fossil.create(source, target)) == target


def test_apply_refuses_bad_deltas():
    delta = fossil.create(b"x" * 100, b"x" * 99 + b"y")
    with pytest.raises(fossil.DeltaError):
        fossil.apply(b"z" * 100, delta)
    with pytest.raises(fossil.DeltaError):
        fossil.apply(b"x" * 100, delta[:-1])
