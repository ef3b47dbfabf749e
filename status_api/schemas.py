"""JSON Schema validators of the Status API, compiled once from ``schema/`` (the contracts).

``schema/json/*.schema.json`` are the envelopes and messages (cross-referenced by ``$id`` through a
``referencing`` registry); ``schema/data/{name}.schema.json`` are the registered ``data.schema``s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from status_api.domain.errors import invalid

DEFAULT_SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
_BASE = "https://taskcast.dev/schema/"


def _messages(validator: Draft202012Validator, instance: Any) -> list[str]:
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"[:300] for e in errors]


class SchemaStore:
    """Compiled validators keyed by name: ``task-event``, ``task-create``, ``task-summary``, …"""

    def __init__(self, schema_dir: Path = DEFAULT_SCHEMA_DIR) -> None:
        self.schema_dir = schema_dir
        docs: dict[str, dict[str, Any]] = {}
        resources: list[tuple[str, Resource[Any]]] = []
        for path in sorted((schema_dir / "json").glob("*.schema.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            Draft202012Validator.check_schema(doc)
            docs[path.name.removesuffix(".schema.json")] = doc
            resources.append((doc["$id"], Resource.from_contents(doc)))
        registry: Registry[Any] = Registry().with_resources(resources)
        self._validators = {name: Draft202012Validator(doc, registry=registry) for name, doc in docs.items()}
        self._data: dict[str, Draft202012Validator] = {}
        for path in sorted((schema_dir / "data").glob("*.schema.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            Draft202012Validator.check_schema(doc)
            self._data[path.name.removesuffix(".schema.json")] = Draft202012Validator(doc)

    @property
    def data_schema_names(self) -> frozenset[str]:
        return frozenset(self._data)

    def errors(self, name: str, instance: Any) -> list[str]:
        return _messages(self._validators[name], instance)

    def require(self, name: str, instance: Any, code: str = "INVALID_REQUEST") -> None:
        """Raise DomainError(INVALID, ``code``) listing the first validation errors."""
        errs = self.errors(name, instance)
        if errs:
            raise invalid(code, f"request does not match {name} schema", errs[:10])

    def validate_data(self, schema_name: str, value: Mapping[str, Any]) -> list[str]:
        """The ``DataValidator`` the domain gets: errors of ``value`` against a registered data schema."""
        validator = self._data.get(schema_name)
        if validator is None:
            return [f"data schema {schema_name} is not registered"]
        return _messages(validator, value)

    def load_registry_file(self, name: str) -> list[dict[str, Any]]:
        """``schema/registry/{name}.json``, each entry validated against its definition schema."""
        path = self.schema_dir / "registry" / f"{name}.json"
        if not path.exists():
            return []
        docs: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
        for doc in docs:
            errs = self.errors(name, doc)
            if errs:
                raise ValueError(f"{path}: {errs[0]}")
        return docs
