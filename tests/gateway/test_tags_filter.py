"""The publication tags filter (gateway/protocol/tags_filter.py): centrifuge's validation rules
and match semantics, pure and fast."""

from __future__ import annotations

import pytest

from gateway.protocol.tags_filter import FilterError, parse

TAGS = {"type": "goal", "team": "red", "minute": "42", "score": "2.50"}


def leaf(key: str, cmp: str, val: str = "", vals: list[str] | None = None) -> dict[str, object]:
    node: dict[str, object] = {"key": key, "cmp": cmp}
    if val:
        node["val"] = val
    if vals is not None:
        node["vals"] = vals
    return node


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (leaf("type", "eq", "goal"), True),
        (leaf("type", "eq", "foul"), False),
        (leaf("missing", "eq", "x"), False),
        (leaf("type", "neq", "foul"), True),
        (leaf("missing", "neq", "x"), True),
        (leaf("team", "in", vals=["red", "blue"]), True),
        (leaf("team", "nin", vals=["red"]), False),
        (leaf("missing", "in", vals=[""]), True),  # a missing tag compares as "" (centrifuge)
        (leaf("team", "ex"), True),
        (leaf("missing", "nex"), True),
        (leaf("type", "sw", "go"), True),
        (leaf("type", "ew", "al"), True),
        (leaf("type", "ct", "oa"), True),
        (leaf("missing", "ct", "x"), False),
        (leaf("minute", "gt", "41"), True),
        (leaf("minute", "gte", "42"), True),
        (leaf("minute", "lt", "42"), False),
        (leaf("score", "lte", "2.5"), True),  # decimal, not string, comparison
        (leaf("minute", "gt", "100"), False),  # "42" > "100" as strings; not as numbers
        (leaf("type", "gt", "1"), False),  # not a number: no match
        (leaf("missing", "gt", "1"), False),
        ({"op": "and", "nodes": [leaf("type", "eq", "goal"), leaf("team", "eq", "red")]}, True),
        ({"op": "and", "nodes": [leaf("type", "eq", "goal"), leaf("team", "eq", "blue")]}, False),
        ({"op": "or", "nodes": [leaf("type", "eq", "foul"), leaf("team", "eq", "red")]}, True),
        ({"op": "not", "nodes": [leaf("type", "eq", "goal")]}, False),
    ],
)
def test_match(node, expected):
    assert parse(node).match(TAGS) is expected


def test_publication_without_tags():
    assert parse(leaf("type", "nex")).match(None)
    assert not parse(leaf("type", "eq", "goal")).match(None)


@pytest.mark.parametrize(
    "node",
    [
        {},  # leaf without cmp
        leaf("type", "zz", "x"),
        leaf("type", "eq"),  # eq needs val
        leaf("type", "eq", "x", vals=["y"]),
        leaf("type", "in"),  # in needs vals
        leaf("type", "in", "x", vals=["y"]),
        leaf("type", "ex", "x"),
        leaf("", "eq", "x"),  # key required
        {"op": "and", "nodes": []},
        {"op": "not", "nodes": [leaf("a", "ex"), leaf("b", "ex")]},
        {"op": "xor", "nodes": [leaf("a", "ex")]},
        {"key": 5, "cmp": "eq", "val": "x"},
        {"key": "a", "cmp": "in", "vals": [1]},
        "not an object",
    ],
)
def test_invalid_filters_are_refused(node):
    with pytest.raises(FilterError):
        parse(node)


def test_depth_is_bounded():
    node: dict[str, object] = leaf("a", "ex")
    for _ in range(100):
        node = {"op": "not", "nodes": [node]}
    with pytest.raises(FilterError):
        parse(node)
