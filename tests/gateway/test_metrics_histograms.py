"""gateway/metrics.py's lock-free histograms and counters expose exactly the samples of a
prometheus_client ``Histogram`` / ``Counter`` given the same observations (pure, in-process)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.metrics import LoopCounters, LoopHistograms

CREATED = re.compile(r"_created(\{[^}]*\})? \S+")


def exposition(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return sorted(CREATED.sub(r"_created\1 T", line) for line in text.splitlines())


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["publish", "batch"]), st.floats(min_value=0, max_value=50, allow_nan=False)
        ),
        max_size=30,
    )
)
def test_same_samples_as_a_prometheus_histogram(observations):
    reference, ours = CollectorRegistry(), CollectorRegistry()
    expected = Histogram("h_seconds", "doc.", ["protocol", "method"], registry=reference)
    mine = LoopHistograms("h_seconds", "doc.", ("protocol", "method"))
    ours.register(mine)
    for method, value in observations:
        expected.labels("http", method).observe(value)
        mine.labels("http", method).observe(value)
    assert exposition(ours) == exposition(reference)


def test_custom_buckets_without_labels():
    reference, ours = CollectorRegistry(), CollectorRegistry()
    buckets = (0.001, 0.01, 1, 10)
    expected = Histogram("lag_seconds", "doc.", registry=reference, buckets=buckets)
    mine = LoopHistograms("lag_seconds", "doc.", (), buckets=buckets)
    ours.register(mine)
    for value in (0.0, 0.001, 0.0011, 5.0, 10.0, 11.0):
        expected.observe(value)
        mine.labels().observe(value)
    assert exposition(ours) == exposition(reference)


def test_counters_have_the_samples_of_a_prometheus_counter():
    reference, ours = CollectorRegistry(), CollectorRegistry()
    expected = Counter("actions", "doc.", ["action", "ns"], registry=reference)
    mine = LoopCounters("actions", "doc.", ("action", "ns"))
    ours.register(mine)
    assert exposition(ours) == exposition(reference)
    for action, n in (("publish", 1), ("history", 2), ("publish", 3)):
        expected.labels(action, "").inc(n)
        mine.inc((action, ""), n)
    assert exposition(ours) == exposition(reference)
