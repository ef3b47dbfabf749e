"""The permessage-deflate core (gateway/transports/deflate.py) in process: the compressed frame
of a shared push is built once and reused, the size threshold, windows other than the shared one,
the two inbound bounds on the websockets extension, and the options as loaded from a config."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from websockets.exceptions import PayloadTooBig
from websockets.frames import Frame, Opcode

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError
from gateway.hub import SharedPush
from gateway.transports import deflate, framing

TAIL = b"\x00\x00\xff\xff"
SETTINGS = deflate.DeflateSettings(level=1, min_size=100)


def inflate(data: bytes, window_bits: int = 15) -> bytes:
    return zlib.decompressobj(wbits=-window_bits).decompress(data + TAIL)


def header(frame: bytes) -> tuple[int, bytes]:
    """(first byte, payload) of an unmasked server frame."""
    n = frame[1] & 0x7F
    start = 2 if n < 126 else 4 if n == 126 else 10
    return frame[0], frame[start:]


def test_a_shared_push_is_compressed_once_and_the_frame_reused():
    payload = json.dumps({"push": {"pub": {"data": "x" * 500}}}).encode()
    push = SharedPush(payload)
    first = deflate.ws_frame([payload], push, SETTINGS, 15, binary=False, separator=b"\n")
    again = deflate.ws_frame([payload], push, SETTINGS, 15, binary=False, separator=b"\n")
    assert again is first and push.deflated is first
    b0, data = header(first)
    assert b0 == 0xC1  # FIN, RSV1, text
    assert inflate(data) == payload
    # The plain frame slot is untouched: uncompressed connections still share their own frame.
    assert push.frame is None


def test_binary_frames_for_protobuf_and_plain_frames_up_to_min_size():
    payload = b"\x0a" * 300
    b0, data = header(deflate.ws_frame([payload], None, SETTINGS, 15, binary=True, separator=b""))
    assert b0 == 0xC2 and inflate(data) == payload
    small = b'{"push":{}}' + b" " * 89  # exactly min_size bytes: not compressed
    push = SharedPush(small)
    frame = deflate.ws_frame([small], push, SETTINGS, 15, binary=False, separator=b"\n")
    assert frame == framing.ws_text_frame(small) and push.deflated is None
    assert deflate.DeflateSettings(min_size=0).compresses(0)


def test_a_smaller_window_is_compressed_per_connection_within_its_window():
    payload = (b"abcdefghij" * 200) + bytes(range(256)) * 4
    push = SharedPush(payload)
    frame = deflate.ws_frame([payload], push, SETTINGS, 9, binary=False, separator=b"\n")
    assert push.deflated is None
    assert inflate(header(frame)[1], 9) == payload


def test_joined_payloads_are_compressed_as_one_message():
    parts = [b'{"push":{"a":1}}' * 10, b'{"push":{"b":2}}' * 10]
    frame = deflate.ws_frame(parts, None, SETTINGS, 15, binary=False, separator=b"\n")
    assert inflate(header(frame)[1]) == b"\n".join(parts)


def _inflater(wire_limit: int | None) -> deflate._Inflater:
    factory = deflate.DeflateSettings().factory(wire_limit)
    _, extension = factory.process_request_params([], [])
    assert isinstance(extension, deflate._Inflater)
    assert extension.local_no_context_takeover  # server_no_context_takeover always answered
    return extension


def test_an_inflated_message_past_the_limit_raises_before_inflating_it_all():
    bomb = deflate.deflate(b"0" * (1 << 20), 9)
    with pytest.raises(deflate.InflatedTooBig) as info:
        _inflater(None).decode(Frame(Opcode.TEXT, bomb, rsv1=True), max_size=4096)
    assert str(info.value) == "message too big after decompression"
    ok = _inflater(None).decode(Frame(Opcode.TEXT, deflate.deflate(b"0" * 4096, 1), rsv1=True), max_size=4096)
    assert ok.data == b"0" * 4096 and not ok.rsv1


def test_compressed_bytes_are_bounded_across_fragments():
    inflater = _inflater(100)
    inflater.decode(Frame(Opcode.TEXT, b"a" * 60, fin=False))
    with pytest.raises(PayloadTooBig) as info:
        inflater.decode(Frame(Opcode.CONT, b"a" * 60))
    assert not isinstance(info.value, deflate.InflatedTooBig)
    # A new message starts counting again; control frames are not counted.
    inflater.decode(Frame(Opcode.PING, b"p"))
    assert inflater.decode(Frame(Opcode.TEXT, b"a" * 100)).data == b"a" * 100


def test_negotiated_reads_the_servers_window():
    assert deflate.negotiated([]) is None
    assert deflate.negotiated([_inflater(None)]) == 15


def _load(tmp_path: Path, websocket: dict[str, object]) -> object:
    file = tmp_path / "config.json"
    file.write_text(json.dumps({"websocket": websocket}))
    settings, warnings = load_settings(str(file), {})
    assert not [w for w in warnings if "compression" in w], warnings
    return deflate.deflate_settings(settings.websocket)


def test_the_options_load_with_centrifugos_defaults(tmp_path: Path):
    assert _load(tmp_path, {}) is None
    assert _load(tmp_path, {"compression": True}) == deflate.DeflateSettings(1, 0, 655360)
    loaded = _load(
        tmp_path,
        {
            "compression": True,
            "compression_level": 9,
            "compression_min_size": 512,
            "decompressed_message_size_limit": 1 << 20,
        },
    )
    assert loaded == deflate.DeflateSettings(9, 512, 1 << 20)
    assert _load(tmp_path, {"compression": True, "message_size_limit": 0}) == deflate.DeflateSettings(
        1, 0, None
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("compression_level", 0),
        ("compression_level", 10),
        ("compression_min_size", -1),
        ("decompressed_message_size_limit", -1),
    ],
)
def test_out_of_range_values_are_refused_by_name(tmp_path: Path, option: str, value: int):
    with pytest.raises(ConfigError, match=f"websocket.{option}"):
        _load(tmp_path, {"compression": True, option: value})


def test_the_environment_sets_them(tmp_path: Path):
    env = {"CENTRIFUGO_WEBSOCKET_COMPRESSION": "true", "CENTRIFUGO_WEBSOCKET_COMPRESSION_LEVEL": "5"}
    settings, _ = load_settings(None, env)
    assert deflate.deflate_settings(settings.websocket) == deflate.DeflateSettings(5, 0, 655360)
