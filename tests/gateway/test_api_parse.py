"""The server API's request parser (gateway/api/requests.py): the compiled per-type checkers and
the short way for publishes (``publish_fast``, the relay's forms) give exactly what the general
rules give, and a ``batch`` command parses to what the general parser makes of it (pure,
in-process)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.api.commands import METHODS, Refused, batch_command, command
from gateway.api.requests import (
    MAX_TAGS,
    ApiError,
    DisconnectRequest,
    HistoryRequest,
    PublishRequest,
    SubscribeRequest,
    parse,
    parse_publish,
    publish_fast,
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


def exact(fn: Any, params: object) -> object:
    """The result, or the refusal's code and detail."""
    try:
        return fn(params)
    except ApiError as exc:
        return ("error", exc.code, exc.detail)


# The relay's publish (relay/publisher.py ``publish_params``) and its neighbours: every field in
# and out of type, tags at and past their bound, unknown and null keys.
tag_values = (
    st.text(max_size=3)
    | st.none()
    | st.integers()
    | st.booleans()
    | st.lists(st.text(max_size=1), max_size=1)
)
relay_tags = (
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=4)
    | st.dictionaries(st.text(max_size=4), tag_values, max_size=3)
    | st.integers(MAX_TAGS - 1, MAX_TAGS + 1).map(lambda n: {f"k{i}": "v" for i in range(n)})
)
relay_core = st.fixed_dictionaries(
    {"channel": st.sampled_from(["c", "task_user:u1#t1", ""]), "data": json_values},
    optional={
        "idempotency_key": st.sampled_from(["", "outbox-1"]) | json_values,
        "tags": relay_tags | json_values,
    },
)
relay_params = relay_core | st.fixed_dictionaries(
    {},
    optional={
        "channel": st.sampled_from(["", "c", "task_user:u1#t1"]) | json_values,
        "data": json_values,
        "idempotency_key": st.sampled_from(["", "outbox-1"]) | json_values,
        "tags": relay_tags | json_values,
        "b64data": st.sampled_from(["", "eA==", "!"]) | st.none(),
        "skip_history": st.booleans() | st.none() | st.integers(0, 1),
        "version": st.integers(-1, 2) | st.none(),
        "other": json_values,
    },
)


@pytest.mark.parametrize("data", ["", [], {}, 0, None])
def test_empty_json_data_is_a_value_not_a_missing_field(data: object) -> None:
    """``"data": ""`` / ``[]`` publish that value (Centrifugo's raw JSON is non-empty), on both
    parsers; the common-form short cut and the general parser agree (found by the property below)."""
    params = {"channel": "c", "data": data}
    assert parse(PublishRequest, params) == parse_publish(params) == PublishRequest("c", data)


@given(publish_params | json_values)
def test_parse_publish_is_parse(params):
    assert outcome(parse_publish, params) == outcome(lambda p: parse(PublishRequest, p), params)


@settings(max_examples=400)
@given(relay_params | publish_params | json_values)
@example({"channel": "c", "data": 1, "tags": {"a": 1}})
@example({"channel": "c", "data": 1, "tags": {"a": None}})
@example({"channel": "c", "data": 1, "tags": {f"k{i}": "v" for i in range(MAX_TAGS + 1)}})
@example({"channel": "c", "data": 1, "tags": {f"k{i}": "v" for i in range(MAX_TAGS)}})
@example({"channel": "c", "data": None, "idempotency_key": None, "tags": None})
@example({"channel": "c", "data": 1, "idempotency_key": 5})
@example({"channel": "c", "data": 1, "idempotency_key": "k", "version": 1})
@example({"channel": "c", "idempotency_key": "k", "tags": {}})
def test_publish_fast_is_parse(params):
    """The hand-checked relay forms: the same request as the general parser (tags kept as sent),
    and every refusal left to it (None), with its own code and detail."""
    fast = publish_fast(params)
    general = exact(lambda p: parse(PublishRequest, p), params)
    if fast is not None:
        assert fast == general
    assert exact(parse_publish, params) == general


def reference_batch_command(raw: object) -> object:
    """A ``batch`` command as the general parser alone reads it."""
    if type(raw) is not dict or len(raw) != 1:
        return ("error", 107, "commands[]")
    ((method, params),) = raw.items()
    cls = METHODS.get(method)
    if cls is None:
        return ("error", 104, method)
    return exact(lambda p: parse(cls, p), params)


def parsed(cmd: object) -> object:
    return ("error", cmd.error.code, cmd.error.detail) if isinstance(cmd, Refused) else cmd


batch_commands = (
    st.dictionaries(
        st.sampled_from(["publish", "broadcast", "batch", "nope"]), relay_params | json_values, max_size=2
    )
    | json_values
)


@given(batch_commands)
def test_batch_command_is_the_general_parser(raw):
    """Each ``batch`` command (the relay's publishes, other methods, unknown ones, malformed
    commands) is accepted or refused exactly as by the general parser, code and detail alike."""
    assert parsed(batch_command(raw)) == reference_batch_command(raw)
    if type(raw) is dict and len(raw) == 1:
        ((method, params),) = raw.items()
        assert parsed(command(method, params)) == reference_batch_command(raw)


def test_relay_publish_is_the_fast_form():
    """The relay's publish takes the short way, and its tags dict is kept, not copied."""
    tags = {"task": "t1", "conflate": "task.summary", "committed_at_ms": "1"}
    params = {"channel": "c", "data": {"a": [1]}, "idempotency_key": "outbox-1", "tags": tags}
    req = publish_fast(params)
    assert (
        req
        == parse(PublishRequest, params)
        == PublishRequest("c", {"a": [1]}, tags=tags, idempotency_key="outbox-1")
    )
    assert req is not None and req.tags is tags
    assert publish_fast({**params, "tags": {f"k{i}": "v" for i in range(MAX_TAGS + 1)}}) is None


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
