"""What a proxy backend answers, as typed values (pure: no I/O).

A transport (``http.py``, ``grpc.py``) turns the backend's answer into one plain object shaped like
Centrifugo's proxy.proto ``*Response`` (``result`` / ``error`` / ``disconnect``) whose bytes fields
(``data``, ``info``, ``meta`` and the ``subs`` entries' ``info``/``data``) are already ``bytes``;
this module validates that object and reads each kind's result the way Centrifugo's proxy handlers
do (``b64info``/``b64data`` win over ``info``/``data``; ``expire_at`` 0 = no expiry). A shape it
cannot read raises ``ProxyFailure`` ("malformed"), which the caller answers like any other proxy
failure. Imports only the pure protocol modules.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.protocol import codes
from gateway.protocol.policy import MAX_EXPIRE_AT, Override, ServerSub


class ProxyFailure(Exception):
    """The proxy could not be asked or its answer could not be read: ``reason`` is one of
    ``timeout``, ``unavailable`` (refused, reset, DNS), ``status`` (HTTP non-200 — a redirect
    included, never followed — / gRPC status), ``malformed``, ``too_large`` (the answer passed
    the proxy's ``max_response_size``). Never carries request data (headers may hold cookies)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ProxyReply:
    """One proxy answer: at most one of ``error`` / ``disconnect`` is used (disconnect first, as
    Centrifugo checks it first); ``result`` None = the backend sent no result."""

    result: Mapping[str, Any] | None
    error: codes.Error | None = None
    disconnect: codes.Disconnect | None = None


@dataclass(frozen=True, slots=True)
class ConnectGrant:
    user: str
    expire_at: int | None = None
    info: bytes | None = None
    data: bytes | None = None
    subs: dict[str, ServerSub] = field(default_factory=dict)
    meta: bytes | None = None


@dataclass(frozen=True, slots=True)
class RefreshGrant:
    expired: bool
    expire_at: int | None = None
    info: bytes | None = None
    meta: bytes | None = None


@dataclass(frozen=True, slots=True)
class SubscribeGrant:
    expire_at: int | None = None
    info: bytes | None = None
    data: bytes | None = None
    override: Override | None = None


@dataclass(frozen=True, slots=True)
class PublishGrant:
    data: bytes | None = None
    """Replacement data (None: publish the client's data)."""
    skip_history: bool = False


@dataclass(frozen=True, slots=True)
class MapWriteGrant:
    """How a client map write (publish or removal) goes to the engine: the key, the data
    (publish; None: the client's), and the write options the server API's ``map_publish`` /
    ``map_remove`` take. From the namespace's permissions, or from the map publish / remove
    proxy's result (Centrifugo's ``MapPublishResult`` / ``MapRemoveResult``)."""

    key: str
    data: bytes | None = None
    tags: dict[str, str] | None = None
    key_mode: str = ""
    idempotency_key: str = ""
    delta: bool = False
    version: int = 0
    version_epoch: str = ""


MAP_KEY_MODES = ("", "if_new", "if_exists")
"""``key_mode`` values a map publish proxy may answer (gateway/maps/state.py ``KEY_MODES``)."""


def _malformed(detail: str) -> ProxyFailure:
    return ProxyFailure("malformed", detail)


def _int(obj: Mapping[str, Any], key: str, low: int, high: int) -> int:
    """An integer field within ``[low, high]``: a value out of range is an unreadable answer,
    caught here before it reaches a reply that cannot encode it."""
    value = obj.get(key, 0)
    if isinstance(value, str) and value.lstrip("-").isdigit():  # protobuf JSON writes int64 as a string
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _malformed(f"{key} is not an integer")
    if not low <= value <= high:
        raise _malformed(f"{key} is out of range")
    return value


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str):
        raise _malformed(f"{key} is not a string")
    return value


def _bool(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise _malformed(f"{key} is not a boolean")
    return value


def _obj(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _malformed(f"{what} is not an object")
    return value


def _bytes(obj: Mapping[str, Any], raw_key: str, b64_key: str) -> bytes | None:
    """``b64<key>`` (base64) wins over ``<key>`` (bytes from the transport); empty = None."""
    b64 = _str(obj, b64_key)
    if b64:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise _malformed(f"{b64_key} is not base64") from None
    value = obj.get(raw_key)
    if value is None or value == b"":
        return None
    if not isinstance(value, bytes):
        raise _malformed(f"{raw_key} has a wrong type")
    return value


def _expire_at(obj: Mapping[str, Any]) -> int | None:
    value = _int(obj, "expire_at", -(2**63), MAX_EXPIRE_AT)  # <= 0: no expiry, as Centrifugo
    return value if value > 0 else None


def _disconnect(d: Mapping[str, Any]) -> codes.Disconnect:
    """A close frame can only carry an application code (3000–4999) and a reason of at most
    123 bytes: another code is unreadable, a longer reason is cut (never inside a character)."""
    code = _int(d, "code", 0, codes.MAX_ERROR_CODE)
    if not codes.is_close_code(code):
        raise _malformed(f"disconnect code {code} is not in 3000-4999")
    return codes.Disconnect(code, codes.close_reason(_str(d, "reason")))


def parse_reply(obj: object) -> ProxyReply:
    """The ``result`` / ``error`` / ``disconnect`` of a decoded answer.

    Raises:
        ProxyFailure: "malformed" when the answer is not such an object.
    """
    top = _obj(obj, "response")
    disconnect = top.get("disconnect")
    if disconnect is not None:
        return ProxyReply(None, disconnect=_disconnect(_obj(disconnect, "disconnect")))
    error = top.get("error")
    if error is not None:
        e = _obj(error, "error")
        code = _int(e, "code", 0, codes.MAX_ERROR_CODE)
        return ProxyReply(None, error=codes.Error(code, _str(e, "message"), _bool(e, "temporary")))
    result = top.get("result")
    return ProxyReply(None if result is None else _obj(result, "result"))


def _override(value: object) -> Override | None:
    if value is None:
        return None
    ov = _obj(value, "override")

    def pick(key: str) -> bool | None:
        item = ov.get(key)
        if item is None:
            return None
        return _bool(_obj(item, key), "value")

    return Override(
        presence=pick("presence"),
        join_leave=pick("join_leave"),
        force_push_join_leave=pick("force_push_join_leave"),
        force_recovery=pick("force_recovery"),
        force_positioning=pick("force_positioning"),
    )


def connect_grant(result: Mapping[str, Any] | None) -> ConnectGrant:
    """Connect: no result = an anonymous connection (Centrifugo: empty credentials)."""
    if result is None:
        return ConnectGrant(user="")
    subs: dict[str, ServerSub] = {}
    channels = result.get("channels", [])
    if not isinstance(channels, list) or not all(isinstance(ch, str) for ch in channels):
        raise _malformed("channels is not a list of strings")
    for ch in channels:
        subs[ch] = ServerSub()
    for ch, raw in _obj(result.get("subs", {}), "subs").items():
        opts = _obj(raw, "subs entry")
        subs[str(ch)] = ServerSub(
            _bytes(opts, "info", "b64info"), _bytes(opts, "data", "b64data"), _override(opts.get("override"))
        )
    meta = result.get("meta")
    return ConnectGrant(
        user=_str(result, "user"),
        expire_at=_expire_at(result),
        info=_bytes(result, "info", "b64info"),
        data=_bytes(result, "data", "b64data"),
        subs=subs,
        meta=meta if isinstance(meta, bytes) and meta else None,
    )


def refresh_grant(result: Mapping[str, Any] | None) -> RefreshGrant:
    """Refresh and sub_refresh: no result = expired (Centrifugo disconnects / unsubscribes)."""
    if result is None or _bool(result, "expired"):
        return RefreshGrant(expired=True)
    meta = result.get("meta")
    return RefreshGrant(
        expired=False,
        expire_at=_expire_at(result),
        info=_bytes(result, "info", "b64info"),
        meta=meta if isinstance(meta, bytes) and meta else None,
    )


def subscribe_grant(result: Mapping[str, Any] | None) -> SubscribeGrant:
    """Subscribe: no result = allowed with the namespace options."""
    if result is None:
        return SubscribeGrant()
    return SubscribeGrant(
        expire_at=_expire_at(result),
        info=_bytes(result, "info", "b64info"),
        data=_bytes(result, "data", "b64data"),
        override=_override(result.get("override")),
    )


def publish_grant(result: Mapping[str, Any] | None) -> PublishGrant:
    if result is None:
        return PublishGrant()
    return PublishGrant(data=_bytes(result, "data", "b64data"), skip_history=_bool(result, "skip_history"))


def rpc_data(result: Mapping[str, Any] | None) -> bytes | None:
    return None if result is None else _bytes(result, "data", "b64data")


def _tags(obj: Mapping[str, Any]) -> dict[str, str] | None:
    tags = _obj(obj.get("tags", {}), "tags")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise _malformed("tags is not a map of strings")
    return dict(tags) or None


def map_publish_grant(result: Mapping[str, Any] | None, key: str) -> MapWriteGrant:
    """Map publish: no result = write the client's key and data; a result may replace the key
    (non-empty ``key``) and the data (``b64data`` over ``data``) and sets the write options
    (``tags``, ``key_mode``, ``idempotency_key``, ``delta``, ``version`` + ``version_epoch``),
    as Centrifugo's map publish proxy handler reads them. ``score`` and ``stream_data`` are read
    by no Centrifugo release and are ignored here too."""
    if result is None:
        return MapWriteGrant(key)
    key_mode = _str(result, "key_mode")
    if key_mode not in MAP_KEY_MODES:
        raise _malformed("key_mode is not one of if_new, if_exists")
    return MapWriteGrant(
        key=_str(result, "key") or key,
        data=_bytes(result, "data", "b64data"),
        tags=_tags(result),
        key_mode=key_mode,
        idempotency_key=_str(result, "idempotency_key"),
        delta=_bool(result, "delta"),
        version=_int(result, "version", 0, 2**64 - 1),
        version_epoch=_str(result, "version_epoch"),
    )


def map_remove_grant(result: Mapping[str, Any] | None, key: str) -> MapWriteGrant:
    """Map remove: no result = remove the client's key; a result may replace the key and sets
    ``idempotency_key``. Its ``tags`` are ignored: a removal carries the removed entry's tags
    (the engines keep no tags of their own for a removal, as the server API's ``map_remove``)."""
    if result is None:
        return MapWriteGrant(key)
    return MapWriteGrant(key=_str(result, "key") or key, idempotency_key=_str(result, "idempotency_key"))
