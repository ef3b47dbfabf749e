"""Every JSON Schema in schema/ is a valid Draft 2020-12 schema; labelled examples validate (or not);
registry files match their schemas and only name registered data schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from status_api.domain.registry import data_schema_names, operation_set_from_json, status_set_from_json
from status_api.schemas import SchemaStore

SCHEMA = Path(__file__).resolve().parents[1] / "schema"
STORE = SchemaStore(SCHEMA)  # compiled once


@pytest.mark.parametrize("path", sorted(SCHEMA.rglob("*.schema.json")), ids=lambda p: p.name)
def test_every_schema_file_is_valid(path: Path) -> None:
    Draft202012Validator.check_schema(json.loads(path.read_text()))


def _examples(kind: str) -> list[Path]:
    return sorted((SCHEMA / "examples" / kind).glob("*/*.json"))


@pytest.mark.parametrize("path", _examples("valid"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_valid_examples(path: Path) -> None:
    assert STORE.errors(path.parent.name, json.loads(path.read_text())) == []


@pytest.mark.parametrize("path", _examples("invalid"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_invalid_examples(path: Path) -> None:
    assert STORE.errors(path.parent.name, json.loads(path.read_text())) != []


def test_every_example_dir_names_a_schema() -> None:
    names = {p.name.removesuffix(".schema.json") for p in (SCHEMA / "json").glob("*.schema.json")}
    assert {p.parent.name for p in _examples("valid") + _examples("invalid")} <= names
    assert {"task-event", "task-summary", "task-detail", "task-project"} <= {
        p.parent.name for p in _examples("valid")
    }


def test_registry_files_match_schemas_and_data_schemas_exist() -> None:
    for doc in STORE.load_registry_file("status-definitions"):
        status_set_from_json(doc)
    for doc in STORE.load_registry_file("operation-definitions"):
        assert data_schema_names(operation_set_from_json(doc)) <= STORE.data_schema_names
