"""Typed messages of client protocol v2 (PROTOCOL.md §1.5–1.7).

Payload fields that Centrifugo carries as ``bytes`` (``data``, ``info``, …) are kept here as the
raw JSON text of the value (``bytes``), so a publication's payload is never parsed or re-encoded
on its way through the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

JSON = Any
"""A decoded JSON value; used only at the boundary."""


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """A position in a channel's history stream. The epoch names one incarnation of the stream:
    offsets from another epoch are meaningless for it (PROTOCOL.md §3.1)."""

    offset: int
    epoch: str


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who published / joined / left: ``{"user","client","conn_info"?,"chan_info"?}``."""

    user: str
    client: str
    conn_info: bytes | None = None
    chan_info: bytes | None = None


@dataclass(slots=True, unsafe_hash=True)
class Publication:
    """One publication. ``data`` is raw JSON; ``offset`` is 0 in channels without history.

    Not frozen: built for every publication published and every one received from the engine
    (a frozen ``__init__`` sets its ten fields through ``object.__setattr__``: ~1.3 against
    ~0.3 µs); nothing changes one once built. Hashed by its fields, as a frozen one is."""

    data: bytes
    offset: int = 0
    info: ClientInfo | None = None
    tags: dict[str, str] | None = None
    time: int = 0
    """Unix ms when the gateway accepted it (not sent to clients; used for lag metrics)."""
    delta: bool = False
    """Published with delta compression allowed (API ``delta`` / namespace ``delta_publish``):
    delta subscribers may get it as a fossil delta against the previous publication (a map
    change: against the key's previous value, ``prev``)."""
    key: str = ""
    """The map key this publication writes or removes (map channels; "" elsewhere)."""
    removed: bool = False
    """A map key's removal (``data`` is empty)."""
    prev: bytes | None = None
    """A map change published with ``delta``: the key's value before it, handed over by the map
    engine with the change (None: the key was new, or the write did not allow delta). Never
    stored nor sent: delta subscriptions get the change as a fossil delta against it
    (gateway/maps/delta.py)."""


class Method(StrEnum):
    CONNECT = "connect"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    PUBLISH = "publish"
    PRESENCE = "presence"
    PRESENCE_STATS = "presence_stats"
    HISTORY = "history"
    PING = "ping"
    SEND = "send"
    RPC = "rpc"
    REFRESH = "refresh"
    SUB_REFRESH = "sub_refresh"


@dataclass(frozen=True, slots=True)
class SubscribeRecovery:
    """What a client asks to recover, inside ConnectRequest.subs (server-side subscriptions)."""

    recover: bool = False
    offset: int = 0
    epoch: str = ""


@dataclass(frozen=True, slots=True)
class ConnectRequest:
    token: str = ""
    data: bytes | None = None
    subs: dict[str, SubscribeRecovery] = field(default_factory=dict)
    name: str = ""
    version: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    """The headers emulation map, checked and lower-cased (gateway/protocol/headers.py)."""


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    channel: str
    token: str = ""
    recover: bool = False
    epoch: str = ""
    offset: int = 0
    data: bytes | None = None
    positioned: bool = False
    recoverable: bool = False
    join_leave: bool = False
    flag: int = 0
    type: int = 0
    """0 = stream, 1 = map (2, 3: its presence, ``map_*_presence_channel_prefix``), 4 = shared
    poll (``SHARED_POLL``); other types are refused (103)."""
    tf: object | None = None
    """The publication tags filter tree as sent (gateway/protocol/tags_filter.py parses it)."""
    delta: str = ""
    """Requested delta compression type ("fossil")."""
    phase: int = 0
    """Map subscriptions: 2 = a state page, 1 = a stream page, 0 = go live."""
    cursor: str = ""
    """Map subscriptions: the state page to read ("" = the first)."""
    limit: int = 0
    """Map subscriptions: the page size asked for (0 = the namespace's default)."""
    asc: bool = False
    """Map subscriptions: ascending order of an ordered state (ignored: state is in key order)."""

    FLAG_REJECT_UNRECOVERED = 2
    SHARED_POLL = 4


@dataclass(frozen=True, slots=True)
class UnsubscribeRequest:
    channel: str


@dataclass(frozen=True, slots=True)
class PublishRequest:
    channel: str
    data: bytes
    type: int = 0
    """1: a map write (``key``, and ``removed`` for a removal)."""
    key: str = ""
    removed: bool = False


@dataclass(frozen=True, slots=True)
class ChannelRequest:
    """presence / presence_stats."""

    channel: str


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    channel: str
    limit: int = 0
    since: StreamPosition | None = None
    reverse: bool = False


@dataclass(frozen=True, slots=True)
class RPCRequest:
    method: str
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class SendRequest:
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class RefreshRequest:
    token: str


@dataclass(frozen=True, slots=True)
class SubRefreshRequest:
    channel: str
    token: str
    type: int = 0
    """0: refresh the subscription token; 1: track keys (``track``), 2: untrack keys
    (``untrack``) of a shared-poll subscription."""
    track: tuple[TrackBatch, ...] = ()
    untrack: tuple[str, ...] = ()

    TRACK = 1
    UNTRACK = 2


@dataclass(frozen=True, slots=True)
class TrackBatch:
    """Keys to track with the signature that authorises exactly them (shared poll): each item
    is ``(key, version the client holds)``, version 0 for none."""

    signature: str
    items: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class KeyedPublication:
    """One key's state in a shared-poll channel: its data at ``version``, or its removal."""

    key: str
    version: int = 0
    data: bytes | None = None
    removed: bool = False


@dataclass(frozen=True, slots=True)
class EmptyRequest:
    """The ``ping`` command (unsupported in v2: answered 108)."""


Request = (
    ConnectRequest
    | SubscribeRequest
    | UnsubscribeRequest
    | PublishRequest
    | ChannelRequest
    | HistoryRequest
    | RPCRequest
    | SendRequest
    | RefreshRequest
    | SubRefreshRequest
    | EmptyRequest
)


@dataclass(frozen=True, slots=True)
class Command:
    """One decoded command. ``method is None`` is a pong (the empty command ``{}``)."""

    id: int
    method: Method | None
    request: Request | None


# --- results (replies) and pushes, as values: a codec turns them into one encoding's bytes ---


@dataclass(frozen=True, slots=True)
class SubscribeResult:
    """The subscribe reply, also the payload of a ``subscribe`` push and of a connect ``subs``
    entry. ``publications`` is None unless recovered. ``epoch``/``offset`` are written when the
    subscription is positioned (offset 0 included)."""

    expires: bool = False
    ttl: int = 0
    recoverable: bool = False
    positioned: bool = False
    recovered: bool = False
    epoch: str = ""
    offset: int = 0
    publications: list[Publication] | None = None
    was_recovering: bool = False
    data: bytes | None = None
    delta: bool = False
    """Fossil delta compression negotiated for this subscription."""
    type: int = 0
    """The subscription type echoed: 1 on every map subscribe reply (the map fields below are
    written only then); 4 for shared poll (whose ``epoch`` is written unpositioned)."""
    phase: int = 0
    cursor: str = ""
    state: list[Publication] | None = None
    """Map state entries of this page."""


@dataclass(frozen=True, slots=True)
class ConnectResult:
    client: str
    version: str
    expires: bool = False
    ttl: int = 0
    subs: dict[str, SubscribeResult] | None = None
    ping: int = 0
    pong: bool | None = None
    """None = not written (no pings, or a unidirectional client that cannot pong)."""
    session: str = ""
    node: str = ""
    time: int = 0
    data: bytes | None = None
    """Raw JSON the connect proxy returned as ``data`` (written as the result's ``data``)."""


@dataclass(frozen=True, slots=True)
class RefreshResult:
    """``client``/``version`` are written empty, as Centrifugo does."""

    expires: bool = False
    ttl: int = 0


@dataclass(frozen=True, slots=True)
class SubRefreshResult:
    expires: bool = False
    ttl: int = 0
    items: tuple[KeyedPublication, ...] = ()
    """A shared-poll track: the tracked keys' newer state this node already has."""


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """The history result: publications, epoch and offset are always written (§1.1)."""

    publications: list[Publication]
    epoch: str
    offset: int


@dataclass(frozen=True, slots=True)
class PresenceResult:
    presence: Mapping[str, ClientInfo]


@dataclass(frozen=True, slots=True)
class PresenceStatsResult:
    num_clients: int
    num_users: int


@dataclass(frozen=True, slots=True)
class EmptyResult:
    """``{}``: publish, unsubscribe, rpc."""


@dataclass(frozen=True, slots=True)
class RPCResult:
    """An RPC answered by the RPC proxy: ``data`` is raw JSON (None: ``{}``)."""

    data: bytes | None = None


Result = (
    ConnectResult
    | SubscribeResult
    | RefreshResult
    | SubRefreshResult
    | HistoryPage
    | PresenceResult
    | PresenceStatsResult
    | EmptyResult
    | RPCResult
)
