"""A request over a schema's size bound (``maxItems``, ``maxProperties``, ``maxLength``) is refused
by its sizes, before the full validation that would look at every item (issue 28's class: every
hostile input answered cheaply). Before, a ``batchGet`` of 100,000 task IDs against ``maxItems:
100`` cost 1.8 s of jsonschema, and any end user's token could send one per request (a 64 KiB
body holds ~5,000 short IDs: ~100 ms each).

The full validation is counted (``Draft202012Validator.iter_errors``), so "refused without it" is
a count, not a timing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from status_api.schemas import SchemaStore
from tests.status_api.harness import Harness

STEP = {"stepId": "s", "operationCode": "op", "producerId": "p"}
OVERSIZED = {
    "batch-get taskIds": ("batch-get", {"taskIds": [f"t{i}" for i in range(5000)]}, "taskIds: more than 100"),
    "batch-get knownVersions": (
        "batch-get",
        {"knownVersions": {f"t{i}": "1" for i in range(5000)}},
        "knownVersions: more than 100",
    ),
    "task-create steps": ("task-create", {"steps": [STEP] * 201}, "steps: more than 200"),
    "task-create title": ("task-create", {"title": "x" * 256}, "title: more than 255 characters"),
}


@pytest.fixture(scope="module")
def store() -> SchemaStore:
    return SchemaStore()


@pytest.fixture
def full_validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    calls: list[int] = []
    original = Draft202012Validator.iter_errors

    def counted(self: Draft202012Validator, instance: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, instance, *args, **kwargs)

    monkeypatch.setattr(Draft202012Validator, "iter_errors", counted)
    yield calls


@pytest.mark.parametrize("case", sorted(OVERSIZED))
def test_an_oversized_value_is_refused_by_its_size(
    store: SchemaStore, full_validations: list[int], case: str
):
    name, instance, message = OVERSIZED[case]
    errors = store.errors(name, instance)
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert not full_validations


def test_a_value_within_the_bounds_still_gets_every_message(store: SchemaStore, full_validations: list[int]):
    errors = store.errors("batch-get", {"taskIds": ["t1", "t1"]})  # uniqueItems: only jsonschema says why
    assert errors and full_validations


async def test_an_oversized_batch_get_is_422_over_http(h: Harness, full_validations: list[int]):
    ids = [f"t{i}" for i in range(5000)]  # ~40 KB: within the 64 KiB body bound
    out = await h.user_post("/api/tasks/status:batchGet", {"taskIds": ids}, expect=422)
    assert "taskIds: more than 100 items" in str(out)
    assert not full_validations
