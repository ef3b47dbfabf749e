from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Error(_message.Message):
    __slots__ = ("code", "message", "temporary")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TEMPORARY_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    temporary: bool
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., temporary: _Optional[bool] = ...) -> None: ...

class EmulationRequest(_message.Message):
    __slots__ = ("node", "session", "data")
    NODE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    node: str
    session: str
    data: bytes
    def __init__(self, node: _Optional[str] = ..., session: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("id", "connect", "subscribe", "unsubscribe", "publish", "presence", "presence_stats", "history", "ping", "send", "rpc", "refresh", "sub_refresh")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_STATS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    RPC_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    SUB_REFRESH_FIELD_NUMBER: _ClassVar[int]
    id: int
    connect: ConnectRequest
    subscribe: SubscribeRequest
    unsubscribe: UnsubscribeRequest
    publish: PublishRequest
    presence: PresenceRequest
    presence_stats: PresenceStatsRequest
    history: HistoryRequest
    ping: PingRequest
    send: SendRequest
    rpc: RPCRequest
    refresh: RefreshRequest
    sub_refresh: SubRefreshRequest
    def __init__(self, id: _Optional[int] = ..., connect: _Optional[_Union[ConnectRequest, _Mapping]] = ..., subscribe: _Optional[_Union[SubscribeRequest, _Mapping]] = ..., unsubscribe: _Optional[_Union[UnsubscribeRequest, _Mapping]] = ..., publish: _Optional[_Union[PublishRequest, _Mapping]] = ..., presence: _Optional[_Union[PresenceRequest, _Mapping]] = ..., presence_stats: _Optional[_Union[PresenceStatsRequest, _Mapping]] = ..., history: _Optional[_Union[HistoryRequest, _Mapping]] = ..., ping: _Optional[_Union[PingRequest, _Mapping]] = ..., send: _Optional[_Union[SendRequest, _Mapping]] = ..., rpc: _Optional[_Union[RPCRequest, _Mapping]] = ..., refresh: _Optional[_Union[RefreshRequest, _Mapping]] = ..., sub_refresh: _Optional[_Union[SubRefreshRequest, _Mapping]] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("id", "error", "push", "connect", "subscribe", "unsubscribe", "publish", "presence", "presence_stats", "history", "ping", "rpc", "refresh", "sub_refresh")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_STATS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    RPC_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    SUB_REFRESH_FIELD_NUMBER: _ClassVar[int]
    id: int
    error: Error
    push: Push
    connect: ConnectResult
    subscribe: SubscribeResult
    unsubscribe: UnsubscribeResult
    publish: PublishResult
    presence: PresenceResult
    presence_stats: PresenceStatsResult
    history: HistoryResult
    ping: PingResult
    rpc: RPCResult
    refresh: RefreshResult
    sub_refresh: SubRefreshResult
    def __init__(self, id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., push: _Optional[_Union[Push, _Mapping]] = ..., connect: _Optional[_Union[ConnectResult, _Mapping]] = ..., subscribe: _Optional[_Union[SubscribeResult, _Mapping]] = ..., unsubscribe: _Optional[_Union[UnsubscribeResult, _Mapping]] = ..., publish: _Optional[_Union[PublishResult, _Mapping]] = ..., presence: _Optional[_Union[PresenceResult, _Mapping]] = ..., presence_stats: _Optional[_Union[PresenceStatsResult, _Mapping]] = ..., history: _Optional[_Union[HistoryResult, _Mapping]] = ..., ping: _Optional[_Union[PingResult, _Mapping]] = ..., rpc: _Optional[_Union[RPCResult, _Mapping]] = ..., refresh: _Optional[_Union[RefreshResult, _Mapping]] = ..., sub_refresh: _Optional[_Union[SubRefreshResult, _Mapping]] = ...) -> None: ...

class Push(_message.Message):
    __slots__ = ("id", "channel", "pub", "join", "leave", "unsubscribe", "message", "subscribe", "connect", "disconnect", "refresh")
    ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    PUB_FIELD_NUMBER: _ClassVar[int]
    JOIN_FIELD_NUMBER: _ClassVar[int]
    LEAVE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    id: int
    channel: str
    pub: Publication
    join: Join
    leave: Leave
    unsubscribe: Unsubscribe
    message: Message
    subscribe: Subscribe
    connect: Connect
    disconnect: Disconnect
    refresh: Refresh
    def __init__(self, id: _Optional[int] = ..., channel: _Optional[str] = ..., pub: _Optional[_Union[Publication, _Mapping]] = ..., join: _Optional[_Union[Join, _Mapping]] = ..., leave: _Optional[_Union[Leave, _Mapping]] = ..., unsubscribe: _Optional[_Union[Unsubscribe, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., connect: _Optional[_Union[Connect, _Mapping]] = ..., disconnect: _Optional[_Union[Disconnect, _Mapping]] = ..., refresh: _Optional[_Union[Refresh, _Mapping]] = ...) -> None: ...

class ClientInfo(_message.Message):
    __slots__ = ("user", "client", "conn_info", "chan_info")
    USER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    CONN_INFO_FIELD_NUMBER: _ClassVar[int]
    CHAN_INFO_FIELD_NUMBER: _ClassVar[int]
    user: str
    client: str
    conn_info: bytes
    chan_info: bytes
    def __init__(self, user: _Optional[str] = ..., client: _Optional[str] = ..., conn_info: _Optional[bytes] = ..., chan_info: _Optional[bytes] = ...) -> None: ...

class Publication(_message.Message):
    __slots__ = ("data", "info", "offset", "tags", "delta", "time", "channel", "key", "removed", "score", "epoch", "prev_data", "version")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DATA_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREV_DATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    info: ClientInfo
    offset: int
    tags: _containers.ScalarMap[str, str]
    delta: bool
    time: int
    channel: str
    key: str
    removed: bool
    score: int
    epoch: str
    prev_data: bytes
    version: int
    def __init__(self, data: _Optional[bytes] = ..., info: _Optional[_Union[ClientInfo, _Mapping]] = ..., offset: _Optional[int] = ..., tags: _Optional[_Mapping[str, str]] = ..., delta: _Optional[bool] = ..., time: _Optional[int] = ..., channel: _Optional[str] = ..., key: _Optional[str] = ..., removed: _Optional[bool] = ..., score: _Optional[int] = ..., epoch: _Optional[str] = ..., prev_data: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class Join(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ClientInfo
    def __init__(self, info: _Optional[_Union[ClientInfo, _Mapping]] = ...) -> None: ...

class Leave(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ClientInfo
    def __init__(self, info: _Optional[_Union[ClientInfo, _Mapping]] = ...) -> None: ...

class Unsubscribe(_message.Message):
    __slots__ = ("code", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("recoverable", "epoch", "offset", "positioned", "data")
    RECOVERABLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    POSITIONED_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    recoverable: bool
    epoch: str
    offset: int
    positioned: bool
    data: bytes
    def __init__(self, recoverable: _Optional[bool] = ..., epoch: _Optional[str] = ..., offset: _Optional[int] = ..., positioned: _Optional[bool] = ..., data: _Optional[bytes] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class Connect(_message.Message):
    __slots__ = ("client", "version", "data", "subs", "expires", "ttl", "ping", "pong", "session", "node", "time")
    class SubsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SubscribeResult
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SubscribeResult, _Mapping]] = ...) -> None: ...
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    client: str
    version: str
    data: bytes
    subs: _containers.MessageMap[str, SubscribeResult]
    expires: bool
    ttl: int
    ping: int
    pong: bool
    session: str
    node: str
    time: int
    def __init__(self, client: _Optional[str] = ..., version: _Optional[str] = ..., data: _Optional[bytes] = ..., subs: _Optional[_Mapping[str, SubscribeResult]] = ..., expires: _Optional[bool] = ..., ttl: _Optional[int] = ..., ping: _Optional[int] = ..., pong: _Optional[bool] = ..., session: _Optional[str] = ..., node: _Optional[str] = ..., time: _Optional[int] = ...) -> None: ...

class Disconnect(_message.Message):
    __slots__ = ("code", "reason", "reconnect")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECONNECT_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    reconnect: bool
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ..., reconnect: _Optional[bool] = ...) -> None: ...

class Refresh(_message.Message):
    __slots__ = ("expires", "ttl")
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    expires: bool
    ttl: int
    def __init__(self, expires: _Optional[bool] = ..., ttl: _Optional[int] = ...) -> None: ...

class ConnectRequest(_message.Message):
    __slots__ = ("token", "data", "subs", "name", "version", "headers", "flag")
    class SubsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SubscribeRequest
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SubscribeRequest, _Mapping]] = ...) -> None: ...
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    token: str
    data: bytes
    subs: _containers.MessageMap[str, SubscribeRequest]
    name: str
    version: str
    headers: _containers.ScalarMap[str, str]
    flag: int
    def __init__(self, token: _Optional[str] = ..., data: _Optional[bytes] = ..., subs: _Optional[_Mapping[str, SubscribeRequest]] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., flag: _Optional[int] = ...) -> None: ...

class ConnectResult(_message.Message):
    __slots__ = ("client", "version", "expires", "ttl", "data", "subs", "ping", "pong", "session", "node", "time")
    class SubsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SubscribeResult
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SubscribeResult, _Mapping]] = ...) -> None: ...
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    client: str
    version: str
    expires: bool
    ttl: int
    data: bytes
    subs: _containers.MessageMap[str, SubscribeResult]
    ping: int
    pong: bool
    session: str
    node: str
    time: int
    def __init__(self, client: _Optional[str] = ..., version: _Optional[str] = ..., expires: _Optional[bool] = ..., ttl: _Optional[int] = ..., data: _Optional[bytes] = ..., subs: _Optional[_Mapping[str, SubscribeResult]] = ..., ping: _Optional[int] = ..., pong: _Optional[bool] = ..., session: _Optional[str] = ..., node: _Optional[str] = ..., time: _Optional[int] = ...) -> None: ...

class RefreshRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class RefreshResult(_message.Message):
    __slots__ = ("client", "version", "expires", "ttl")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    client: str
    version: str
    expires: bool
    ttl: int
    def __init__(self, client: _Optional[str] = ..., version: _Optional[str] = ..., expires: _Optional[bool] = ..., ttl: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("channel", "token", "recover", "epoch", "offset", "data", "positioned", "recoverable", "join_leave", "delta", "tf", "flag", "type", "phase", "cursor", "limit", "asc")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    RECOVER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    POSITIONED_FIELD_NUMBER: _ClassVar[int]
    RECOVERABLE_FIELD_NUMBER: _ClassVar[int]
    JOIN_LEAVE_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TF_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ASC_FIELD_NUMBER: _ClassVar[int]
    channel: str
    token: str
    recover: bool
    epoch: str
    offset: int
    data: bytes
    positioned: bool
    recoverable: bool
    join_leave: bool
    delta: str
    tf: FilterNode
    flag: int
    type: int
    phase: int
    cursor: str
    limit: int
    asc: bool
    def __init__(self, channel: _Optional[str] = ..., token: _Optional[str] = ..., recover: _Optional[bool] = ..., epoch: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., positioned: _Optional[bool] = ..., recoverable: _Optional[bool] = ..., join_leave: _Optional[bool] = ..., delta: _Optional[str] = ..., tf: _Optional[_Union[FilterNode, _Mapping]] = ..., flag: _Optional[int] = ..., type: _Optional[int] = ..., phase: _Optional[int] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ..., asc: _Optional[bool] = ...) -> None: ...

class SubscribeResult(_message.Message):
    __slots__ = ("expires", "ttl", "recoverable", "epoch", "publications", "recovered", "offset", "positioned", "data", "was_recovering", "delta", "id", "type", "phase", "cursor", "state", "publish_debounce")
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    RECOVERABLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PUBLICATIONS_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    POSITIONED_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WAS_RECOVERING_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_DEBOUNCE_FIELD_NUMBER: _ClassVar[int]
    expires: bool
    ttl: int
    recoverable: bool
    epoch: str
    publications: _containers.RepeatedCompositeFieldContainer[Publication]
    recovered: bool
    offset: int
    positioned: bool
    data: bytes
    was_recovering: bool
    delta: bool
    id: int
    type: int
    phase: int
    cursor: str
    state: _containers.RepeatedCompositeFieldContainer[Publication]
    publish_debounce: int
    def __init__(self, expires: _Optional[bool] = ..., ttl: _Optional[int] = ..., recoverable: _Optional[bool] = ..., epoch: _Optional[str] = ..., publications: _Optional[_Iterable[_Union[Publication, _Mapping]]] = ..., recovered: _Optional[bool] = ..., offset: _Optional[int] = ..., positioned: _Optional[bool] = ..., data: _Optional[bytes] = ..., was_recovering: _Optional[bool] = ..., delta: _Optional[bool] = ..., id: _Optional[int] = ..., type: _Optional[int] = ..., phase: _Optional[int] = ..., cursor: _Optional[str] = ..., state: _Optional[_Iterable[_Union[Publication, _Mapping]]] = ..., publish_debounce: _Optional[int] = ...) -> None: ...

class KeyedItem(_message.Message):
    __slots__ = ("key", "version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: int
    def __init__(self, key: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class TrackBatch(_message.Message):
    __slots__ = ("signature", "items")
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    signature: str
    items: _containers.RepeatedCompositeFieldContainer[KeyedItem]
    def __init__(self, signature: _Optional[str] = ..., items: _Optional[_Iterable[_Union[KeyedItem, _Mapping]]] = ...) -> None: ...

class SubRefreshRequest(_message.Message):
    __slots__ = ("channel", "token", "type", "track", "untrack")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACK_FIELD_NUMBER: _ClassVar[int]
    UNTRACK_FIELD_NUMBER: _ClassVar[int]
    channel: str
    token: str
    type: int
    track: _containers.RepeatedCompositeFieldContainer[TrackBatch]
    untrack: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, channel: _Optional[str] = ..., token: _Optional[str] = ..., type: _Optional[int] = ..., track: _Optional[_Iterable[_Union[TrackBatch, _Mapping]]] = ..., untrack: _Optional[_Iterable[str]] = ...) -> None: ...

class SubRefreshResult(_message.Message):
    __slots__ = ("expires", "ttl", "items")
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    expires: bool
    ttl: int
    items: _containers.RepeatedCompositeFieldContainer[Publication]
    def __init__(self, expires: _Optional[bool] = ..., ttl: _Optional[int] = ..., items: _Optional[_Iterable[_Union[Publication, _Mapping]]] = ...) -> None: ...

class UnsubscribeRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class UnsubscribeResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("channel", "data", "type", "key", "removed")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    channel: str
    data: bytes
    type: int
    key: str
    removed: bool
    def __init__(self, channel: _Optional[str] = ..., data: _Optional[bytes] = ..., type: _Optional[int] = ..., key: _Optional[str] = ..., removed: _Optional[bool] = ...) -> None: ...

class PublishResult(_message.Message):
    __slots__ = ("debounce",)
    DEBOUNCE_FIELD_NUMBER: _ClassVar[int]
    debounce: int
    def __init__(self, debounce: _Optional[int] = ...) -> None: ...

class PresenceRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class PresenceResult(_message.Message):
    __slots__ = ("presence",)
    class PresenceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ClientInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ClientInfo, _Mapping]] = ...) -> None: ...
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    presence: _containers.MessageMap[str, ClientInfo]
    def __init__(self, presence: _Optional[_Mapping[str, ClientInfo]] = ...) -> None: ...

class PresenceStatsRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class PresenceStatsResult(_message.Message):
    __slots__ = ("num_clients", "num_users")
    NUM_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_USERS_FIELD_NUMBER: _ClassVar[int]
    num_clients: int
    num_users: int
    def __init__(self, num_clients: _Optional[int] = ..., num_users: _Optional[int] = ...) -> None: ...

class StreamPosition(_message.Message):
    __slots__ = ("offset", "epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: str
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[str] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("channel", "limit", "since", "reverse")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    channel: str
    limit: int
    since: StreamPosition
    reverse: bool
    def __init__(self, channel: _Optional[str] = ..., limit: _Optional[int] = ..., since: _Optional[_Union[StreamPosition, _Mapping]] = ..., reverse: _Optional[bool] = ...) -> None: ...

class HistoryResult(_message.Message):
    __slots__ = ("publications", "epoch", "offset")
    PUBLICATIONS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    publications: _containers.RepeatedCompositeFieldContainer[Publication]
    epoch: str
    offset: int
    def __init__(self, publications: _Optional[_Iterable[_Union[Publication, _Mapping]]] = ..., epoch: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RPCRequest(_message.Message):
    __slots__ = ("data", "method")
    DATA_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    method: str
    def __init__(self, data: _Optional[bytes] = ..., method: _Optional[str] = ...) -> None: ...

class RPCResult(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class FilterNode(_message.Message):
    __slots__ = ("op", "key", "cmp", "val", "vals", "nodes")
    OP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CMP_FIELD_NUMBER: _ClassVar[int]
    VAL_FIELD_NUMBER: _ClassVar[int]
    VALS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    op: str
    key: str
    cmp: str
    val: str
    vals: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedCompositeFieldContainer[FilterNode]
    def __init__(self, op: _Optional[str] = ..., key: _Optional[str] = ..., cmp: _Optional[str] = ..., val: _Optional[str] = ..., vals: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[_Union[FilterNode, _Mapping]]] = ...) -> None: ...
