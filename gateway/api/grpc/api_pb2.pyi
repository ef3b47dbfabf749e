from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Command(_message.Message):
    __slots__ = ("publish", "broadcast", "subscribe", "unsubscribe", "disconnect", "presence", "presence_stats", "history", "history_remove", "info", "rpc", "refresh", "channels", "shared_poll_publish", "map_publish", "map_remove", "map_read_state", "map_read_stream", "map_stats", "map_clear")
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_STATS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_REMOVE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    RPC_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    SHARED_POLL_PUBLISH_FIELD_NUMBER: _ClassVar[int]
    MAP_PUBLISH_FIELD_NUMBER: _ClassVar[int]
    MAP_REMOVE_FIELD_NUMBER: _ClassVar[int]
    MAP_READ_STATE_FIELD_NUMBER: _ClassVar[int]
    MAP_READ_STREAM_FIELD_NUMBER: _ClassVar[int]
    MAP_STATS_FIELD_NUMBER: _ClassVar[int]
    MAP_CLEAR_FIELD_NUMBER: _ClassVar[int]
    publish: PublishRequest
    broadcast: BroadcastRequest
    subscribe: SubscribeRequest
    unsubscribe: UnsubscribeRequest
    disconnect: DisconnectRequest
    presence: PresenceRequest
    presence_stats: PresenceStatsRequest
    history: HistoryRequest
    history_remove: HistoryRemoveRequest
    info: InfoRequest
    rpc: RPCRequest
    refresh: RefreshRequest
    channels: ChannelsRequest
    shared_poll_publish: SharedPollPublishRequest
    map_publish: MapPublishRequest
    map_remove: MapRemoveRequest
    map_read_state: MapReadStateRequest
    map_read_stream: MapReadStreamRequest
    map_stats: MapStatsRequest
    map_clear: MapClearRequest
    def __init__(self, publish: _Optional[_Union[PublishRequest, _Mapping]] = ..., broadcast: _Optional[_Union[BroadcastRequest, _Mapping]] = ..., subscribe: _Optional[_Union[SubscribeRequest, _Mapping]] = ..., unsubscribe: _Optional[_Union[UnsubscribeRequest, _Mapping]] = ..., disconnect: _Optional[_Union[DisconnectRequest, _Mapping]] = ..., presence: _Optional[_Union[PresenceRequest, _Mapping]] = ..., presence_stats: _Optional[_Union[PresenceStatsRequest, _Mapping]] = ..., history: _Optional[_Union[HistoryRequest, _Mapping]] = ..., history_remove: _Optional[_Union[HistoryRemoveRequest, _Mapping]] = ..., info: _Optional[_Union[InfoRequest, _Mapping]] = ..., rpc: _Optional[_Union[RPCRequest, _Mapping]] = ..., refresh: _Optional[_Union[RefreshRequest, _Mapping]] = ..., channels: _Optional[_Union[ChannelsRequest, _Mapping]] = ..., shared_poll_publish: _Optional[_Union[SharedPollPublishRequest, _Mapping]] = ..., map_publish: _Optional[_Union[MapPublishRequest, _Mapping]] = ..., map_remove: _Optional[_Union[MapRemoveRequest, _Mapping]] = ..., map_read_state: _Optional[_Union[MapReadStateRequest, _Mapping]] = ..., map_read_stream: _Optional[_Union[MapReadStreamRequest, _Mapping]] = ..., map_stats: _Optional[_Union[MapStatsRequest, _Mapping]] = ..., map_clear: _Optional[_Union[MapClearRequest, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("error", "publish", "broadcast", "subscribe", "unsubscribe", "disconnect", "presence", "presence_stats", "history", "history_remove", "info", "rpc", "refresh", "channels", "shared_poll_publish", "map_publish", "map_remove", "map_read_state", "map_read_stream", "map_stats", "map_clear")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_STATS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_REMOVE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    RPC_FIELD_NUMBER: _ClassVar[int]
    REFRESH_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    SHARED_POLL_PUBLISH_FIELD_NUMBER: _ClassVar[int]
    MAP_PUBLISH_FIELD_NUMBER: _ClassVar[int]
    MAP_REMOVE_FIELD_NUMBER: _ClassVar[int]
    MAP_READ_STATE_FIELD_NUMBER: _ClassVar[int]
    MAP_READ_STREAM_FIELD_NUMBER: _ClassVar[int]
    MAP_STATS_FIELD_NUMBER: _ClassVar[int]
    MAP_CLEAR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    publish: PublishResult
    broadcast: BroadcastResult
    subscribe: SubscribeResult
    unsubscribe: UnsubscribeResult
    disconnect: DisconnectResult
    presence: PresenceResult
    presence_stats: PresenceStatsResult
    history: HistoryResult
    history_remove: HistoryRemoveResult
    info: InfoResult
    rpc: RPCResult
    refresh: RefreshResult
    channels: ChannelsResult
    shared_poll_publish: SharedPollPublishResult
    map_publish: MapPublishResult
    map_remove: MapRemoveResult
    map_read_state: MapReadStateResult
    map_read_stream: MapReadStreamResult
    map_stats: MapStatsResult
    map_clear: MapClearResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., publish: _Optional[_Union[PublishResult, _Mapping]] = ..., broadcast: _Optional[_Union[BroadcastResult, _Mapping]] = ..., subscribe: _Optional[_Union[SubscribeResult, _Mapping]] = ..., unsubscribe: _Optional[_Union[UnsubscribeResult, _Mapping]] = ..., disconnect: _Optional[_Union[DisconnectResult, _Mapping]] = ..., presence: _Optional[_Union[PresenceResult, _Mapping]] = ..., presence_stats: _Optional[_Union[PresenceStatsResult, _Mapping]] = ..., history: _Optional[_Union[HistoryResult, _Mapping]] = ..., history_remove: _Optional[_Union[HistoryRemoveResult, _Mapping]] = ..., info: _Optional[_Union[InfoResult, _Mapping]] = ..., rpc: _Optional[_Union[RPCResult, _Mapping]] = ..., refresh: _Optional[_Union[RefreshResult, _Mapping]] = ..., channels: _Optional[_Union[ChannelsResult, _Mapping]] = ..., shared_poll_publish: _Optional[_Union[SharedPollPublishResult, _Mapping]] = ..., map_publish: _Optional[_Union[MapPublishResult, _Mapping]] = ..., map_remove: _Optional[_Union[MapRemoveResult, _Mapping]] = ..., map_read_state: _Optional[_Union[MapReadStateResult, _Mapping]] = ..., map_read_stream: _Optional[_Union[MapReadStreamResult, _Mapping]] = ..., map_stats: _Optional[_Union[MapStatsResult, _Mapping]] = ..., map_clear: _Optional[_Union[MapClearResult, _Mapping]] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("commands", "parallel")
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[Command]
    parallel: bool
    def __init__(self, commands: _Optional[_Iterable[_Union[Command, _Mapping]]] = ..., parallel: _Optional[bool] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[Reply]
    def __init__(self, replies: _Optional[_Iterable[_Union[Reply, _Mapping]]] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("channel", "data", "b64data", "skip_history", "tags", "idempotency_key", "delta", "version", "version_epoch")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    B64DATA_FIELD_NUMBER: _ClassVar[int]
    SKIP_HISTORY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    channel: str
    data: bytes
    b64data: str
    skip_history: bool
    tags: _containers.ScalarMap[str, str]
    idempotency_key: str
    delta: bool
    version: int
    version_epoch: str
    def __init__(self, channel: _Optional[str] = ..., data: _Optional[bytes] = ..., b64data: _Optional[str] = ..., skip_history: _Optional[bool] = ..., tags: _Optional[_Mapping[str, str]] = ..., idempotency_key: _Optional[str] = ..., delta: _Optional[bool] = ..., version: _Optional[int] = ..., version_epoch: _Optional[str] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: PublishResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[PublishResult, _Mapping]] = ...) -> None: ...

class PublishResult(_message.Message):
    __slots__ = ("offset", "epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: str
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[str] = ...) -> None: ...

class BroadcastRequest(_message.Message):
    __slots__ = ("channels", "data", "b64data", "skip_history", "tags", "idempotency_key", "delta", "version", "version_epoch")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    B64DATA_FIELD_NUMBER: _ClassVar[int]
    SKIP_HISTORY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.RepeatedScalarFieldContainer[str]
    data: bytes
    b64data: str
    skip_history: bool
    tags: _containers.ScalarMap[str, str]
    idempotency_key: str
    delta: bool
    version: int
    version_epoch: str
    def __init__(self, channels: _Optional[_Iterable[str]] = ..., data: _Optional[bytes] = ..., b64data: _Optional[str] = ..., skip_history: _Optional[bool] = ..., tags: _Optional[_Mapping[str, str]] = ..., idempotency_key: _Optional[str] = ..., delta: _Optional[bool] = ..., version: _Optional[int] = ..., version_epoch: _Optional[str] = ...) -> None: ...

class BroadcastResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: BroadcastResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[BroadcastResult, _Mapping]] = ...) -> None: ...

class BroadcastResult(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[PublishResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[PublishResponse, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("channel", "user", "expire_at", "info", "b64info", "client", "data", "b64data", "recover_since", "override", "session")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AT_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    B64INFO_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    B64DATA_FIELD_NUMBER: _ClassVar[int]
    RECOVER_SINCE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    channel: str
    user: str
    expire_at: int
    info: bytes
    b64info: str
    client: str
    data: bytes
    b64data: str
    recover_since: StreamPosition
    override: SubscribeOptionOverride
    session: str
    def __init__(self, channel: _Optional[str] = ..., user: _Optional[str] = ..., expire_at: _Optional[int] = ..., info: _Optional[bytes] = ..., b64info: _Optional[str] = ..., client: _Optional[str] = ..., data: _Optional[bytes] = ..., b64data: _Optional[str] = ..., recover_since: _Optional[_Union[StreamPosition, _Mapping]] = ..., override: _Optional[_Union[SubscribeOptionOverride, _Mapping]] = ..., session: _Optional[str] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: SubscribeResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[SubscribeResult, _Mapping]] = ...) -> None: ...

class BoolValue(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bool
    def __init__(self, value: _Optional[bool] = ...) -> None: ...

class SubscribeOptionOverride(_message.Message):
    __slots__ = ("presence", "join_leave", "force_recovery", "force_positioning", "force_push_join_leave")
    PRESENCE_FIELD_NUMBER: _ClassVar[int]
    JOIN_LEAVE_FIELD_NUMBER: _ClassVar[int]
    FORCE_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    FORCE_POSITIONING_FIELD_NUMBER: _ClassVar[int]
    FORCE_PUSH_JOIN_LEAVE_FIELD_NUMBER: _ClassVar[int]
    presence: BoolValue
    join_leave: BoolValue
    force_recovery: BoolValue
    force_positioning: BoolValue
    force_push_join_leave: BoolValue
    def __init__(self, presence: _Optional[_Union[BoolValue, _Mapping]] = ..., join_leave: _Optional[_Union[BoolValue, _Mapping]] = ..., force_recovery: _Optional[_Union[BoolValue, _Mapping]] = ..., force_positioning: _Optional[_Union[BoolValue, _Mapping]] = ..., force_push_join_leave: _Optional[_Union[BoolValue, _Mapping]] = ...) -> None: ...

class SubscribeResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnsubscribeRequest(_message.Message):
    __slots__ = ("channel", "user", "client", "session")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    channel: str
    user: str
    client: str
    session: str
    def __init__(self, channel: _Optional[str] = ..., user: _Optional[str] = ..., client: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class UnsubscribeResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: UnsubscribeResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[UnsubscribeResult, _Mapping]] = ...) -> None: ...

class UnsubscribeResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Disconnect(_message.Message):
    __slots__ = ("code", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class DisconnectRequest(_message.Message):
    __slots__ = ("user", "disconnect", "client", "whitelist", "session")
    USER_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    WHITELIST_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    user: str
    disconnect: Disconnect
    client: str
    whitelist: _containers.RepeatedScalarFieldContainer[str]
    session: str
    def __init__(self, user: _Optional[str] = ..., disconnect: _Optional[_Union[Disconnect, _Mapping]] = ..., client: _Optional[str] = ..., whitelist: _Optional[_Iterable[str]] = ..., session: _Optional[str] = ...) -> None: ...

class DisconnectResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: DisconnectResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[DisconnectResult, _Mapping]] = ...) -> None: ...

class DisconnectResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PresenceRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class PresenceResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: PresenceResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[PresenceResult, _Mapping]] = ...) -> None: ...

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

class PresenceStatsResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: PresenceStatsResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[PresenceStatsResult, _Mapping]] = ...) -> None: ...

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

class HistoryResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: HistoryResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[HistoryResult, _Mapping]] = ...) -> None: ...

class Publication(_message.Message):
    __slots__ = ("data", "info", "offset", "tags")
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
    data: bytes
    info: ClientInfo
    offset: int
    tags: _containers.ScalarMap[str, str]
    def __init__(self, data: _Optional[bytes] = ..., info: _Optional[_Union[ClientInfo, _Mapping]] = ..., offset: _Optional[int] = ..., tags: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HistoryResult(_message.Message):
    __slots__ = ("publications", "epoch", "offset")
    PUBLICATIONS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    publications: _containers.RepeatedCompositeFieldContainer[Publication]
    epoch: str
    offset: int
    def __init__(self, publications: _Optional[_Iterable[_Union[Publication, _Mapping]]] = ..., epoch: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class HistoryRemoveRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class HistoryRemoveResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: HistoryRemoveResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[HistoryRemoveResult, _Mapping]] = ...) -> None: ...

class HistoryRemoveResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: InfoResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[InfoResult, _Mapping]] = ...) -> None: ...

class InfoResult(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeResult]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeResult, _Mapping]]] = ...) -> None: ...

class RPCRequest(_message.Message):
    __slots__ = ("method", "params")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    method: str
    params: bytes
    def __init__(self, method: _Optional[str] = ..., params: _Optional[bytes] = ...) -> None: ...

class RPCResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: RPCResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[RPCResult, _Mapping]] = ...) -> None: ...

class RPCResult(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class RefreshRequest(_message.Message):
    __slots__ = ("user", "client", "expired", "expire_at", "info", "session")
    USER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AT_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    user: str
    client: str
    expired: bool
    expire_at: int
    info: bytes
    session: str
    def __init__(self, user: _Optional[str] = ..., client: _Optional[str] = ..., expired: _Optional[bool] = ..., expire_at: _Optional[int] = ..., info: _Optional[bytes] = ..., session: _Optional[str] = ...) -> None: ...

class RefreshResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: RefreshResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[RefreshResult, _Mapping]] = ...) -> None: ...

class RefreshResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeResult(_message.Message):
    __slots__ = ("uid", "name", "version", "num_clients", "num_users", "num_channels", "uptime", "metrics", "process", "num_subs")
    UID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_USERS_FIELD_NUMBER: _ClassVar[int]
    NUM_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBS_FIELD_NUMBER: _ClassVar[int]
    uid: str
    name: str
    version: str
    num_clients: int
    num_users: int
    num_channels: int
    uptime: int
    metrics: Metrics
    process: Process
    num_subs: int
    def __init__(self, uid: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., num_clients: _Optional[int] = ..., num_users: _Optional[int] = ..., num_channels: _Optional[int] = ..., uptime: _Optional[int] = ..., metrics: _Optional[_Union[Metrics, _Mapping]] = ..., process: _Optional[_Union[Process, _Mapping]] = ..., num_subs: _Optional[int] = ...) -> None: ...

class Metrics(_message.Message):
    __slots__ = ("interval", "items")
    class ItemsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    interval: float
    items: _containers.ScalarMap[str, float]
    def __init__(self, interval: _Optional[float] = ..., items: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Process(_message.Message):
    __slots__ = ("cpu", "rss")
    CPU_FIELD_NUMBER: _ClassVar[int]
    RSS_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    rss: int
    def __init__(self, cpu: _Optional[float] = ..., rss: _Optional[int] = ...) -> None: ...

class ChannelsRequest(_message.Message):
    __slots__ = ("pattern",)
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    def __init__(self, pattern: _Optional[str] = ...) -> None: ...

class ChannelsResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: ChannelsResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[ChannelsResult, _Mapping]] = ...) -> None: ...

class ChannelsResult(_message.Message):
    __slots__ = ("channels",)
    class ChannelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ChannelInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ChannelInfo, _Mapping]] = ...) -> None: ...
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.MessageMap[str, ChannelInfo]
    def __init__(self, channels: _Optional[_Mapping[str, ChannelInfo]] = ...) -> None: ...

class ChannelInfo(_message.Message):
    __slots__ = ("num_clients",)
    NUM_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    num_clients: int
    def __init__(self, num_clients: _Optional[int] = ...) -> None: ...

class SharedPollPublishRequest(_message.Message):
    __slots__ = ("channel", "key", "data", "b64data", "version", "epoch")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    B64DATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    channel: str
    key: str
    data: bytes
    b64data: str
    version: int
    epoch: str
    def __init__(self, channel: _Optional[str] = ..., key: _Optional[str] = ..., data: _Optional[bytes] = ..., b64data: _Optional[str] = ..., version: _Optional[int] = ..., epoch: _Optional[str] = ...) -> None: ...

class SharedPollPublishResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: SharedPollPublishResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[SharedPollPublishResult, _Mapping]] = ...) -> None: ...

class SharedPollPublishResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MapPublishRequest(_message.Message):
    __slots__ = ("channel", "key", "data", "b64data", "stream_data", "b64stream_data", "tags", "idempotency_key", "delta", "version", "version_epoch", "score", "key_mode")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    B64DATA_FIELD_NUMBER: _ClassVar[int]
    STREAM_DATA_FIELD_NUMBER: _ClassVar[int]
    B64STREAM_DATA_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    KEY_MODE_FIELD_NUMBER: _ClassVar[int]
    channel: str
    key: str
    data: bytes
    b64data: str
    stream_data: bytes
    b64stream_data: str
    tags: _containers.ScalarMap[str, str]
    idempotency_key: str
    delta: bool
    version: int
    version_epoch: str
    score: int
    key_mode: str
    def __init__(self, channel: _Optional[str] = ..., key: _Optional[str] = ..., data: _Optional[bytes] = ..., b64data: _Optional[str] = ..., stream_data: _Optional[bytes] = ..., b64stream_data: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ..., idempotency_key: _Optional[str] = ..., delta: _Optional[bool] = ..., version: _Optional[int] = ..., version_epoch: _Optional[str] = ..., score: _Optional[int] = ..., key_mode: _Optional[str] = ...) -> None: ...

class MapPublishResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: MapPublishResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[MapPublishResult, _Mapping]] = ...) -> None: ...

class MapPublishResult(_message.Message):
    __slots__ = ("offset", "epoch", "suppressed", "suppress_reason")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    SUPPRESS_REASON_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: str
    suppressed: bool
    suppress_reason: str
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[str] = ..., suppressed: _Optional[bool] = ..., suppress_reason: _Optional[str] = ...) -> None: ...

class MapRemoveRequest(_message.Message):
    __slots__ = ("channel", "key", "idempotency_key")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    channel: str
    key: str
    idempotency_key: str
    def __init__(self, channel: _Optional[str] = ..., key: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class MapRemoveResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: MapRemoveResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[MapRemoveResult, _Mapping]] = ...) -> None: ...

class MapRemoveResult(_message.Message):
    __slots__ = ("offset", "epoch", "suppressed", "suppress_reason")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    SUPPRESS_REASON_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: str
    suppressed: bool
    suppress_reason: str
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[str] = ..., suppressed: _Optional[bool] = ..., suppress_reason: _Optional[str] = ...) -> None: ...

class MapReadStateRequest(_message.Message):
    __slots__ = ("channel", "cursor", "limit", "key", "asc", "revision_offset", "revision_epoch")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ASC_FIELD_NUMBER: _ClassVar[int]
    REVISION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REVISION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    channel: str
    cursor: str
    limit: int
    key: str
    asc: bool
    revision_offset: int
    revision_epoch: str
    def __init__(self, channel: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ..., key: _Optional[str] = ..., asc: _Optional[bool] = ..., revision_offset: _Optional[int] = ..., revision_epoch: _Optional[str] = ...) -> None: ...

class MapReadStateResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: MapReadStateResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[MapReadStateResult, _Mapping]] = ...) -> None: ...

class MapReadStateResult(_message.Message):
    __slots__ = ("entries", "offset", "epoch", "cursor")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[MapEntry]
    offset: int
    epoch: str
    cursor: str
    def __init__(self, entries: _Optional[_Iterable[_Union[MapEntry, _Mapping]]] = ..., offset: _Optional[int] = ..., epoch: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...

class MapEntry(_message.Message):
    __slots__ = ("key", "data", "tags", "offset", "score", "removed", "time")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    key: str
    data: bytes
    tags: _containers.ScalarMap[str, str]
    offset: int
    score: int
    removed: bool
    time: int
    def __init__(self, key: _Optional[str] = ..., data: _Optional[bytes] = ..., tags: _Optional[_Mapping[str, str]] = ..., offset: _Optional[int] = ..., score: _Optional[int] = ..., removed: _Optional[bool] = ..., time: _Optional[int] = ...) -> None: ...

class MapReadStreamRequest(_message.Message):
    __slots__ = ("channel", "since_offset", "since_epoch", "limit", "reverse")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    SINCE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SINCE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    channel: str
    since_offset: int
    since_epoch: str
    limit: int
    reverse: bool
    def __init__(self, channel: _Optional[str] = ..., since_offset: _Optional[int] = ..., since_epoch: _Optional[str] = ..., limit: _Optional[int] = ..., reverse: _Optional[bool] = ...) -> None: ...

class MapReadStreamResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: MapReadStreamResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[MapReadStreamResult, _Mapping]] = ...) -> None: ...

class MapReadStreamResult(_message.Message):
    __slots__ = ("entries", "offset", "epoch")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[MapEntry]
    offset: int
    epoch: str
    def __init__(self, entries: _Optional[_Iterable[_Union[MapEntry, _Mapping]]] = ..., offset: _Optional[int] = ..., epoch: _Optional[str] = ...) -> None: ...

class MapStatsRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class MapStatsResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: MapStatsResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[MapStatsResult, _Mapping]] = ...) -> None: ...

class MapStatsResult(_message.Message):
    __slots__ = ("num_keys",)
    NUM_KEYS_FIELD_NUMBER: _ClassVar[int]
    num_keys: int
    def __init__(self, num_keys: _Optional[int] = ...) -> None: ...

class MapClearRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class MapClearResponse(_message.Message):
    __slots__ = ("error", "result")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: Error
    result: MapClearResult
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., result: _Optional[_Union[MapClearResult, _Mapping]] = ...) -> None: ...

class MapClearResult(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
