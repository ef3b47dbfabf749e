"""``ProtobufCodec``: client protocol v2 in Protobuf (PROTOCOL.md §1, Centrifugo's
``centrifuge-protobuf``), the second ``Codec`` beside ``JsonCodec`` (gateway/protocol/codec.py).

A frame (a binary WebSocket message, an HTTP-streaming body, an emulation request's ``data``)
holds one or more ``Command`` messages, each prefixed with its length as a varint; replies and
pushes (``Reply{push}``) are written the same way, so the messages of one tick are joined with
no separator (``separator = b""``). Payload fields (``data``, ``info``) are bytes on this wire
and travel unchanged: JSON payloads stay JSON bytes, binary payloads stay binary.

Decoding is lazy, like the JSON codec's: ``iter_frame`` cuts and parses one message at a time as
the session pulls it, so a frame of 65,536 empty messages costs only the commands the session
accepts before refusing the next one (gateway/protocol/session.py). A truncated varint, a length
past the end of the frame, a message the Protobuf parser rejects (corrupt wire format, invalid
UTF-8 in a string, too deep nesting), a known field sent with the wrong wire type (Centrifugo's
vtprotobuf decoder refuses it; upb would keep it as an unknown field) or an empty frame raises
``ProtocolError`` (3501 bad request) at that message, and the connection closes. Unknown fields are
skipped, as proto3 (and Centrifugo) do. Where Centrifugo ends a frame silently at a truncated
length prefix, this codec refuses the frame (3501) like any other malformed input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from gateway.protocol import codes
from gateway.protocol.codec import ProtocolError, bounded
from gateway.protocol.headers import emulated_headers
from gateway.protocol.messages import (
    ChannelRequest,
    ClientInfo,
    Command,
    ConnectRequest,
    EmptyRequest,
    HistoryRequest,
    KeyedPublication,
    Method,
    Publication,
    PublishRequest,
    RefreshRequest,
    Request,
    Result,
    RPCRequest,
    SendRequest,
    StreamPosition,
    SubRefreshRequest,
    SubscribeRecovery,
    SubscribeRequest,
    SubscribeResult,
    TrackBatch,
    UnsubscribeRequest,
)
from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.framing import delimited, iter_messages
from gateway.protocol.protobuf.replies import (
    client_info_pb,
    keyed_publication_pb,
    publication_pb,
    push_reply,
    result_pb,
)

SUBPROTOCOL = "centrifuge-protobuf"
"""The WebSocket subprotocol a client offers to speak Protobuf."""
CONTENT_TYPE = "application/octet-stream"
"""The content type of Protobuf HTTP-streaming and emulation bodies (what the SDKs send)."""

_METHODS = tuple(Method)


# --- decoding -------------------------------------------------------------------------------


def decode_command(body: bytes) -> Command:
    """One serialized ``Command``; the first request field set wins (as Centrifugo).

    Raises:
        ProtocolError: the Protobuf parser rejects the bytes.
    """
    cmd = pb.Command()
    try:
        cmd.ParseFromString(body)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed Protobuf command: {exc}") from exc
    _check_wire_types(cmd)
    cmd_id = int(cmd.id)
    for method in _METHODS:
        if cmd.HasField(method.value):
            return Command(cmd_id, method, _decode_request(method, getattr(cmd, method.value)))
    if cmd_id:
        # As the JSON codec: an id but no known method is answered 108, never taken for a pong.
        return Command(cmd_id, Method.PING, EmptyRequest())
    return Command(0, None, None)


def _check_wire_types(msg: Any) -> None:
    """Refuse a known field that arrived with another wire type (the parser kept it as an
    unknown field), in ``msg`` and every message it holds.

    Raises:
        ProtocolError: such a field was found.
    """
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        known = msg.DESCRIPTOR.fields_by_number
        for field in unknown:
            if field.field_number in known:
                raise ProtocolError(f"wrong wire type for {msg.DESCRIPTOR.name} field {field.field_number}")
    for fd, value in msg.ListFields():
        entry = fd.message_type
        if entry is None:
            continue
        if entry.GetOptions().map_entry:
            if entry.fields_by_name["value"].message_type is not None:
                for item in value.values():
                    _check_wire_types(item)
        elif fd.is_repeated:
            for item in value:
                _check_wire_types(item)
        else:
            _check_wire_types(value)


def _data(value: bytes) -> bytes | None:
    """Proto3 cannot tell empty bytes from unset: both mean "no data"."""
    return bytes(value) if value else None


def _decode_request(method: Method, r: Any) -> Request:
    if method is Method.CONNECT:
        subs = {
            str(ch): SubscribeRecovery(bool(s.recover), int(s.offset), str(s.epoch))
            for ch, s in r.subs.items()
        }
        try:
            headers = emulated_headers(r.headers)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        return ConnectRequest(
            token=r.token, data=_data(r.data), subs=subs, name=r.name, version=r.version, headers=headers
        )
    if method is Method.SUBSCRIBE:
        return SubscribeRequest(
            channel=r.channel,
            token=r.token,
            recover=r.recover,
            epoch=r.epoch,
            offset=r.offset,
            data=_data(r.data),
            positioned=r.positioned,
            recoverable=r.recoverable,
            join_leave=r.join_leave,
            flag=r.flag,
            type=r.type,
            tf=_filter_tree(r.tf) if r.HasField("tf") else None,
            delta=r.delta,
            phase=r.phase,
            cursor=r.cursor,
            limit=r.limit,
            asc=r.asc,
        )
    if method is Method.UNSUBSCRIBE:
        return UnsubscribeRequest(r.channel)
    if method is Method.PUBLISH:
        return PublishRequest(r.channel, bytes(r.data), r.type, r.key, r.removed)
    if method in (Method.PRESENCE, Method.PRESENCE_STATS):
        return ChannelRequest(r.channel)
    if method is Method.HISTORY:
        since = StreamPosition(r.since.offset, r.since.epoch) if r.HasField("since") else None
        return HistoryRequest(r.channel, r.limit, since, r.reverse)
    if method is Method.RPC:
        return RPCRequest(r.method, _data(r.data))
    if method is Method.SEND:
        return SendRequest(_data(r.data))
    if method is Method.REFRESH:
        return RefreshRequest(r.token)
    if method is Method.SUB_REFRESH:
        track = tuple(
            TrackBatch(b.signature, tuple((i.key, int(i.version)) for i in b.items)) for b in r.track
        )
        return SubRefreshRequest(r.channel, r.token, type=r.type, track=track, untrack=tuple(r.untrack))
    return EmptyRequest()


def _filter_tree(node: Any) -> dict[str, Any]:
    """A ``FilterNode`` as the JSON tree the tags filter parses (empty fields left out, as the
    JSON SDKs send it)."""
    tree: dict[str, Any] = {}
    for name in ("op", "key", "cmp", "val"):
        value = getattr(node, name)
        if value:
            tree[name] = value
    if node.vals:
        tree["vals"] = list(node.vals)
    if node.nodes:
        tree["nodes"] = [_filter_tree(child) for child in node.nodes]
    return tree


# --- encoding -------------------------------------------------------------------------------


class ProtobufCodec:
    """The Protobuf protocol (``centrifuge-protobuf``): varint-delimited Commands in,
    varint-delimited Replies out. Stateless; one instance serves every connection."""

    name = "protobuf"
    separator = b""
    """Messages of one write are concatenated: each carries its own length prefix."""
    binary = True

    def iter_frame(self, frame: str | bytes) -> Iterator[Command]:
        if isinstance(frame, str):
            frame = frame.encode()
        for body in iter_messages(frame):
            yield decode_command(body)

    def decode_frame(self, frame: str | bytes) -> list[Command]:
        return bounded(self.iter_frame(frame))

    def encode_reply(self, cmd_id: int, method: Method, result: Result) -> bytes:
        reply = pb.Reply(id=cmd_id)
        field = getattr(reply, method.value)
        msg = result_pb(result)
        if msg is None:
            field.SetInParent()
        else:
            field.CopyFrom(msg)
        return delimited(reply)

    def encode_error(self, cmd_id: int, error: codes.Error) -> bytes:
        return delimited(
            pb.Reply(
                id=cmd_id, error=pb.Error(code=error.code, message=error.message, temporary=error.temporary)
            )
        )

    def encode_ping(self) -> bytes:
        return PING

    def encode_publication(self, channel: str, pub: Publication) -> bytes:
        reply, push = push_reply(channel)
        push.pub.CopyFrom(publication_pb(pub))
        return delimited(reply)

    def encode_join_leave(self, channel: str, key: str, info: ClientInfo) -> bytes:
        reply, push = push_reply(channel)
        getattr(push, key).info.CopyFrom(client_info_pb(info))
        return delimited(reply)

    def encode_subscribe_push(self, channel: str, result: SubscribeResult) -> bytes:
        reply, push = push_reply(channel)
        sub = push.subscribe
        sub.SetInParent()
        sub.recoverable = result.recoverable
        sub.positioned = result.positioned
        if result.positioned:
            sub.epoch = result.epoch
            sub.offset = result.offset
        if result.data is not None:
            sub.data = result.data
        return delimited(reply)

    def encode_unsubscribe_push(self, channel: str, unsubscribe: codes.Unsubscribe) -> bytes:
        reply, push = push_reply(channel)
        push.unsubscribe.code = unsubscribe.code
        push.unsubscribe.reason = unsubscribe.reason
        return delimited(reply)

    def encode_keyed_publication(self, channel: str, item: KeyedPublication) -> bytes:
        reply, push = push_reply(channel)
        push.pub.CopyFrom(keyed_publication_pb(item))
        return delimited(reply)

    def encode_disconnect_push(self, disconnect: codes.Disconnect) -> bytes:
        """The disconnect push that ends an HTTP stream (§1.8)."""
        reply, push = push_reply("")
        push.disconnect.code = disconnect.code
        push.disconnect.reason = disconnect.reason
        push.disconnect.reconnect = disconnect.reconnect
        return delimited(reply)


PING = delimited(pb.Reply())
"""A server ping is an empty Reply (a zero length prefix, §1.4)."""

PROTOBUF = ProtobufCodec()
"""The Protobuf codec (stateless, shared)."""


def decode_emulation_request(body: bytes) -> tuple[str, str, bytes]:
    """``(session, node, data)`` of a Protobuf ``EmulationRequest`` body.

    Raises:
        ProtocolError: the body is not one.
    """
    req = pb.EmulationRequest()
    try:
        req.ParseFromString(body)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed emulation request: {exc}") from exc
    return str(req.session), str(req.node), bytes(req.data)
