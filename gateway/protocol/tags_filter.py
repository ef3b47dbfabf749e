"""Publication tags filters: the subscribe ``tf`` field (Centrifugo v6 "publication filtering").

A filter is a tree of Centrifugo's ``FilterNode`` JSON objects: a node with ``op`` ``"and"`` /
``"or"`` (one or more ``nodes``) or ``"not"`` (exactly one), or a leaf (no ``op``) comparing
the tag ``key`` with ``cmp``: ``eq``, ``neq``, ``in``, ``nin`` (``vals``), ``ex``, ``nex`` (no
value), ``sw``, ``ew``, ``ct`` (starts with / ends with / contains ``val``) and the decimal
comparisons ``gt``, ``gte``, ``lt``, ``lte``. ``parse`` validates a tree once, at subscribe time,
with centrifuge's rules, and returns a compiled ``TagsFilter`` whose ``match(tags)`` runs per
publication. Pure: imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation

Tags = Mapping[str, str] | None
_Match = Callable[[Mapping[str, str]], bool]

MAX_DEPTH = 32
"""Deepest tree accepted (Centrifugo bounds the filter by the command size; recursion must
not be unbounded here)."""
MAX_NODES = 1024


class FilterError(ValueError):
    """A malformed filter: the subscribe is answered 107 (bad request), as Centrifugo does."""


def _decimal(value: str) -> Decimal | None:
    try:
        number = Decimal(value)
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _numeric(key: str, cmp: str, val: str) -> _Match:
    bound = _decimal(val)
    test: Callable[[Decimal], bool]
    if bound is None:
        return lambda tags: False  # centrifuge: an unparsable operand matches nothing
    if cmp == "gt":
        test = bound.__lt__
    elif cmp == "gte":
        test = bound.__le__
    elif cmp == "lt":
        test = bound.__gt__
    else:
        test = bound.__ge__

    def match(tags: Mapping[str, str]) -> bool:
        raw = tags.get(key)
        if raw is None:
            return False
        number = _decimal(raw)
        return number is not None and test(number)

    return match


def _leaf(node: Mapping[str, object]) -> _Match:
    key, cmp, val, vals = node.get("key", ""), node.get("cmp", ""), node.get("val", ""), node.get("vals")
    if not isinstance(key, str) or not isinstance(cmp, str) or not isinstance(val, str):
        raise FilterError("key, cmp and val must be strings")
    if vals is None:
        vals = []
    if not isinstance(vals, list) or not all(isinstance(v, str) for v in vals):
        raise FilterError("vals must be an array of strings")
    _validate_leaf(key, cmp, val, vals)
    return _compile_leaf(key, cmp, val, vals)


def _validate_leaf(key: str, cmp: str, val: str, vals: list[str]) -> None:
    """centrifuge's leaf rules: which comparisons take ``val``, ``vals`` or neither."""
    if not cmp:
        raise FilterError("leaf node must have cmp set")
    if cmp in ("eq", "neq", "sw", "ew", "ct", "gt", "gte", "lt", "lte"):
        if not val:
            raise FilterError(f"{cmp} comparison requires val")
        if vals:
            raise FilterError(f"{cmp} comparison must not use vals")
    elif cmp in ("in", "nin"):
        if not vals:
            raise FilterError(f"{cmp} comparison requires non-empty vals")
        if val:
            raise FilterError(f"{cmp} comparison must not use val")
    elif cmp in ("ex", "nex"):
        if val or vals:
            raise FilterError(f"{cmp} comparison must not use val or vals")
    else:
        raise FilterError(f"unknown comparison operator: {cmp}")
    if not key and cmp not in ("ex", "nex"):
        raise FilterError("leaf node requires key")


def _compile_leaf(key: str, cmp: str, val: str, vals: list[str]) -> _Match:
    if cmp == "eq":
        return lambda tags: tags.get(key) == val
    if cmp == "neq":
        return lambda tags: tags.get(key) != val
    if cmp in ("in", "nin"):
        # A missing tag compares as "" (Go's zero value), exactly as centrifuge does.
        members = frozenset(vals)
        if cmp == "in":
            return lambda tags: tags.get(key, "") in members
        return lambda tags: tags.get(key, "") not in members
    if cmp == "ex":
        return lambda tags: key in tags
    if cmp == "nex":
        return lambda tags: key not in tags
    if cmp == "sw":
        return lambda tags: (v := tags.get(key)) is not None and v.startswith(val)
    if cmp == "ew":
        return lambda tags: (v := tags.get(key)) is not None and v.endswith(val)
    if cmp == "ct":
        return lambda tags: (v := tags.get(key)) is not None and val in v
    return _numeric(key, cmp, val)


class _Builder:
    def __init__(self) -> None:
        self.nodes = 0

    def build(self, node: object, depth: int) -> _Match:
        if not isinstance(node, dict):
            raise FilterError("filter node must be an object")
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise FilterError("filter too large")
        op = node.get("op", "")
        if not op:
            return _leaf(node)
        children = node.get("nodes")
        if not isinstance(children, list):
            children = []
        if op in ("and", "or"):
            if not children:
                raise FilterError(f"{op} node must have at least one child")
            parts = tuple(self.build(c, depth + 1) for c in children)
            if op == "and":
                return lambda tags: all(p(tags) for p in parts)
            return lambda tags: any(p(tags) for p in parts)
        if op == "not":
            if len(children) != 1:
                raise FilterError("not node must have exactly one child")
            inner = self.build(children[0], depth + 1)
            return lambda tags: not inner(tags)
        raise FilterError(f"invalid op: {op}")


_NO_TAGS: Mapping[str, str] = {}


class TagsFilter:
    """A validated filter; ``match`` decides one publication from its tags."""

    __slots__ = ("_match",)

    def __init__(self, match: _Match) -> None:
        self._match = match

    def match(self, tags: Tags) -> bool:
        return self._match(tags if tags is not None else _NO_TAGS)


def parse(tree: object) -> TagsFilter:
    """Validate a ``tf`` tree and compile it.

    Raises:
        FilterError: the tree breaks centrifuge's validation rules (or is too deep / large).
    """
    return TagsFilter(_Builder().build(tree, 1))
