"""Typed requests of the server API (PROTOCOL.md §6), one type per method, and the one parser
that builds them, whichever front door the params came through (JSON over HTTP, or a protobuf
message read as a ``Mapping`` by gateway/api/grpc/server.py; gateway/api/commands.py maps method
names to these types).

Every method's params object is parsed by ``parse(RequestType, params)``: each field is checked
against its annotation, so a wrong type is error 107 in every method and every field alike
(``disconnect {"user": 5}`` included), never a silent default. The rules follow Centrifugo's
JSON decoding: unknown keys are ignored, ``null`` means absent, integers must be JSON integers
in range (booleans are not integers), and ``data``-like fields keep any JSON value.

The same types are the cluster's user operations (gateway/cluster.py sends them between nodes
and re-parses them on arrival). Imports nothing from the gateway but the error catalogue.
"""

from __future__ import annotations

import base64
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar, Union, get_args, get_origin

from gateway.protocol import codes
from gateway.protocol.policy import MAX_EXPIRE_AT

Json: TypeAlias = object
"""Any JSON value, kept as parsed (``data``, ``info``, ``params``): the parser checks nothing."""

REQUIRED = {"required": True}
"""Field metadata: the key must be present (and, for strings and lists, non-empty)."""

DATA_OR_B64 = {"required": True, "unless": "b64data"}
"""``data`` is required unless a non-empty ``b64data`` is given (Centrifugo: one of the two)."""

INT64 = (-(2**63), 2**63 - 1)
UINT64 = {"range": (0, 2**64 - 1)}
EXPIRE_AT = {"range": (INT64[0], MAX_EXPIRE_AT)}
"""Unix seconds up to year 9999 (``policy.MAX_EXPIRE_AT``); 0 or less = no expiry."""

# Bounds on the items of one request (Taskcast's; Centrifugo has none): every count a request
# names is bounded where it is parsed, so no field makes the work of one command unbounded
# (docs/gateway.md, "Server API"). Past a bound: error 107.
MAX_BROADCAST_CHANNELS = 10_000
"""Channels of one ``broadcast`` (each a publication)."""
MAX_TAGS = 128
"""Entries of a publication's ``tags`` (copied into every delivery and the history)."""
MAX_WHITELIST = 1_000
"""Client IDs in a ``disconnect`` whitelist (sent to every node of the cluster)."""
MAX_PATTERN_LENGTH = 1_024
"""Characters of a ``channels`` pattern (each distinct pattern is compiled and cached)."""

BROADCAST_CHANNELS = {"required": True, "max_items": MAX_BROADCAST_CHANNELS}
TAGS = {"max_items": MAX_TAGS}


class ApiError(Exception):
    """A server API failure with a code from the catalogue (gateway/protocol/codes.py). Raise a
    fresh instance every time: a shared instance would chain every raise's traceback (and the
    request bodies its frames hold) onto itself forever."""

    def __init__(self, error: codes.Error, detail: str = "") -> None:
        super().__init__(error.message)
        self.error = error
        self.detail = detail
        """Which field was wrong (for logs only; the reply carries the catalogue message)."""

    @property
    def code(self) -> int:
        return self.error.code

    @property
    def message(self) -> str:
        return self.error.message


def bad_request(detail: str) -> ApiError:
    return ApiError(codes.ERROR_BAD_REQUEST, detail)


# --- request types ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Position:
    offset: int = field(default=0, metadata=UINT64)
    epoch: str = ""


@dataclass(frozen=True, slots=True)
class BoolValue:
    """Centrifugo's ``{"value": bool}`` wrapper of subscribe overrides."""

    value: bool = False


@dataclass(frozen=True, slots=True)
class Override:
    presence: BoolValue | None = None
    join_leave: BoolValue | None = None
    force_push_join_leave: BoolValue | None = None
    force_recovery: BoolValue | None = None
    force_positioning: BoolValue | None = None


@dataclass(slots=True)
class PublishRequest:
    """Not frozen: built per publication on the hot path (a frozen dataclass's ``__init__`` costs
    several times more); nothing changes it once built."""

    channel: str = field(default="", metadata=REQUIRED)
    data: Json | None = field(default=None, metadata=DATA_OR_B64)
    b64data: str = ""
    skip_history: bool = False
    tags: dict[str, str] | None = field(default=None, metadata=TAGS)
    idempotency_key: str = ""
    version: int = field(default=0, metadata=UINT64)
    version_epoch: str = ""
    delta: bool = False


@dataclass(frozen=True, slots=True)
class BroadcastRequest:
    channels: list[str] = field(default_factory=list, metadata=BROADCAST_CHANNELS)
    data: Json | None = field(default=None, metadata=DATA_OR_B64)
    b64data: str = ""
    skip_history: bool = False
    tags: dict[str, str] | None = field(default=None, metadata=TAGS)
    idempotency_key: str = ""
    version: int = field(default=0, metadata=UINT64)
    version_epoch: str = ""
    delta: bool = False


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    user: str = ""
    channel: str = field(default="", metadata=REQUIRED)
    expire_at: int = field(default=0, metadata=EXPIRE_AT)
    info: Json | None = None
    b64info: str = ""
    client: str = ""
    session: str = ""
    data: Json | None = None
    b64data: str = ""
    recover_since: Position | None = None
    override: Override | None = None


@dataclass(frozen=True, slots=True)
class UnsubscribeRequest:
    user: str = ""
    channel: str = field(default="", metadata=REQUIRED)
    client: str = ""
    session: str = ""


@dataclass(frozen=True, slots=True)
class DisconnectReason:
    """0 = the default (3503); else a close code an application may send (3000–4999, checked by
    ``check_disconnect``). A reason longer than a close frame holds is cut at send time."""

    code: int = field(default=0, metadata={"range": (0, 4999)})
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DisconnectRequest:
    user: str = ""
    client: str = ""
    session: str = ""
    whitelist: list[str] = field(default_factory=list, metadata={"max_items": MAX_WHITELIST})
    disconnect: DisconnectReason | None = None


@dataclass(frozen=True, slots=True)
class RefreshRequest:
    user: str = ""
    client: str = ""
    session: str = ""
    expired: bool = False
    expire_at: int = field(default=0, metadata=EXPIRE_AT)
    info: Json | None = None


@dataclass(frozen=True, slots=True)
class PresenceRequest:
    channel: str = field(default="", metadata=REQUIRED)


@dataclass(frozen=True, slots=True)
class PresenceStatsRequest:
    channel: str = field(default="", metadata=REQUIRED)


@dataclass(frozen=True, slots=True)
class HistoryRemoveRequest:
    channel: str = field(default="", metadata=REQUIRED)


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    channel: str = field(default="", metadata=REQUIRED)
    limit: int = field(default=0, metadata={"range": (-(2**31), 2**31 - 1)})  # int32, as Centrifugo
    since: Position | None = None
    reverse: bool = False


@dataclass(frozen=True, slots=True)
class ChannelsRequest:
    pattern: str = field(default="", metadata={"max_length": MAX_PATTERN_LENGTH})


@dataclass(frozen=True, slots=True)
class InfoRequest:
    pass


@dataclass(frozen=True, slots=True)
class RpcRequest:
    method: str = ""
    params: Json | None = None


# --- shared poll (gateway/sharedpoll/) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharedPollPublishRequest:
    """``shared_poll_publish``: a key's new state at ``version`` (above 0) in a shared-poll
    channel whose namespace has ``publish_enabled``; ``epoch`` is the publisher's."""

    channel: str = field(default="", metadata=REQUIRED)
    key: str = field(default="", metadata=REQUIRED)
    data: Json | None = None
    b64data: str = ""
    version: int = field(default=0, metadata=UINT64)
    epoch: str = ""


# --- the parser --------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: Any
    required: bool
    range: tuple[int, int]
    default: Any
    unless: str = ""
    """A required field may be missing when this other field is set."""
    check: Callable[[object, str], Any] | None = None
    """The field's value checker, compiled once from ``kind`` (None: any JSON value, as parsed)."""
    nullable_json: bool = False
    """A JSON-valued field: a present ``null`` satisfies ``required``."""


_FIELDS: dict[type[Any], tuple[_Field, ...]] = {}


def _fields(cls: type[Any]) -> tuple[_Field, ...]:
    """The fields of a request type, resolved and compiled once per type."""
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kind = hints[f.name]
        bounds = f.metadata.get("range", INT64)
        out.append(
            _Field(
                f.name,
                kind,
                bool(f.metadata.get("required")),
                bounds,
                default,
                f.metadata.get("unless", ""),
                _checker(kind, bounds, f.metadata.get("max_items") or f.metadata.get("max_length")),
                _is_json(kind),
            )
        )
    cached = _FIELDS[cls] = tuple(out)
    return cached


def parse(cls: type[T], params: object, where: str = "") -> T:
    """Build ``cls`` (a request dataclass) from a JSON object.

    Raises:
        ApiError: 107 when ``params`` is not an object, a required field is missing or empty, or
            a field has the wrong type or is out of range.
    """
    if type(params) is not dict and not isinstance(params, Mapping):
        raise bad_request(f"{where or 'params'}: expected an object")
    values: dict[str, Any] = {}
    for f in _fields(cls):
        raw = params.get(f.name)
        if raw is None:
            # A required JSON value may be null (``"data": null`` publishes null).
            if f.unless and params.get(f.unless):
                continue
            if f.required and not (f.nullable_json and f.name in params):
                raise bad_request(f"{_name(where, f.name)}: required")
            continue
        value = raw if f.check is None else f.check(raw, _name(where, f.name) if where else f.name)
        # An empty string or list is a missing value, except in a JSON-valued field, where
        # ``""`` and ``[]`` are values like any other (Centrifugo's raw JSON is non-empty).
        if f.required and not f.nullable_json and not value and isinstance(value, str | list):
            raise bad_request(f"{_name(where, f.name)}: required")
        values[f.name] = value
    return cls(**values)


def publish_fast(params: object) -> PublishRequest | None:
    """``parse(PublishRequest, params)`` for the forms a relay sends, checked by hand: a ``dict``
    holding a non-empty string ``channel``, ``data`` (any JSON value, ``null`` included) and
    nothing else but ``idempotency_key`` (a string or ``null``) and ``tags`` (``null``, or an
    object of at most ``MAX_TAGS`` string values, kept as it is). None: any other form, or any
    value the general parser would refuse or convert — take ``parse`` (which then refuses with
    its own error)."""
    if type(params) is not dict:
        return None
    channel = params.get("channel")
    if type(channel) is not str or not channel or "data" not in params:
        return None
    size = len(params)
    if size == 2:  # {"channel", "data"}
        return PublishRequest(channel, params["data"])
    known = 2
    key = params.get("idempotency_key")
    if key is None:
        key = ""
        known += "idempotency_key" in params
    elif type(key) is str:
        known += 1
    else:
        return None
    tags = params.get("tags")
    if tags is not None:
        if type(tags) is not dict or len(tags) > MAX_TAGS:
            return None
        for value in tags.values():
            if type(value) is not str:
                return None
        known += 1
    elif "tags" in params:
        known += 1
    if size != known:  # another field: the general parser
        return None
    return PublishRequest(channel, params["data"], "", False, tags, key)


def parse_publish(params: object) -> PublishRequest:
    """``parse(PublishRequest, params)``, with a short way for the relay's forms (``publish_fast``;
    the same result; anything else takes the general parser)."""
    fast = publish_fast(params)
    return fast if fast is not None else parse(PublishRequest, params)


def _name(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _is_json(kind: Any) -> bool:
    return kind is Json or (get_origin(kind) in (Union, types.UnionType) and Json in get_args(kind))


def _checker(
    kind: Any, bounds: tuple[int, int], most: int | None = None
) -> Callable[[object, str], Any] | None:
    """A checker ``(raw, name) -> value`` for values of ``kind`` (None: any JSON value); ``most``
    bounds the items of a list or object, or the characters of a string (checked first: past it
    nothing of the value is looked at)."""
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in get_args(kind) if a is not type(None)]
        return _checker(inner, bounds, most)
    if kind is Json:
        return None
    if kind is str:
        return _check_str if most is None else _bounded(_check_str, most, "characters")
    if kind is bool:
        return _check_bool
    if kind is int:
        return _int_checker(bounds)
    if origin is list:
        items = _list_checker(_checker(get_args(kind)[0], INT64))
        return items if most is None else _bounded(items, most, "items")
    if origin is dict:
        entries = _dict_checker(_checker(get_args(kind)[1], INT64))
        return entries if most is None else _bounded(entries, most, "items")
    if dataclasses.is_dataclass(kind):
        cls: type[Any] = kind  # type: ignore[assignment]

        def check_object(raw: object, name: str) -> Any:
            return parse(cls, raw, name)

        return check_object
    raise TypeError(f"unsupported request field type {kind!r}")  # a programming error, not input


def _bounded(check: Callable[[object, str], Any], most: int, what: str) -> Callable[[object, str], Any]:
    """``check`` refusing (107) a sized value of more than ``most`` items or characters."""

    def check_bounded(raw: object, name: str) -> Any:
        if isinstance(raw, str | list | dict) and len(raw) > most:
            raise bad_request(f"{name}: more than {most} {what}")
        return check(raw, name)

    return check_bounded


def _int_checker(bounds: tuple[int, int]) -> Callable[[object, str], int]:
    low, high = bounds

    def check_int(raw: object, name: str) -> int:
        if not isinstance(raw, int) or isinstance(raw, bool):
            raise bad_request(f"{name}: expected an integer")
        if not low <= raw <= high:
            raise bad_request(f"{name}: out of range")
        return raw

    return check_int


def _list_checker(item: Callable[[object, str], Any] | None) -> Callable[[object, str], list[Any]]:
    def check_list(raw: object, name: str) -> list[Any]:
        if not isinstance(raw, list):
            raise bad_request(f"{name}: expected an array")
        if item is None:
            return raw
        return [item(v, f"{name}[{i}]") for i, v in enumerate(raw)]

    return check_list


def _dict_checker(value: Callable[[object, str], Any] | None) -> Callable[[object, str], dict[str, Any]]:
    def check_dict(raw: object, name: str) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise bad_request(f"{name}: expected an object")
        if value is None:
            return raw
        return {k: value(v, f"{name}.{k}") for k, v in raw.items()}

    return check_dict


def _check_str(raw: object, name: str) -> str:
    if not isinstance(raw, str):
        raise bad_request(f"{name}: expected a string")
    return raw


def _check_bool(raw: object, name: str) -> bool:
    if not isinstance(raw, bool):
        raise bad_request(f"{name}: expected a boolean")
    return raw


def to_params(request: Any) -> dict[str, Any]:
    """The JSON object ``parse`` reads back into the same request (fields at their default are
    left out)."""
    out: dict[str, Any] = {}
    for f in _fields(type(request)):
        value = getattr(request, f.name)
        if value == f.default:
            continue
        out[f.name] = to_params(value) if dataclasses.is_dataclass(value) else value
    return out


def b64(name: str, value: str) -> bytes:
    """Standard base64 (Centrifugo's ``b64*`` fields); invalid ⇒ 107."""
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise bad_request(f"{name}: invalid base64") from None
