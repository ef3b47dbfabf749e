"""Codecs of client protocol v2 (PROTOCOL.md §1.1–1.2): the ``Codec`` interface the Session and
the hub use, and ``JsonCodec``, the JSON encoding (Protobuf plugs in as a second ``Codec``).

``iter_frame`` turns one transport frame (newline-delimited commands) into typed commands, one
at a time as the session pulls them, so a frame costs no more than the commands the session
accepts from it (``MAX_FRAME_COMMANDS``); anything malformed raises ``ProtocolError`` carrying
the disconnect to send (3501), at the first bad line. ``JsonCodec`` writes replies and pushes
with gateway/protocol/json_replies.py, the JSON encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Protocol

import orjson

from gateway.protocol import codes
from gateway.protocol.headers import emulated_headers
from gateway.protocol.json_replies import (
    PING,
    client_info_obj,
    encode_error,
    encode_pub_push,
    encode_push,
    encode_reply,
    keyed_publication_obj,
    map_publication_obj,
    result_obj,
    subscribe_result_obj,
)
from gateway.protocol.jsonbytes import dumps_kept
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

MAX_UINT32 = 2**32 - 1
MAX_UINT64 = 2**64 - 1


class ProtocolError(Exception):
    """A frame or command that breaks the protocol; ``disconnect`` is what to close with."""

    def __init__(self, message: str, disconnect: codes.Disconnect = codes.DISCONNECT_BAD_REQUEST) -> None:
        super().__init__(message)
        self.disconnect = disconnect


_METHODS = tuple(Method)


MAX_FRAME_COMMANDS = 1024
"""The most commands one frame may carry, and one connection may have pending (decoded, not
yet run): past either the connection closes with 3013, refused while decoding (§1.2)."""

_CONTENT = re.compile(rb"[^ \t\r\n]")
"""The first byte that is not JSON whitespace: blank lines are skipped in C, not one by one."""


def iter_frame(frame: str | bytes) -> Iterator[Command]:
    """The commands of a frame of newline-joined JSON commands, decoded one line at a time as
    the caller pulls them. The caller bounds the work: it stops pulling at its limits
    (gateway/protocol/session.py), and nothing past the last command it pulled is parsed.

    Raises:
        ProtocolError: (when pulled) a line that is not valid JSON, not an object, or has bad
            field types; an empty frame. The commands before it were yielded already.
    """
    if isinstance(frame, str):
        frame = frame.encode()
    pos, size, seen = 0, len(frame), False
    while pos < size:
        start = _CONTENT.search(frame, pos)
        if start is None:
            break
        pos = start.start()
        end = frame.find(b"\n", pos)
        if end < 0:
            end = size
        line, pos = frame[pos:end], end + 1
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError("malformed JSON") from exc
        seen = True
        yield decode_command(obj)
    if not seen:
        raise ProtocolError("empty frame")


def bounded(commands: Iterator[Command], limit: int = MAX_FRAME_COMMANDS) -> list[Command]:
    """Every command of ``commands`` (a codec's ``iter_frame``), all or nothing, at most ``limit``.

    Raises:
        ProtocolError: a command cannot be decoded (3501), or there are more than ``limit``
            (3013, at the first one past it: the rest of the frame is never parsed).
    """
    out: list[Command] = []
    for cmd in commands:
        if len(out) >= limit:
            raise ProtocolError("too many commands in one frame", codes.DISCONNECT_TOO_MANY_REQUESTS)
        out.append(cmd)
    return out


def decode_frame(frame: str | bytes, limit: int = MAX_FRAME_COMMANDS) -> list[Command]:
    """Decode a frame of newline-joined JSON commands, in order, all or nothing.

    Raises:
        ProtocolError: empty frame, invalid JSON, a line that is not an object, bad field
            types (3501); more than ``limit`` commands (3013).
    """
    return bounded(iter_frame(frame), limit)


def decode_command(obj: Any) -> Command:
    """Decode one command object. The first non-null method field wins (as Centrifugo)."""
    if not isinstance(obj, dict):
        raise ProtocolError("command is not an object")
    cmd_id = obj.get("id", 0)
    if cmd_id is None:
        cmd_id = 0
    if not isinstance(cmd_id, int) or isinstance(cmd_id, bool) or not 0 <= cmd_id <= MAX_UINT32:
        raise ProtocolError("bad command id")
    for method in _METHODS:
        params = obj.get(method.value)
        if params is not None:
            if not isinstance(params, dict):
                raise ProtocolError(f"{method.value} is not an object")
            return Command(cmd_id, method, _decode_request(method, params))
    if cmd_id:
        # An id but no known method (a newer or unknown command): answered like the v1 `ping`
        # command, error 108 "not available", instead of being mistaken for a pong (no reply).
        return Command(cmd_id, Method.PING, EmptyRequest())
    return Command(cmd_id, None, None)


def _str(params: dict[str, Any], key: str) -> str:
    value = params.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ProtocolError(f"{key} must be a string")
    return value


def _bool(params: dict[str, Any], key: str) -> bool:
    value = params.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ProtocolError(f"{key} must be a boolean")
    return value


def _int(params: dict[str, Any], key: str, lo: int = 0, hi: int = MAX_UINT64) -> int:
    value = params.get(key, 0)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ProtocolError(f"{key} must be an integer")
    return value


def _raw(params: dict[str, Any], key: str) -> bytes | None:
    if key not in params or params[key] is None:
        return None
    return dumps_kept(params[key])  # publication data and info are kept (jsonbytes.py)


def _headers(params: dict[str, Any]) -> dict[str, str]:
    raw = params.get("headers")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError("headers must be an object")
    try:
        return emulated_headers(raw)
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None


def _sub_refresh(p: dict[str, Any]) -> SubRefreshRequest:
    """``sub_refresh``, with a shared-poll track (``type`` 1: ``track`` batches of signed
    ``items``) or untrack (``type`` 2: ``untrack`` keys)."""
    batches: list[TrackBatch] = []
    for batch in _list(p, "track"):
        if not isinstance(batch, dict):
            raise ProtocolError("track entries must be objects")
        items = []
        for item in _list(batch, "items"):
            if not isinstance(item, dict):
                raise ProtocolError("track items must be objects")
            items.append((_str(item, "key"), _int(item, "version")))
        batches.append(TrackBatch(_str(batch, "signature"), tuple(items)))
    untrack = _list(p, "untrack")
    if not all(isinstance(key, str) for key in untrack):
        raise ProtocolError("untrack must be a list of strings")
    return SubRefreshRequest(
        _str(p, "channel"),
        _str(p, "token"),
        type=_int(p, "type", -(2**31), 2**31 - 1),
        track=tuple(batches),
        untrack=tuple(untrack),
    )


def _list(params: dict[str, Any], key: str) -> list[Any]:
    value = params.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{key} must be a list")
    return value


def _decode_request(method: Method, p: dict[str, Any]) -> Request:  # noqa: C901 - one branch per method
    if method is Method.CONNECT:
        subs_raw = p.get("subs") or {}
        if not isinstance(subs_raw, dict):
            raise ProtocolError("subs must be an object")
        subs: dict[str, SubscribeRecovery] = {}
        for channel, sub in subs_raw.items():
            if not isinstance(sub, dict):
                raise ProtocolError("subs entries must be objects")
            subs[channel] = SubscribeRecovery(_bool(sub, "recover"), _int(sub, "offset"), _str(sub, "epoch"))
        return ConnectRequest(
            token=_str(p, "token"),
            data=_raw(p, "data"),
            subs=subs,
            name=_str(p, "name"),
            version=_str(p, "version"),
            headers=_headers(p),
        )
    if method is Method.SUBSCRIBE:
        return SubscribeRequest(
            channel=_str(p, "channel"),
            token=_str(p, "token"),
            recover=_bool(p, "recover"),
            epoch=_str(p, "epoch"),
            offset=_int(p, "offset"),
            data=_raw(p, "data"),
            positioned=_bool(p, "positioned"),
            recoverable=_bool(p, "recoverable"),
            join_leave=_bool(p, "join_leave"),
            flag=_int(p, "flag", -(2**63), 2**63 - 1),
            type=_int(p, "type", -(2**31), 2**31 - 1),
            tf=p.get("tf"),
            delta=_str(p, "delta"),
            phase=_int(p, "phase", -(2**31), 2**31 - 1),
            cursor=_str(p, "cursor"),
            limit=_int(p, "limit", -(2**31), 2**31 - 1),
            asc=_bool(p, "asc"),
        )
    if method is Method.UNSUBSCRIBE:
        return UnsubscribeRequest(_str(p, "channel"))
    if method is Method.PUBLISH:
        return PublishRequest(
            _str(p, "channel"),
            _raw(p, "data") or b"null",
            _int(p, "type", -(2**31), 2**31 - 1),
            _str(p, "key"),
            _bool(p, "removed"),
        )
    if method in (Method.PRESENCE, Method.PRESENCE_STATS):
        return ChannelRequest(_str(p, "channel"))
    if method is Method.HISTORY:
        since_raw = p.get("since")
        since = None
        if since_raw is not None:
            if not isinstance(since_raw, dict):
                raise ProtocolError("since must be an object")
            since = StreamPosition(_int(since_raw, "offset"), _str(since_raw, "epoch"))
        return HistoryRequest(
            _str(p, "channel"), _int(p, "limit", -(2**31), 2**31 - 1), since, _bool(p, "reverse")
        )
    if method is Method.RPC:
        return RPCRequest(_str(p, "method"), _raw(p, "data"))
    if method is Method.SEND:
        return SendRequest(_raw(p, "data"))
    if method is Method.REFRESH:
        return RefreshRequest(_str(p, "token"))
    if method is Method.SUB_REFRESH:
        return _sub_refresh(p)
    return EmptyRequest()


class Codec(Protocol):
    """One wire encoding of the client protocol. The Session and the hub see only this
    interface: commands come out of ``iter_frame``, every outgoing message goes through an
    ``encode_*``. Implementations are stateless and shared by all connections."""

    name: str
    """The metrics label (``json``, ``protobuf``)."""
    separator: bytes
    """What joins the encoded messages of one write (``\\n`` for JSON; nothing for Protobuf,
    whose messages carry a length prefix)."""
    binary: bool
    """Binary WebSocket frames (Protobuf) instead of text frames (JSON)."""

    def iter_frame(self, frame: str | bytes) -> Iterator[Command]:
        """The frame's commands, decoded lazily one by one as the caller pulls them, so the
        caller bounds the work per frame by what it accepts.

        Raises:
            ProtocolError: (when pulled) the next command cannot be decoded, or the frame is
                empty (the connection closes with its disconnect)."""
        ...

    def decode_frame(self, frame: str | bytes) -> list[Command]:
        """All commands of a frame (at most ``MAX_FRAME_COMMANDS``), all or nothing.

        Raises:
            ProtocolError: the frame cannot be decoded, or carries too many commands."""
        ...

    def encode_reply(self, cmd_id: int, method: Method, result: Result) -> bytes: ...

    def encode_error(self, cmd_id: int, error: codes.Error) -> bytes: ...

    def encode_ping(self) -> bytes: ...

    def encode_publication(self, channel: str, pub: Publication) -> bytes:
        """The publication push; built once per publication and shared by every subscriber."""
        ...

    def encode_join_leave(self, channel: str, key: str, info: ClientInfo) -> bytes:
        """``key`` is ``join`` or ``leave``."""
        ...

    def encode_subscribe_push(self, channel: str, result: SubscribeResult) -> bytes: ...

    def encode_unsubscribe_push(self, channel: str, unsubscribe: codes.Unsubscribe) -> bytes: ...

    def encode_keyed_publication(self, channel: str, item: KeyedPublication) -> bytes:
        """A shared-poll key's publication push (built once per key update and codec)."""
        ...


class JsonCodec:
    """The JSON protocol (``centrifuge-json``): newline-delimited commands and replies."""

    name = "json"
    separator = b"\n"
    binary = False

    def iter_frame(self, frame: str | bytes) -> Iterator[Command]:
        return iter_frame(frame)

    def decode_frame(self, frame: str | bytes) -> list[Command]:
        return decode_frame(frame)

    def encode_reply(self, cmd_id: int, method: Method, result: Result) -> bytes:
        return encode_reply(cmd_id, method.value, result_obj(result))

    def encode_error(self, cmd_id: int, error: codes.Error) -> bytes:
        return encode_error(cmd_id, error)

    def encode_ping(self) -> bytes:
        return PING

    def encode_publication(self, channel: str, pub: Publication) -> bytes:
        if pub.key:
            return encode_push(channel, "pub", map_publication_obj(pub))
        return encode_pub_push(channel, pub.data, pub.offset, pub.info, pub.tags)

    def encode_join_leave(self, channel: str, key: str, info: ClientInfo) -> bytes:
        return encode_push(channel, key, {"info": client_info_obj(info)})

    def encode_subscribe_push(self, channel: str, result: SubscribeResult) -> bytes:
        return encode_push(channel, "subscribe", subscribe_result_obj(result))

    def encode_unsubscribe_push(self, channel: str, unsubscribe: codes.Unsubscribe) -> bytes:
        return encode_push(channel, "unsubscribe", {"code": unsubscribe.code, "reason": unsubscribe.reason})

    def encode_keyed_publication(self, channel: str, item: KeyedPublication) -> bytes:
        return encode_push(channel, "pub", keyed_publication_obj(item))


JSON: Codec = JsonCodec()
"""The JSON codec (stateless, shared)."""
