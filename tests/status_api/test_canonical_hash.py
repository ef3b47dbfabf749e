"""``canonical_hash`` is the SHA-256 of the standard library's canonical JSON of a body, whichever
encoder produced the bytes: every number form, key order and string escape hashes as before."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from status_api.service.context import canonical_hash


def _reference(body: Any) -> str:
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


def test_floats_of_every_magnitude_hash_as_the_standard_library_encodes_them() -> None:
    values: list[float] = [0.0, -0.0, 0.5, 1.0, 123.456, 2.0**53, 1e15, 1e16, 1e17, 1e-4, 1e-5, 5e-5]
    for exponent in range(-320, 309, 7):
        values += [1.5 * 10.0**exponent, -9.87654321 * 10.0**exponent]
    rng = random.Random(31)
    values += [rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-25, 25) for _ in range(2000)]
    for v in values:
        body = {"eventId": "e", "data": {"schema": "s", "value": {"x": v, "list": [v, 1, "0.00001e5"]}}}
        assert canonical_hash(body) == _reference(body), v


def test_keys_escapes_and_text_hash_as_the_standard_library_encodes_them() -> None:
    text = "".join(chr(i) for i in range(0x80)) + "\u2028\u2029\ufeff\u00e9😀\U0010ffff"
    body = {
        text: text,
        "é": 1,
        "e": [True, False, None, 0, -1, 2**53 - 1],
        "😀": {"nested": {"b": 2, "a": 1}},
        "\uffff": "",
        "Z": [],
        "message": 'it\'s "quoted" \\ 1e5 0.0000 :1e5 [0.00001',
    }
    assert canonical_hash(body) == _reference(body)
    assert canonical_hash({"n": 2**70}) == _reference({"n": 2**70})  # beyond orjson's integers


def test_hex_ids_take_the_fast_encoder() -> None:
    """Digits next to an ``e`` inside strings (hex event ids) are not numbers: no fallback."""
    from status_api.service import context

    body = {"eventId": "3e9f0c1e5d", "taskId": "t-1e5", "sourceSeq": 2, "progress": {"current": 1.5}}
    raw = context.orjson.dumps(body, option=context.orjson.OPT_SORT_KEYS)
    assert context._NUMBER_FORMS_DIFFER.search(raw) is None
    assert canonical_hash(body) == _reference(body)
