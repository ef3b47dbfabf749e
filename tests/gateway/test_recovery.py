"""Tests for gateway.protocol.recovery: tables for the Centrifugo rules (PROTOCOL.md §3.3),
hypothesis for merge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.messages import Publication, StreamPosition
from gateway.protocol.recovery import (
    NotRecovered,
    NotRecoveredReason,
    Recovered,
    merge,
    recover_cache,
    recover_stream,
)

EPOCH = "abcdEFGH"


def pubs(*offsets: int) -> list[Publication]:
    return [Publication(data=b"{}", offset=o) for o in offsets]


def offsets(publications: list[Publication]) -> list[int]:
    return [p.offset for p in publications]


# recover_stream --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "history", "top", "limit_reached", "expected"),
    [
        pytest.param((5, EPOCH), [], 5, False, [], id="up-to-date"),
        pytest.param((0, EPOCH), [], 0, False, [], id="empty-stream"),
        pytest.param((3, EPOCH), [4, 5], 5, False, [4, 5], id="missed-two"),
        pytest.param((3, ""), [4, 5], 5, False, [4, 5], id="empty-epoch-skips-check"),
        pytest.param((0, ""), [1, 2], 2, False, [1, 2], id="since-empty-from-start"),
        pytest.param((3, EPOCH), [4, 5], 5, True, [4, 5], id="limit-reached-exactly-at-top"),
        pytest.param((3, "other"), [4, 5], 5, False, NotRecoveredReason.EPOCH_CHANGED, id="epoch-changed"),
        pytest.param(
            (5, "other"), [], 5, False, NotRecoveredReason.EPOCH_CHANGED, id="epoch-changed-same-offset"
        ),
        pytest.param((7, EPOCH), [], 5, False, NotRecoveredReason.AHEAD, id="ahead-of-top"),
        pytest.param((1, EPOCH), [4, 5], 5, False, NotRecoveredReason.GAP, id="trimmed"),
        pytest.param((3, EPOCH), [], 5, False, NotRecoveredReason.GAP, id="expired-stream"),
        pytest.param((3, EPOCH), [4, 6], 6, False, NotRecoveredReason.GAP, id="hole-in-the-middle"),
        pytest.param((3, EPOCH), [4, 4, 6], 6, False, NotRecoveredReason.GAP, id="duplicate-hides-hole"),
        pytest.param((3, EPOCH), [4, 5], 7, True, NotRecoveredReason.TOO_MANY, id="more-than-limit"),
        pytest.param((3, EPOCH), [4, 5], 7, False, NotRecoveredReason.GAP, id="short-read-not-at-top"),
        pytest.param((1, EPOCH), [4, 5], 7, True, NotRecoveredReason.TOO_MANY, id="limit-and-trim"),
    ],
)
def test_recover_stream(
    requested: tuple[int, str],
    history: list[int],
    top: int,
    limit_reached: bool,
    expected: list[int] | NotRecoveredReason,
) -> None:
    result = recover_stream(
        StreamPosition(*requested), pubs(*history), StreamPosition(top, EPOCH), limit_reached=limit_reached
    )

    if isinstance(expected, NotRecoveredReason):
        assert result == NotRecovered(expected)
    else:
        assert isinstance(result, Recovered)
        assert offsets(result.publications) == expected


def test_recover_stream_returns_the_history_unchanged() -> None:
    history = [Publication(data=b'{"a":1}', offset=2, tags={"t": "1"}), Publication(data=b"2", offset=3)]

    result = recover_stream(StreamPosition(1, EPOCH), history, StreamPosition(3, EPOCH), limit_reached=False)

    assert result == Recovered(history)


def test_not_recovered_reason_compares_as_string() -> None:
    assert NotRecovered(NotRecoveredReason.GAP).reason == "gap"


@given(
    requested=st.integers(min_value=0, max_value=50),
    first=st.integers(min_value=1, max_value=60),
    count=st.integers(min_value=0, max_value=20),
    extra=st.integers(min_value=0, max_value=5),
    same_epoch=st.booleans(),
    limit_reached=st.booleans(),
)
def test_recover_stream_properties(
    requested: int, first: int, count: int, extra: int, same_epoch: bool, limit_reached: bool
) -> None:
    # A broker's answer: contiguous offsets first..first+count-1, top at or beyond the last one.
    history = pubs(*range(first, first + count))
    top = StreamPosition((first + count - 1 if count else first - 1) + extra, EPOCH)
    asked = StreamPosition(requested, EPOCH if same_epoch else "other")

    result = recover_stream(asked, history, top, limit_reached=limit_reached)

    if isinstance(result, Recovered):
        # Never claims success across epochs, and hands the client exactly what it is missing.
        assert same_epoch
        assert requested <= top.offset
        assert offsets(result.publications) == list(range(requested + 1, top.offset + 1))
    else:
        complete = offsets(history) == list(range(requested + 1, top.offset + 1))
        assert not (same_epoch and requested <= top.offset and complete)
        if not same_epoch:
            assert result.reason is NotRecoveredReason.EPOCH_CHANGED


@given(requested=st.integers(min_value=0, max_value=50), top=st.integers(min_value=0, max_value=50))
def test_recover_stream_empty_epoch_never_fails_on_epoch(requested: int, top: int) -> None:
    result = recover_stream(
        StreamPosition(requested, ""), [], StreamPosition(top, EPOCH), limit_reached=False
    )

    assert not isinstance(result, NotRecovered) or result.reason is not NotRecoveredReason.EPOCH_CHANGED
    assert isinstance(result, Recovered) == (requested == top)


# recover_cache ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "latest", "top", "expected"),
    [
        pytest.param((5, EPOCH), [5], (5, EPOCH), [], id="already-has-top"),
        pytest.param((3, EPOCH), [5], (5, EPOCH), [5], id="missed-some"),
        pytest.param((0, ""), [5], (5, EPOCH), [5], id="first-subscribe"),
        pytest.param((5, "other"), [5], (5, EPOCH), [5], id="epoch-changed-same-offset"),
        pytest.param((9, EPOCH), [5], (5, EPOCH), [5], id="ahead"),
        pytest.param((5, EPOCH), [], (5, EPOCH), [], id="has-top-history-expired"),
        pytest.param((0, ""), [], (0, EPOCH), NotRecoveredReason.EMPTY, id="empty-channel"),
        pytest.param((0, EPOCH), [], (0, EPOCH), NotRecoveredReason.EMPTY, id="offset-zero-is-not-has-top"),
        pytest.param((3, EPOCH), [], (5, EPOCH), NotRecoveredReason.EMPTY, id="history-expired"),
        pytest.param((3, EPOCH), [4], (5, EPOCH), NotRecoveredReason.GAP, id="latest-is-not-top"),
        pytest.param((3, EPOCH), [5, 4], (5, EPOCH), [5], id="only-newest-counts"),
    ],
)
def test_recover_cache(
    requested: tuple[int, str],
    latest: list[int],
    top: tuple[int, str],
    expected: list[int] | NotRecoveredReason,
) -> None:
    result = recover_cache(StreamPosition(*requested), pubs(*latest), StreamPosition(*top))

    if isinstance(expected, NotRecoveredReason):
        assert result == NotRecovered(expected)
    else:
        assert isinstance(result, Recovered)
        assert offsets(result.publications) == expected


# merge -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recovered", "buffered", "after", "expected", "ok"),
    [
        pytest.param([], [], 0, [], True, id="nothing"),
        pytest.param([], [], 7, [], True, id="nothing-after-top"),
        pytest.param([4, 5], [], 3, [4, 5], True, id="history-only"),
        pytest.param([], [4, 5], 3, [4, 5], True, id="buffer-only"),
        pytest.param([4, 5], [5, 6, 7], 3, [4, 5, 6, 7], True, id="overlap"),
        pytest.param([4, 5], [7, 6], 3, [4, 5, 6, 7], True, id="buffer-out-of-order"),
        pytest.param([4, 5], [2, 3], 3, [4, 5], True, id="stale-buffered-dropped"),
        pytest.param([4, 5], [7], 3, [4, 5, 7], False, id="gap-between"),
        pytest.param([5], [], 3, [5], False, id="gap-at-start"),
        pytest.param([], [6], 5, [6], True, id="live-right-after-top"),
        pytest.param([], [8], 5, [8], False, id="live-skipped-ahead"),
        pytest.param([0, 0], [0], 0, [], True, id="offsetless-dropped"),
    ],
)
def test_merge(recovered: list[int], buffered: list[int], after: int, expected: list[int], ok: bool) -> None:
    merged, merged_ok = merge(pubs(*recovered), pubs(*buffered), after=after)

    assert offsets(merged) == expected
    assert merged_ok is ok


def test_merge_prefers_the_recovered_copy() -> None:
    from_history = Publication(data=b'"history"', offset=4)
    from_buffer = Publication(data=b'"buffer"', offset=4)

    merged, ok = merge([from_history], [from_buffer], after=3)

    assert ok
    assert merged == [from_history]
    assert merged[0] is from_history


@st.composite
def overlapping_reads(draw: st.DrawFn) -> tuple[int, list[Publication], list[Publication], set[int]]:
    """A known position, a stream of offsets around it with some lost, split into a history read
    and a live buffer that overlap, shuffled and duplicated."""
    after = draw(st.integers(min_value=0, max_value=30))
    stream = list(range(max(after - 5, 1), after + draw(st.integers(min_value=0, max_value=25)) + 1))
    lost = draw(st.sets(st.sampled_from(stream))) if stream else set()
    delivered = [o for o in stream if o not in lost]
    cut = draw(st.integers(min_value=0, max_value=len(delivered)))
    overlap = draw(st.integers(min_value=0, max_value=3))
    history = delivered[: cut + overlap]
    buffer = delivered[max(cut - overlap, 0) :]
    buffer = buffer + draw(st.lists(st.sampled_from(buffer), max_size=5)) if buffer else buffer
    buffer = draw(st.permutations(buffer))
    history = draw(st.permutations(history))
    return after, pubs(*history), pubs(*buffer), lost


@given(overlapping_reads())
def test_merge_properties(case: tuple[int, list[Publication], list[Publication], set[int]]) -> None:
    after, history, buffer, lost = case

    merged, ok = merge(history, buffer, after=after)

    got = offsets(merged)
    everything = {p.offset for p in history + buffer if p.offset > after}
    assert got == sorted(everything)
    assert len(got) == len(set(got))
    assert all(o > after for o in got)
    assert ok == (got == list(range(after + 1, after + 1 + len(got))))
    # A lost offset strictly between the known position and the newest merged one is a gap.
    if any(after < o < max(got, default=after) for o in lost):
        assert not ok


@given(st.lists(st.integers(min_value=0, max_value=40)), st.lists(st.integers(min_value=0, max_value=40)))
def test_merge_is_insensitive_to_order_and_duplicates(recovered: list[int], buffered: list[int]) -> None:
    first = merge(pubs(*recovered), pubs(*buffered), after=10)
    swapped = merge(pubs(*reversed(buffered)), pubs(*recovered, *recovered), after=10)

    assert offsets(first[0]) == offsets(swapped[0])
    assert first[1] == swapped[1]
