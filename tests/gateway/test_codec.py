"""The JSON codec: batching, typed decoding, coded errors, encoding with raw payloads."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol import codec, codes, json_replies
from gateway.protocol.messages import (
    ConnectRequest,
    HistoryRequest,
    Method,
    PublishRequest,
    StreamPosition,
    SubscribeRequest,
)


def test_js_batch_connect_and_subscribe_in_one_frame_in_order():
    frame = '{"connect":{"token":"T","name":"js"},"id":1}\n{"subscribe":{"channel":"news","flag":1},"id":2}'
    cmds = codec.decode_frame(frame)
    assert [c.id for c in cmds] == [1, 2]
    assert cmds[0].method is Method.CONNECT
    assert cmds[0].request == ConnectRequest(token="T", name="js")
    assert cmds[1].request == SubscribeRequest(channel="news", flag=1)


def test_trailing_newline_and_pong():
    cmds = codec.decode_frame(b"{}\n")
    assert len(cmds) == 1
    assert cmds[0].method is None and cmds[0].id == 0


def test_python_sdk_recover_subscribe():
    cmds = codec.decode_frame(
        '{"id": 4, "subscribe": {"channel": "news", "recover": true, "epoch": "ep", "offset": 4, "flag": 1}}'
    )
    assert cmds[0].request == SubscribeRequest(channel="news", recover=True, epoch="ep", offset=4, flag=1)


def test_publish_keeps_raw_json_payload():
    (cmd,) = codec.decode_frame('{"id":3,"publish":{"channel":"c","data":{"a":[1,2,{"b":"x\\ny"}]}}}')
    assert isinstance(cmd.request, PublishRequest)
    assert orjson.loads(cmd.request.data) == {"a": [1, 2, {"b": "x\ny"}]}
    assert b"\n" not in cmd.request.data


def test_history_since():
    (cmd,) = codec.decode_frame(
        '{"id":5,"history":{"channel":"c","limit":-1,"since":{"offset":3,"epoch":"e"}}}'
    )
    assert cmd.request == HistoryRequest("c", -1, StreamPosition(3, "e"), False)


@pytest.mark.parametrize(
    "frame",
    [
        "",
        "\n\n",
        "{not json",
        "[1,2]",
        '{"id":"1","connect":{}}',
        '{"id":-1,"connect":{}}',
        '{"id":1,"connect":[]}',
        '{"id":1,"subscribe":{"channel":5}}',
        '{"id":1,"subscribe":{"channel":"c","offset":-3}}',
        '{"id":1,"subscribe":{"channel":"c","recover":"yes"}}',
        '{"id":1,"history":{"channel":"c","since":7}}',
    ],
)
def test_malformed_frames_are_bad_request(frame):
    with pytest.raises(codec.ProtocolError) as info:
        codec.decode_frame(frame)
    assert info.value.disconnect == codes.DISCONNECT_BAD_REQUEST


@given(st.binary(max_size=200))
def test_decode_never_raises_anything_but_protocol_error(data):
    try:
        codec.decode_frame(data)
    except codec.ProtocolError:
        pass


def test_encode_reply_keeps_empty_result_and_error_shape():
    assert orjson.loads(json_replies.encode_reply(3, "publish", {})) == {"id": 3, "publish": {}}
    assert orjson.loads(json_replies.encode_error(2, codes.ERROR_INTERNAL)) == {
        "id": 2,
        "error": {"code": 100, "message": "internal server error", "temporary": True},
    }
    assert (
        "temporary" not in orjson.loads(json_replies.encode_error(2, codes.ERROR_PERMISSION_DENIED))["error"]
    )


def test_pub_push_embeds_raw_data_and_omits_zero_offset():
    push = orjson.loads(json_replies.encode_pub_push("ch", b'{"x":1}', 0, None, None))
    assert push == {"push": {"channel": "ch", "pub": {"data": {"x": 1}}}}
    push = orjson.loads(json_replies.encode_pub_push("ch", b"[1]", 7, None, {"k": "v"}))
    assert push == {"push": {"channel": "ch", "pub": {"data": [1], "offset": 7, "tags": {"k": "v"}}}}


def test_reconnect_code_ranges():
    assert codes.is_reconnect_code(3001) and codes.is_reconnect_code(4000) and codes.is_reconnect_code(5000)
    assert not codes.is_reconnect_code(3500) and not codes.is_reconnect_code(4500)


def test_decoding_is_lazy_and_bounded():
    frame = b'{"id":1,"rpc":{}}\n' * 3 + b"{nope"
    commands = codec.iter_frame(frame)
    assert [next(commands).id for _ in range(3)] == [1, 1, 1]  # the bad line is not parsed yet
    with pytest.raises(codec.ProtocolError):
        next(commands)
    with pytest.raises(codec.ProtocolError) as info:
        codec.decode_frame(b"{}\n" * 2000)
    assert info.value.disconnect == codes.DISCONNECT_TOO_MANY_REQUESTS
    assert len(codec.decode_frame(b"{}\n" * 1024 + b"\n" * 100000)) == 1024  # blank lines are free
