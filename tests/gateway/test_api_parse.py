"""The server API's request parser (gateway/api/requests.py): the compiled per-type checkers and
the short way for publishes give exactly what the general rules give (pure, in-process)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.api.requests import (
    ApiError,
    DisconnectRequest,
    HistoryRequest,
    PublishRequest,
    SubscribeRequest,
    parse,
    parse_publish,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
publish_params = st.dictionaries(
    st.sampled_from(["channel", "data", "b64data", "tags", "skip_history", "version", "other"]),
    json_values | st.sampled_from(["", "c", "u1"]),
    max_size=4,
)


def outcome(fn: Any, params: object) -> object:
    try:
        return fn(params)
    except ApiError as exc:
        return ("error", exc.code)


@pytest.mark.parametrize("data", ["", [], {}, 0, None])
def test_empty_json_data_is_a_value_not_a_missing_field(data: object) -> None:
    """``"data": ""`` / ``[]`` publish that value (Centrifugo's raw JSON is non-empty), on both
    parsers; the common-form short cut and the general parser agree (found by the property below)."""
    params = {"channel": "c", "data": data}
    assert parse(PublishRequest, params) == parse_publish(params) == PublishRequest("c", data)


@given(publish_params | json_values)
def test_parse_publish_is_parse(params):
    assert outcome(parse_publish, params) == outcome(lambda p: parse(PublishRequest, p), params)


@pytest.mark.parametrize(
    ("cls", "params", "detail"),
    [
        (PublishRequest, {"channel": "c"}, "data: required"),
        (PublishRequest, {"channel": "", "data": 1}, "channel: required"),
        (PublishRequest, {"channel": "c", "data": 1, "version": -1}, "version: out of range"),
        (PublishRequest, {"channel": "c", "data": 1, "tags": {"a": 1}}, "tags.a: expected a string"),
        (HistoryRequest, {"channel": "c", "since": {"offset": "1"}}, "since.offset: expected an integer"),
        (HistoryRequest, {"channel": "c", "limit": True}, "limit: expected an integer"),
        (DisconnectRequest, {"whitelist": ["a", 2]}, "whitelist[1]: expected a string"),
        (DisconnectRequest, {"disconnect": {"code": 2**32}}, "disconnect.code: out of range"),
        (
            SubscribeRequest,
            {"channel": "c", "override": {"presence": {"value": 1}}},
            "override.presence.value: expected a boolean",
        ),
        (SubscribeRequest, [], "params: expected an object"),
    ],
)
def test_errors_name_the_field(cls, params, detail):
    with pytest.raises(ApiError) as caught:
        parse(cls, params)
    assert caught.value.code == 107 and caught.value.detail == detail


def test_values_are_kept():
    req = parse(PublishRequest, {"channel": "c", "data": None, "tags": {"k": "v"}, "version": 2**64 - 1})
    assert (req.channel, req.data, req.tags, req.version) == ("c", None, {"k": "v"}, 2**64 - 1)
    req2 = parse(DisconnectRequest, {"whitelist": ["a"], "disconnect": {"code": 4000, "reason": "r"}})
    assert req2.whitelist == ["a"] and req2.disconnect is not None and req2.disconnect.code == 4000
