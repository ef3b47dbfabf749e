"""The per-key fossil delta rule of map subscriptions (gateway/maps/delta.py), pure: live
changes against the key's previous value handed over by the engine, recovered batches per key,
JSON values as JSON strings. Every delta is checked by applying it."""

from __future__ import annotations

import orjson
import pytest

from gateway.maps import delta
from gateway.protocol import fossil
from gateway.protocol.messages import Publication


def value(key: str, n: int) -> bytes:
    return orjson.dumps({"key": key, "n": n, "text": key * 100})


def pub(key: str, n: int, offset: int, prev: bytes | None = None) -> Publication:
    return Publication(value(key, n), offset, key=key, delta=prev is not None, prev=prev)


def removal(key: str, offset: int) -> Publication:
    return Publication(b"", offset, key=key, removed=True)


def wire_bytes(shaped: Publication, binary: bool) -> bytes:
    """What centrifuge-js keeps: the bytes, or (JSON) the UTF-8 of the JSON string."""
    return shaped.data if binary else orjson.loads(shaped.data).encode()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "protobuf"])
def test_a_live_change_is_a_delta_against_the_keys_previous_value(binary: bool) -> None:
    change = pub("a", 2, 7, prev=value("a", 1))
    shaped = delta.change(change, binary)
    assert shaped.delta and shaped.prev is None and shaped.key == "a" and shaped.offset == 7
    assert len(shaped.data) < len(change.data) // 4
    assert fossil.apply(value("a", 1), wire_bytes(shaped, binary)) == change.data


@pytest.mark.parametrize("binary", [False, True], ids=["json", "protobuf"])
def test_without_the_previous_value_a_change_goes_whole(binary: bool) -> None:
    for change in (pub("a", 1, 3), removal("a", 4), pub("a", 2, 0, prev=value("a", 1))):
        shaped = delta.change(change, binary)
        assert not shaped.delta and shaped.prev is None
        assert wire_bytes(shaped, binary) == change.data  # JSON: a removal is ""
    big = pub("a", 2, 5, prev=b"x" * (fossil.MAX_SIZE + 1))
    assert not delta.change(big, binary).delta


def test_over_json_a_delta_that_is_not_text_goes_whole() -> None:
    before = ('{"v":"' + "x" * 40 + "é" + "y" * 40 + '"}').encode()
    after = before.replace("é".encode(), "è".encode())  # the patch inserts half a character
    change = Publication(after, 2, key="k", delta=True, prev=before)
    json_form = delta.change(change, binary=False)
    assert not json_form.delta and orjson.loads(json_form.data).encode() == after
    binary_form = delta.change(change, binary=True)
    assert binary_form.delta and fossil.apply(before, binary_form.data) == after


@pytest.mark.parametrize("binary", [False, True], ids=["json", "protobuf"])
def test_a_recovered_batch_goes_by_key(binary: bool) -> None:
    batch = [pub("a", 1, 1), pub("b", 1, 2), pub("a", 2, 3), removal("b", 4), pub("b", 2, 5), pub("a", 3, 6)]
    shaped = delta.recovered(batch, binary)
    assert [(p.key, p.offset, p.delta, p.removed) for p in shaped] == [
        ("a", 1, False, False),  # first change of a key: whole
        ("b", 2, False, False),
        ("a", 3, True, False),  # against a's previous change, not b's
        ("b", 4, False, True),  # removal: whole
        ("b", 5, False, False),  # after its removal: whole again
        ("a", 6, True, False),
    ]
    held: dict[str, bytes] = {}
    for sent, original in zip(shaped, batch, strict=True):
        data = wire_bytes(sent, binary)
        if sent.delta:
            data = fossil.apply(held[sent.key], data)
        assert data == original.data
        held[sent.key] = data


def test_json_values_are_json_strings_of_their_exact_bytes() -> None:
    entry = Publication(b'{"a": 1,  "b":[1,2]}', 4, key="k")
    assert delta.whole(entry, binary=False).data == b'"{\\"a\\": 1,  \\"b\\":[1,2]}"'
    assert delta.whole(entry, binary=True).data == entry.data
