"""What a front door of the server API hands the executor (gateway/api/executor.py): the method
catalogue (``METHODS``: method name -> typed request), and ``command``, which turns a method and
its params into a ``Command`` — the typed request, or ``Refused`` with the coded error when the
params do not parse. HTTP, ``batch`` and the legacy ``/api`` pass JSON params; gRPC passes a view
of the protobuf message (gateway/api/grpc/server.py ``MessageParams``); both go through the one
parser of gateway/api/requests.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from gateway.api.maps import MAP_METHODS, MapRequest
from gateway.api.requests import (
    ApiError,
    BroadcastRequest,
    ChannelsRequest,
    DisconnectRequest,
    HistoryRemoveRequest,
    HistoryRequest,
    InfoRequest,
    PresenceRequest,
    PresenceStatsRequest,
    PublishRequest,
    RefreshRequest,
    RpcRequest,
    SharedPollPublishRequest,
    SubscribeRequest,
    UnsubscribeRequest,
    bad_request,
    parse,
    publish_fast,
)
from gateway.protocol import codes

Request: TypeAlias = (
    PublishRequest
    | BroadcastRequest
    | SubscribeRequest
    | UnsubscribeRequest
    | DisconnectRequest
    | RefreshRequest
    | PresenceRequest
    | PresenceStatsRequest
    | HistoryRequest
    | HistoryRemoveRequest
    | ChannelsRequest
    | InfoRequest
    | RpcRequest
    | SharedPollPublishRequest
    | MapRequest  # map methods (gateway/api/maps.py)
)
"""One server API method's typed request: its type names the method (``METHODS``)."""

METHODS: dict[str, type[Any]] = {
    "publish": PublishRequest,
    "broadcast": BroadcastRequest,
    "subscribe": SubscribeRequest,
    "unsubscribe": UnsubscribeRequest,
    "disconnect": DisconnectRequest,
    "refresh": RefreshRequest,
    "presence": PresenceRequest,
    "presence_stats": PresenceStatsRequest,
    "history": HistoryRequest,
    "history_remove": HistoryRemoveRequest,
    "channels": ChannelsRequest,
    "info": InfoRequest,
    "rpc": RpcRequest,
    # shared poll (gateway/sharedpoll/)
    "shared_poll_publish": SharedPollPublishRequest,
    # --- map methods (gateway/api/maps.py) ---
    **MAP_METHODS,
}
"""Method name -> request type: every front door (HTTP, ``batch``, the legacy ``/api``, gRPC)
names methods by these keys."""

METHOD_OF: dict[type[Any], str] = {cls: name for name, cls in METHODS.items()}


@dataclass(frozen=True, slots=True)
class Refused:
    """A command that did not parse into a ``Request``: the executor answers ``error`` without
    running anything. ``method`` names the method its error is counted under in ``api_errors``
    and ``api_command_duration`` ("" = not counted: an unknown method, a malformed ``batch``
    command)."""

    method: str
    error: ApiError


Command: TypeAlias = Request | Refused
"""What a front door hands the executor: a typed request, or the refusal of one."""


def command(method: str, params: object, where: str = "") -> Command:
    """The typed request of ``method`` (a ``METHODS`` key) with JSON-like ``params`` (a dict,
    or any ``Mapping`` reading a message's fields as JSON values), or its refusal: 104 for an
    unknown method, 107 for params the method's parser refuses. Never raises."""
    cls = METHODS.get(method)
    if cls is None:
        return Refused("", ApiError(codes.ERROR_NOT_FOUND, method))
    if cls is PublishRequest:
        fast = publish_fast(params)  # the relay's forms (``requests.parse_publish``'s short way)
        if fast is not None:
            return fast
    try:
        req: Request = parse(cls, params, where)
    except ApiError as exc:
        return Refused(method, exc)
    return req


def batch_command(raw: object) -> Command:
    """One JSON ``batch`` command ``{"<method>": params}``: its typed request, or its refusal
    (107 ``commands[]`` for anything but a one-key object, 104 for ``batch`` or an unknown
    method, 107 for bad params). Never raises."""
    if type(raw) is not dict or len(raw) != 1:
        return Refused("", bad_request("commands[]"))
    params = raw.get("publish")
    if params is not None:  # the common command: no method lookup, and the relay's forms
        fast = publish_fast(params)
        if fast is not None:
            return fast
    ((method, params),) = raw.items()
    return command(method, params)
