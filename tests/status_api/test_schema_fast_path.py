"""The fastjsonschema fast path (status_api/schemas.py) never accepts what jsonschema rejects:
every labelled example and a few hundred mutations of valid envelopes and data bodies get the
same verdict from the fast validator and from Draft 2020-12."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from status_api.schemas import SchemaStore, _compile_fast, _fast_compatible

SCHEMA = Path(__file__).resolve().parents[2] / "schema"
STORE = SchemaStore(SCHEMA)
ODD_VALUES: list[Any] = [None, True, 0, 1.0, -1, 2**70, "", "x", "abc\n", "Ä" * 600, [], {}, [1], {"a": 1}]


def _fast(name: str) -> Any:
    return STORE._fast.get(name) or STORE._data_fast[name]


def _jsonschema_errors(name: str, doc: Any) -> list[str]:
    validator = STORE._validators.get(name) or STORE._data[name]
    return [e.message for e in validator.iter_errors(doc)]


def _fast_accepts(name: str, doc: Any) -> bool:
    try:
        _fast(name)(doc)
    except Exception:
        return False
    return True


def _mutations(doc: dict[str, Any]) -> list[Any]:
    out: list[Any] = [doc]
    for key in list(doc):
        out.append({k: v for k, v in doc.items() if k != key})
        for odd in ODD_VALUES:
            out.append({**doc, key: odd})
        if isinstance(doc[key], dict):
            out.extend({**doc, key: sub} for sub in _mutations(doc[key])[1:])
    out.append({**doc, "unexpected": 1})
    return out


def _examples() -> list[tuple[str, Any]]:
    return [
        (p.parent.name, json.loads(p.read_text())) for p in sorted((SCHEMA / "examples").glob("*/*/*.json"))
    ]


def test_every_shipped_schema_has_a_fast_validator() -> None:
    for name in ("task-event", "task-create", "task-summary", "task-detail", "task-project"):
        assert STORE.fast_path(name)
    assert all(STORE.fast_path(n) for n in STORE.data_schema_names)


@pytest.mark.parametrize(("name", "doc"), _examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_fast_verdict_equals_jsonschema_on_examples_and_mutations(name: str, doc: Any) -> None:
    cases = _mutations(doc) if isinstance(doc, dict) else [doc]
    for case in cases:
        if _fast_accepts(name, copy.deepcopy(case)):
            assert _jsonschema_errors(name, case) == [], case
        assert (STORE.errors(name, case) == []) == (_jsonschema_errors(name, case) == [])


def test_data_schemas_agree_on_mutations() -> None:
    value = {"currentPage": 3, "totalPages": 10}
    for case in _mutations(value):
        fast_ok = _fast_accepts("document.parse.progress.v1", case)
        slow_ok = _jsonschema_errors("document.parse.progress.v1", case) == []
        assert not fast_ok or slow_ok, case
        assert (STORE.validate_data("document.parse.progress.v1", case) == []) == slow_ok


def test_fast_validation_never_fills_defaults_into_the_document() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "default": 5}}}
    fast = _compile_fast(schema, {})
    assert fast is not None
    doc: dict[str, Any] = {}
    fast(doc)
    assert doc == {}


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x", "maxLength": 3, "$defs": {"x": {"type": "string"}}},  # sibling ignored pre-2019
        {"type": "array", "prefixItems": [{"type": "integer"}]},
        {"type": "array", "items": [{"type": "integer"}]},
        {"properties": {"a": {"unevaluatedProperties": False}}},
        {"dependentRequired": {"a": ["b"]}},
    ],
)
def test_keywords_read_differently_by_draft_07_disable_the_fast_path(schema: dict[str, Any]) -> None:
    assert not _fast_compatible(schema)
    assert _compile_fast(schema, {}) is None
