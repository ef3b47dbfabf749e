"""JSON Schema validators of the Status API, compiled once from ``schema/`` (the contracts).

``schema/json/*.schema.json`` are the envelopes and messages (cross-referenced by ``$id`` through a
``referencing`` registry); ``schema/data/{name}.schema.json`` are the registered ``data.schema``s.

``jsonschema`` (Draft 2020-12) is the authority and writes every error message. Validating an event
envelope with it costs ~0.4 ms, a third of an event's budget, so each schema whose keywords mean the
same in draft-07 is also compiled to Python code by ``fastjsonschema`` (~10 µs): a document that the
fast validator accepts is valid; anything it rejects (or trips over) is re-checked by ``jsonschema``,
whose verdict stands. Schemas using a keyword outside :data:`_FAST_KEYWORDS`, or ``$ref`` with
sibling assertions (ignored before 2019-09), only get the ``jsonschema`` validator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from status_api.domain.errors import invalid

DEFAULT_SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
_BASE = "https://taskcast.dev/schema/"


#: Keywords whose draft-07 meaning (fastjsonschema) equals their 2020-12 meaning (jsonschema).
_FAST_KEYWORDS = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
        "propertyNames", "minProperties", "maxProperties", "pattern", "minLength", "maxLength", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
        "uniqueItems", "items", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$defs",
        "format",
    }
)  # fmt: skip
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default", "deprecated",
     "readOnly", "writeOnly"}
)  # fmt: skip
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SUBSCHEMAS = ("additionalProperties", "propertyNames", "items", "not", "if", "then", "else")

FastValidator = Callable[[Any], Any]


def _fast_compatible(schema: Any) -> bool:
    """True when every subschema only uses :data:`_FAST_KEYWORDS` the way both drafts read them."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    keys = set(schema) - _ANNOTATIONS
    if not keys <= _FAST_KEYWORDS or ("$ref" in keys and len(keys) > 1):
        return False
    if "items" in schema and not isinstance(schema["items"], dict | bool):
        return False
    subs: list[Any] = [schema[k] for k in _SUBSCHEMAS if k in schema]
    for k in _SUBSCHEMA_MAPS:
        subs.extend(schema.get(k, {}).values())
    for k in _SUBSCHEMA_LISTS:
        subs.extend(schema.get(k, []))
    return all(_fast_compatible(sub) for sub in subs)


def _compile_fast(doc: dict[str, Any], docs_by_id: Mapping[str, Any]) -> FastValidator | None:
    """A fastjsonschema validator for ``doc`` (``$ref``s resolved among ``docs_by_id``), or None."""
    if not all(_fast_compatible(d) for d in (doc, *docs_by_id.values())):
        return None

    def local(uri: str) -> Any:
        return docs_by_id[uri]

    # use_default=False: never fill defaults into the caller's document; use_formats=False: formats
    # are annotations for jsonschema too (no format checker).
    return fastjsonschema.compile(
        doc, handlers={"https": local, "http": local}, use_default=False, use_formats=False
    )


def _fast_ok(fast: FastValidator | None, instance: Any) -> bool:
    if fast is None:
        return False
    try:
        fast(instance)
    except Exception:  # a rejection, or an instance the generated code trips over: jsonschema decides
        return False
    return True


def _oversized(schema: Any, instance: Any, path: str = "") -> str | None:
    """The first ``maxItems``/``maxProperties``/``maxLength`` a value exceeds, found by sizes
    alone (properties and items declared in place; ``$ref`` is not followed), else None. Run
    before the full validation of a rejected instance, so an oversized value is refused at
    the cost of a ``len()``, not of validating each of its items (100,000 task IDs against
    ``maxItems: 100``: 1.8 s of jsonschema)."""
    if not isinstance(schema, dict):
        return None
    bounds = (("maxItems", list), ("maxProperties", dict), ("maxLength", str))
    for keyword, kind in bounds:
        most = schema.get(keyword)
        if isinstance(most, int) and isinstance(instance, kind) and len(instance) > most:
            return f"{path or '(root)'}: more than {most} {'characters' if kind is str else 'items'}"
    if isinstance(instance, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                if key in instance:
                    found = _oversized(sub, instance[key], f"{path}/{key}" if path else key)
                    if found is not None:
                        return found
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(instance):
            found = _oversized(schema["items"], item, f"{path}/{i}" if path else str(i))
            if found is not None:
                return found
    return None


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
        self._docs = docs
        by_id = {doc["$id"]: doc for doc in docs.values()}
        self._fast = {name: _compile_fast(doc, by_id) for name, doc in docs.items()}
        self._data: dict[str, Draft202012Validator] = {}
        self._data_fast: dict[str, FastValidator | None] = {}
        for path in sorted((schema_dir / "data").glob("*.schema.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            Draft202012Validator.check_schema(doc)
            name = path.name.removesuffix(".schema.json")
            self._data[name] = Draft202012Validator(doc)
            self._docs[f"data:{name}"] = doc
            self._data_fast[name] = _compile_fast(doc, {})

    @property
    def data_schema_names(self) -> frozenset[str]:
        return frozenset(self._data)

    def errors(self, name: str, instance: Any) -> list[str]:
        if _fast_ok(self._fast[name], instance):
            return []
        oversized = _oversized(self._docs[name], instance)
        if oversized is not None:
            return [oversized]
        return _messages(self._validators[name], instance)

    def fast_path(self, name: str) -> bool:
        """True when ``name`` has a compiled fast validator (tests; docs/status-api.md)."""
        return self._fast.get(name, self._data_fast.get(name)) is not None

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
        if _fast_ok(self._data_fast[schema_name], value):
            return []
        oversized = _oversized(self._docs[f"data:{schema_name}"], value)
        if oversized is not None:
            return [oversized]
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
