"""The Protobuf codec in-process: frames in, frames out. Golden bytes are built with the
generated classes (the schema's field numbers are those of centrifugal/protocol; a few are
pinned by hand below), malformed frames raise ``ProtocolError`` with 3501 and nothing else
(hypothesis feeds random bytes), and the committed generated module matches ``client.proto``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocol import codes
from gateway.protocol.codec import JSON, ProtocolError
from gateway.protocol.messages import (
    ClientInfo,
    Command,
    ConnectRequest,
    ConnectResult,
    EmptyRequest,
    EmptyResult,
    HistoryPage,
    HistoryRequest,
    Method,
    PresenceResult,
    Publication,
    PublishRequest,
    RPCResult,
    StreamPosition,
    SubscribeRecovery,
    SubscribeRequest,
    SubscribeResult,
)
from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.codec import PROTOBUF, decode_emulation_request
from gateway.protocol.protobuf.framing import delimited, split_frame, varint
from gateway.protocol.session import Session

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "gateway" / "protocol" / "protobuf"


def replies(frame: bytes) -> list[pb.Reply]:
    out = []
    for body in split_frame(frame):
        r = pb.Reply()
        r.ParseFromString(body)
        out.append(r)
    return out


# --- decoding -------------------------------------------------------------------------------


def test_several_commands_per_frame_in_order_with_a_pong():
    frame = (
        delimited(
            pb.Command(
                id=1,
                connect=pb.ConnectRequest(
                    token="T",
                    data=b'{"a":1}',
                    name="swift",
                    subs={"news": pb.SubscribeRequest(recover=True, offset=7, epoch="ep")},
                ),
            )
        )
        + delimited(pb.Command(id=2, subscribe=pb.SubscribeRequest(channel="c", positioned=True, flag=2)))
        + delimited(pb.Command())
        + delimited(pb.Command(id=3, publish=pb.PublishRequest(channel="c", data=b"\x00\xffbin")))
        + delimited(
            pb.Command(id=4, history=pb.HistoryRequest(channel="c", limit=5, since=pb.StreamPosition()))
        )
    )
    assert PROTOBUF.decode_frame(frame) == [
        Command(
            1,
            Method.CONNECT,
            ConnectRequest(
                token="T", data=b'{"a":1}', subs={"news": SubscribeRecovery(True, 7, "ep")}, name="swift"
            ),
        ),
        Command(2, Method.SUBSCRIBE, SubscribeRequest(channel="c", positioned=True, flag=2)),
        Command(0, None, None),
        Command(3, Method.PUBLISH, PublishRequest("c", b"\x00\xffbin")),
        # An empty since (offset 0, epoch "") is still "since": recovery from the stream start.
        Command(4, Method.HISTORY, HistoryRequest("c", 5, StreamPosition(0, ""), False)),
    ]


def test_field_numbers_pinned_by_hand():
    # Command.subscribe is field 5 (length-delimited), SubscribeRequest.channel is field 1.
    body = bytes([0x08, 0x09, (5 << 3) | 2, 3, (1 << 3) | 2, 1]) + b"c"
    assert PROTOBUF.decode_frame(varint(len(body)) + body) == [
        Command(9, Method.SUBSCRIBE, SubscribeRequest(channel="c"))
    ]
    # Reply.id = 1, Reply.push = 4, Push.channel = 2, Push.pub = 4, Publication.data = 4.
    frame = PROTOBUF.encode_publication("c", Publication(b"x"))
    assert (
        frame
        == bytes([10, (4 << 3) | 2, 8, (2 << 3) | 2, 1])
        + b"c"
        + bytes([(4 << 3) | 2, 3, (4 << 3) | 2, 1])
        + b"x"
    )


def test_unknown_fields_are_skipped_and_id_without_method_is_not_a_pong():
    unknown = varint(99 << 3) + b"\x01"  # field 99, wire type varint
    body = pb.Command(id=5).SerializeToString() + unknown
    assert PROTOBUF.decode_frame(varint(len(body)) + body) == [Command(5, Method.PING, EmptyRequest())]


@pytest.mark.parametrize(
    "frame",
    [
        b"",  # empty frame
        b"\x80",  # truncated varint
        b"\xff" * 11,  # varint longer than 10 bytes
        b"\x05\x08\x01",  # length beyond the frame
        delimited(pb.Command(id=1)) + b"\x03\x08",  # a good command, then a short one
        b"\x02\x0a\x05",  # a length-delimited field whose length runs past its message
        b"\x02\x0a\x00",  # Command.id (a varint) sent with wire type 2
        delimited(pb.Command(id=1)) + b"\x04\x2a\x02\x08\x01",  # SubscribeRequest.channel as a varint
        b"\x06" + bytes.fromhex("520442021001"),  # history.since.epoch (a string) as a varint
        b"\x0b" + bytes.fromhex("22091a070a016112020801"),  # connect.subs["a"].channel as a varint
        b"\x03\x22\x01\x0a",  # connect (field 4) holding a truncated token
        b"\x02\x0f\x00",  # wire type 7 does not exist
        delimited(pb.Command(id=1)) + b"\x04\x2a\x02\x0a\x05",  # subscribe with a nested length past its end
        b"\x05\x2a\x03\x0a\x01\xff",  # subscribe.channel is not UTF-8
    ],
)
def test_malformed_frames_raise_bad_request(frame: bytes):
    with pytest.raises(ProtocolError) as info:
        PROTOBUF.decode_frame(frame)
    assert info.value.disconnect == codes.DISCONNECT_BAD_REQUEST


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_ever_raise_protocol_error(data: bytes):
    try:
        PROTOBUF.decode_frame(data)
    except ProtocolError as exc:
        assert exc.disconnect == codes.DISCONNECT_BAD_REQUEST


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=5))
def test_fuzz_well_framed_random_bodies_only_ever_raise_protocol_error(bodies: list[bytes]):
    try:
        PROTOBUF.decode_frame(b"".join(varint(len(b)) + b for b in bodies))
    except ProtocolError as exc:
        assert exc.disconnect == codes.DISCONNECT_BAD_REQUEST


def test_session_turns_a_malformed_frame_into_3501():
    session = Session(PROTOBUF)
    assert session.receive_frame(b"\x80") == [codes.DISCONNECT_BAD_REQUEST]


def test_emulation_request():
    body = pb.EmulationRequest(node="n", session="s", data=b"\x00").SerializeToString()
    assert decode_emulation_request(body) == ("s", "n", b"\x00")
    with pytest.raises(ProtocolError):
        decode_emulation_request(b"\x0a\x05")


# --- encoding -------------------------------------------------------------------------------


def test_replies_and_pushes_decode_with_the_generated_classes():
    info = ClientInfo("u", "c", conn_info=b'{"n":1}')
    frame = b"".join(
        [
            PROTOBUF.encode_reply(1, Method.CONNECT, ConnectResult("cid", "1.0", ping=25, pong=True)),
            PROTOBUF.encode_reply(2, Method.PUBLISH, EmptyResult()),
            PROTOBUF.encode_error(3, codes.ERROR_TOO_MANY_REQUESTS),
            PROTOBUF.encode_ping(),
            PROTOBUF.encode_publication("ch", Publication(b"\x00bin", 4, info, {"k": "v"})),
            PROTOBUF.encode_join_leave("ch", "leave", info),
            PROTOBUF.encode_unsubscribe_push("ch", codes.Unsubscribe(2000, "server unsubscribe")),
            PROTOBUF.encode_reply(
                4,
                Method.SUBSCRIBE,
                SubscribeResult(
                    recoverable=True,
                    positioned=True,
                    recovered=True,
                    epoch="ep",
                    offset=4,
                    publications=[Publication(b"p", 4)],
                    was_recovering=True,
                ),
            ),
            PROTOBUF.encode_reply(5, Method.HISTORY, HistoryPage([Publication(b"h", 1)], "ep", 1)),
            PROTOBUF.encode_reply(6, Method.PRESENCE, PresenceResult({"c": info})),
            PROTOBUF.encode_disconnect_push(codes.DISCONNECT_SHUTDOWN),
        ]
    )
    r = replies(frame)
    assert r[0] == pb.Reply(id=1, connect=pb.ConnectResult(client="cid", version="1.0", ping=25, pong=True))
    assert r[1].id == 2 and r[1].HasField("publish")
    assert r[2] == pb.Reply(id=3, error=pb.Error(code=111, message="too many requests", temporary=True))
    assert r[3] == pb.Reply()
    pb_info = pb.ClientInfo(user="u", client="c", conn_info=b'{"n":1}')
    assert r[4].push == pb.Push(
        channel="ch", pub=pb.Publication(data=b"\x00bin", offset=4, info=pb_info, tags={"k": "v"})
    )
    assert r[5].push == pb.Push(channel="ch", leave=pb.Leave(info=pb_info))
    assert r[6].push == pb.Push(
        channel="ch", unsubscribe=pb.Unsubscribe(code=2000, reason="server unsubscribe")
    )
    sub = r[7].subscribe
    assert (sub.recoverable, sub.positioned, sub.recovered, sub.epoch, sub.offset, sub.was_recovering) == (
        True,
        True,
        True,
        "ep",
        4,
        True,
    )
    assert [p.data for p in sub.publications] == [b"p"]
    assert r[8].history == pb.HistoryResult(
        publications=[pb.Publication(data=b"h", offset=1)], epoch="ep", offset=1
    )
    assert r[9].presence.presence["c"] == pb_info
    assert r[10].push.disconnect == pb.Disconnect(code=3001, reason="shutdown", reconnect=True)


def test_codec_attributes_and_json_unchanged():
    assert (PROTOBUF.name, PROTOBUF.separator, PROTOBUF.binary) == ("protobuf", b"", True)
    assert (JSON.name, JSON.separator, JSON.binary) == ("json", b"\n", False)
    assert PROTOBUF.encode_ping() == b"\x00"


def test_json_subscribers_get_payload_bytes_verbatim_without_raw_newlines():
    # Centrifugo's Raw: bytes as they are, raw newlines dropped (they delimit a frame's messages).
    assert (
        JSON.encode_publication("c", Publication(b'{\n"a": 1\n}'))
        == b'{"push":{"channel":"c","pub":{"data":{"a": 1}}}}'
    )
    assert JSON.encode_publication("c", Publication(b'"x"')) == b'{"push":{"channel":"c","pub":{"data":"x"}}}'


# --- the committed generated module -----------------------------------------------------------


def test_generated_module_matches_client_proto(tmp_path: Path):
    """No drift: protoc on the committed client.proto yields the committed client_pb2.py/.pyi."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(PKG / "client.proto"),
        ],
        check=True,
        cwd=ROOT,
    )
    out = tmp_path / "gateway" / "protocol" / "protobuf"
    for name in ("client_pb2.py", "client_pb2.pyi"):
        assert (out / name).read_text() == (PKG / name).read_text(), f"{name} is stale: regenerate it"


def test_server_api_data_required_unless_b64data():
    from gateway.api.requests import ApiError, BroadcastRequest, PublishRequest, parse

    assert parse(PublishRequest, {"channel": "c", "b64data": "AA=="}).b64data == "AA=="
    assert parse(BroadcastRequest, {"channels": ["c"], "b64data": "AA=="}).channels == ["c"]
    assert parse(PublishRequest, {"channel": "c", "data": None}).data is None  # publishes null
    with pytest.raises(ApiError):
        parse(PublishRequest, {"channel": "c"})


def test_proxy_results_travel_over_protobuf():
    # The RPC proxy's answer and the connect proxy's ``data`` reach Protobuf clients as bytes.
    frame = PROTOBUF.encode_reply(1, Method.RPC, RPCResult(b'{"answer":42}'))
    frame += PROTOBUF.encode_reply(2, Method.RPC, RPCResult())
    frame += PROTOBUF.encode_reply(3, Method.CONNECT, ConnectResult("cid", "1.0", data=b'{"app":1}'))
    rpc, empty_rpc, connect = replies(frame)
    assert rpc.HasField("rpc") and rpc.rpc.data == b'{"answer":42}'
    assert empty_rpc.HasField("rpc") and empty_rpc.rpc.data == b""
    assert connect.connect.data == b'{"app":1}'


def test_decoding_is_lazy_and_bounded():
    commands = PROTOBUF.iter_frame(bytes(3) + b"\x80")
    assert [next(commands).id for _ in range(3)] == [0, 0, 0]  # the truncated varint is not read yet
    with pytest.raises(ProtocolError):
        next(commands)
    with pytest.raises(ProtocolError) as info:
        PROTOBUF.decode_frame(bytes(65536))
    assert info.value.disconnect == codes.DISCONNECT_TOO_MANY_REQUESTS
