"""Bounded hypothesis fuzz targets (issue 10): the protocol codec and the event-ingestion
validator. Any input either decodes or is refused with the documented error — never another
exception — and the fast validator agrees with the reference JSON Schema validator on mutations
of the labelled examples. Bounded ``max_examples`` and deadline so they run in CI in seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.protocol.codec import ProtocolError, decode_frame
from status_api.domain.errors import DomainError
from status_api.schemas import SchemaStore

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = Path(__file__).resolve().parents[3]
EVENT_EXAMPLES = [
    json.loads(p.read_text()) for p in sorted((ROOT / "schema/examples/valid/task-event").glob("*.json"))
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
METHODS = ["connect", "subscribe", "unsubscribe", "publish", "presence", "presence_stats", "history",
           "ping", "send", "rpc", "refresh", "sub_refresh"]  # fmt: skip


@FUZZ
@given(st.binary(max_size=300))
def test_codec_never_raises_anything_but_protocol_error_on_bytes(frame: bytes) -> None:
    try:
        decode_frame(frame)
    except ProtocolError as exc:
        assert exc.disconnect.code == 3501 or exc.disconnect.code >= 3000


@FUZZ
@given(
    st.lists(
        st.fixed_dictionaries(
            {"id": st.integers(-5, 2**40) | st.text(max_size=3)},
            optional={m: st.dictionaries(st.sampled_from(["channel", "token", "offset", "epoch", "recover",
                                                           "data", "since", "limit", "subs", "flag"]),
                                         json_values, max_size=5) | json_values for m in METHODS},
        ),
        min_size=1,
        max_size=3,
    )
)  # fmt: skip
def test_codec_on_command_shaped_json_decodes_or_refuses(commands: list[dict[str, Any]]) -> None:
    frame = "\n".join(json.dumps(c) for c in commands)
    try:
        decoded = decode_frame(frame)
    except ProtocolError:
        return
    assert len(decoded) == len(commands)


_store = SchemaStore()


def _mutate(doc: dict[str, Any], key: str, value: Any, drop: bool) -> dict[str, Any]:
    out = dict(doc)
    if drop:
        out.pop(key, None)
    else:
        out[key] = value
    return out


@FUZZ
@given(
    st.sampled_from(EVENT_EXAMPLES),
    st.sampled_from(sorted({k for d in EVENT_EXAMPLES for k in d} | {"extra"})),
    json_values,
    st.booleans(),
)
def test_event_validator_refuses_with_a_coded_error_and_agrees_with_the_reference(
    doc: dict[str, Any], key: str, value: Any, drop: bool
) -> None:
    candidate = _mutate(doc, key, value, drop)
    fast = _store.errors("task-event", candidate)
    reference = list(_store._validators["task-event"].iter_errors(candidate))
    assert bool(fast) == bool(reference), (candidate, fast)
    try:
        _store.require("task-event", candidate, "INVALID_EVENT")
    except DomainError as err:
        assert err.code == "INVALID_EVENT" and err.details
    else:
        assert not reference


@FUZZ
@given(json_values)
def test_event_validator_on_arbitrary_json_never_crashes(value: Any) -> None:
    try:
        _store.require("task-event", value, "INVALID_EVENT")
    except DomainError as err:
        assert err.code == "INVALID_EVENT"
