"""``projections.iso`` prints the wall-clock fields as given, milliseconds, ``Z``: the same text
whether the value was formatted before (naive values are remembered, boundedly) or not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from status_api.domain import projections
from status_api.domain.projections import iso


def test_naive_and_aware_values_print_their_own_fields() -> None:
    naive = datetime(2026, 12, 2, 10, 0, 0, 123456)
    assert iso(naive) == "2026-12-02T10:00:00.123Z"
    assert iso(naive) == "2026-12-02T10:00:00.123Z"  # remembered
    utc = datetime(2026, 12, 2, 10, 0, 0, 123000, tzinfo=UTC)
    plus_one = datetime(2026, 12, 2, 11, 0, 0, 123000, tzinfo=timezone(timedelta(hours=1)))
    assert utc == plus_one  # the same instant: a cache keyed by value would mix them up
    assert iso(utc) == "2026-12-02T10:00:00.123Z"
    assert iso(plus_one) == "2026-12-02T11:00:00.123Z"
    assert iso(None) is None


def test_the_memory_is_bounded() -> None:
    start = datetime(2026, 1, 1)
    for n in range(projections._ISO_MAX + 10):
        value = start + timedelta(milliseconds=n)
        assert iso(value) == value.isoformat(timespec="milliseconds") + "Z"
    assert len(projections._ISO) <= projections._ISO_MAX
