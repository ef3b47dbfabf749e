"""The gRPC server API (``grpc_api``): Centrifugo's ``CentrifugoApi`` service over grpcio, a
front door of the executor every door shares (``gateway.api.executor.ServerApi``): each request
message is parsed straight into the method's typed request (``MessageParams`` read by the one
parser of gateway/api/requests.py), the result JSON becomes the response message, so methods,
validation and errors are those of the HTTP API.

Conversions: ``bytes`` fields named ``data``, ``info``, ``params`` (requests) carry raw JSON, as
in Centrifugo; an invalid one is error 107. In responses every ``bytes`` field (publication data,
``conn_info``, ``chan_info``) is the raw JSON. Errors are the response's ``error`` field; with
``grpc_api.error_mode: transport`` they become gRPC statuses instead. ``grpc_api.key`` is
checked against the ``authorization: apikey <key>`` metadata (UNAUTHENTICATED otherwise).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import grpc
import orjson
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from gateway.api.commands import Command, Refused, command
from gateway.api.executor import ServerApi, error_obj
from gateway.api.grpc import api_pb2
from gateway.api.requests import ApiError, bad_request
from gateway.config.sections.endpoints import GrpcApiSettings
from gateway.config.tls import load_pem
from gateway.log_limit import LogLimiter
from httpwire.tracing import TRACEPARENT

log = logging.getLogger("taskcast.gateway.grpc_api")
_refusals = LogLimiter(log)

JSON_BYTES = frozenset({"data", "info", "params"})
"""Request ``bytes`` fields that hold raw JSON."""

METHODS: dict[str, tuple[str, type[Message]]] = {
    "Publish": ("publish", api_pb2.PublishResponse),
    "Broadcast": ("broadcast", api_pb2.BroadcastResponse),
    "Subscribe": ("subscribe", api_pb2.SubscribeResponse),
    "Unsubscribe": ("unsubscribe", api_pb2.UnsubscribeResponse),
    "Disconnect": ("disconnect", api_pb2.DisconnectResponse),
    "Presence": ("presence", api_pb2.PresenceResponse),
    "PresenceStats": ("presence_stats", api_pb2.PresenceStatsResponse),
    "History": ("history", api_pb2.HistoryResponse),
    "HistoryRemove": ("history_remove", api_pb2.HistoryRemoveResponse),
    "Info": ("info", api_pb2.InfoResponse),
    "RPC": ("rpc", api_pb2.RPCResponse),
    "Refresh": ("refresh", api_pb2.RefreshResponse),
    "Channels": ("channels", api_pb2.ChannelsResponse),
    "SharedPollPublish": ("shared_poll_publish", api_pb2.SharedPollPublishResponse),
    # map subscriptions (gateway/api/maps.py)
    "MapPublish": ("map_publish", api_pb2.MapPublishResponse),
    "MapRemove": ("map_remove", api_pb2.MapRemoveResponse),
    "MapReadState": ("map_read_state", api_pb2.MapReadStateResponse),
    "MapReadStream": ("map_read_stream", api_pb2.MapReadStreamResponse),
    "MapStats": ("map_stats", api_pb2.MapStatsResponse),
    "MapClear": ("map_clear", api_pb2.MapClearResponse),
}
"""gRPC method -> (API method, response type). ``Batch`` is handled on its own."""

STATUS = {
    100: grpc.StatusCode.INTERNAL,
    101: grpc.StatusCode.UNAUTHENTICATED,
    102: grpc.StatusCode.NOT_FOUND,
    103: grpc.StatusCode.PERMISSION_DENIED,
    104: grpc.StatusCode.UNIMPLEMENTED,
    107: grpc.StatusCode.INVALID_ARGUMENT,
    108: grpc.StatusCode.UNAVAILABLE,
    112: grpc.StatusCode.OUT_OF_RANGE,
    113: grpc.StatusCode.ALREADY_EXISTS,
}
"""gRPC status per error code in ``transport`` error mode."""

_INT_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
    }
)


# --- message -> typed request -----------------------------------------------------------------


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _value(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return MessageParams(value)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        if fd.name not in JSON_BYTES:
            return value.decode("utf-8", "replace")
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            raise bad_request(f"{fd.name}: not JSON") from None
    return value


class MessageParams(Mapping[str, object]):
    """A request message read by the typed parser (``requests.command``) as its method's params,
    field by field, with no intermediate JSON object: a field at its zero value is absent (as
    proto3 has it), a submessage reads as another ``MessageParams``, a repeated field as a list,
    a map as a dict, a raw-JSON ``bytes`` field (``JSON_BYTES``) as its parsed value (not JSON:
    107 from the parser). So a gRPC request meets exactly the HTTP API's checks and errors."""

    __slots__ = ("_set",)

    def __init__(self, msg: Message) -> None:
        self._set = {fd.name: (fd, value) for fd, value in msg.ListFields()}

    def __getitem__(self, name: str) -> object:
        fd, value = self._set[name]
        if _is_map(fd):
            value_fd = fd.message_type.fields_by_name["value"]
            return {k: _value(value_fd, v) for k, v in value.items()}
        if fd.is_repeated:
            return [_value(fd, v) for v in value]
        return _value(fd, value)

    def get(self, name: str, default: object = None) -> object:
        return self[name] if name in self._set else default

    def __contains__(self, name: object) -> bool:
        return name in self._set

    def __iter__(self) -> Iterator[str]:
        return iter(self._set)

    def __len__(self) -> int:
        return len(self._set)


def batch_command(raw: Message) -> Command:
    """One ``Batch`` command: the typed request of the one field it sets, or its refusal (107
    ``commands[]`` for none or more than one, as for a JSON command that is not a one-key
    object)."""
    fields = raw.ListFields()
    if len(fields) != 1:
        return Refused("", bad_request("commands[]"))
    ((fd, value),) = fields
    return command(fd.name, MessageParams(value))


# --- result -> message ----------------------------------------------------------------------


def _scalar(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return orjson.dumps(value)
    if fd.type in _INT_TYPES:
        return int(value)
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return float(value)
    return value


def fill(msg: Message, obj: dict[str, Any]) -> Message:
    """Set ``msg``'s fields from a plain JSON object; keys the message lacks are skipped."""
    fields = msg.DESCRIPTOR.fields_by_name
    for key, value in obj.items():
        fd = fields.get(key)
        if fd is None or value is None:
            continue
        target = getattr(msg, key)
        if _is_map(fd):
            value_fd = fd.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                    fill(target[k], v)
                else:
                    target[k] = _scalar(value_fd, v)
        elif fd.is_repeated:
            for v in value:
                if fd.type == FieldDescriptor.TYPE_MESSAGE:
                    fill(target.add(), v)
                else:
                    target.append(_scalar(fd, v))
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            target.SetInParent()
            fill(target, value)
        else:
            setattr(msg, key, _scalar(fd, value))
    return msg


def _plain(result: Any) -> Any:
    """A result with its raw-JSON fragments parsed (one encode/decode)."""
    return orjson.loads(orjson.dumps(result))


# --- the servicer -------------------------------------------------------------------------------


Handler = Callable[[Message, grpc.aio.ServicerContext], Awaitable[Message]]


class Servicer:
    """``CentrifugoApi``: one handler per method, each translating to ``ServerApi``."""

    def __init__(self, api: ServerApi, settings: GrpcApiSettings) -> None:
        self.api = api
        self.settings = settings
        self.transport_errors = settings.error_mode == "transport"
        for name, (method, response) in METHODS.items():
            setattr(self, name, self._handler(method, response))

    async def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        key = self.settings.key
        if not key:
            return
        for meta_key, meta_value in context.invocation_metadata() or ():
            if meta_key == "authorization" and isinstance(meta_value, str):
                scheme, _, supplied = meta_value.partition(" ")
                supplied_key = supplied.strip().encode()
                if scheme.lower() == "apikey" and hmac.compare_digest(supplied_key, key.encode()):
                    return
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")

    async def _error(
        self, context: grpc.aio.ServicerContext, response: type[Message], exc: ApiError
    ) -> Message:
        if self.transport_errors:
            await context.abort(STATUS.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT), exc.message)
        return fill(response(), {"error": error_obj(exc)})

    def _handler(self, method: str, response: type[Message]) -> Handler:
        async def handle(request: Message, context: grpc.aio.ServicerContext) -> Message:
            await self._authorize(context)
            try:
                result = await self.api.execute(command(method, MessageParams(request)), "grpc")
            except ApiError as exc:
                return await self._error(context, response, exc)
            return fill(response(), {"result": _plain(result)})

        return handle

    async def Batch(self, request: Message, context: grpc.aio.ServicerContext) -> Message:
        await self._authorize(context)
        limit = self.api.batch_limit("grpc")
        if len(request.commands) > limit:
            # BatchResponse has no error field: refused with a status whatever the error mode,
            # before any command is converted.
            self.api.node.metrics.api_errors.labels("grpc", "batch", "107").inc()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad request: more than {limit} commands")
        parallel = bool(getattr(request, "parallel", False))
        commands = map(batch_command, request.commands)  # parsed one by one as they run
        replies = await self.api.execute_batch(commands, parallel=parallel, protocol="grpc")
        return fill(api_pb2.BatchResponse(), {"replies": _plain(replies)})


class Malformed:
    """What ``_lenient`` hands the servicer instead of a request that does not parse: grpcio
    would log a traceback per such request, before any key check."""

    def __init__(self, error: str) -> None:
        self.error = error


def _lenient(parse: Callable[[bytes], Message]) -> Callable[[bytes], Message | Malformed]:
    def deserialize(raw: bytes) -> Message | Malformed:
        try:
            return parse(raw)
        except (DecodeError, ValueError, TypeError) as exc:  # protobuf raises DecodeError
            return Malformed(type(exc).__name__)

    return deserialize


def _guarded(servicer: Servicer, name: str, handler: Handler) -> Callable[..., Awaitable[Message]]:
    """``handler`` with the refusals unauthenticated input can trigger answered in one rate-limited
    line: a request that does not parse (INVALID_ARGUMENT, after the key check) and any other
    exception (INTERNAL), never grpcio's traceback."""

    async def handle(request: Message | Malformed, context: grpc.aio.ServicerContext) -> Message:
        if isinstance(request, Malformed):
            await servicer._authorize(context)
            _refusals.log(logging.WARNING, f"malformed:{name}", "malformed gRPC API %s request refused", name)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed request")
        try:
            return await handler(request, context)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            _refusals.log(
                logging.ERROR, f"internal:{name}", "gRPC API %s failed: %s", name, type(exc).__name__
            )
            await context.abort(grpc.StatusCode.INTERNAL, "internal server error")
        raise AssertionError("unreachable")  # abort raises

    return handle


def _traced(servicer: Servicer, name: str, handler: Handler) -> Handler:
    """``handler`` as a server span named ``name`` (``<service>/<Method>``, as otelgrpc names it;
    ``opentelemetry.api``), a child of the ``traceparent`` metadata; a reply carrying an
    ``error`` marks it as an error, as Centrifugo does."""
    tracing = servicer.api.tracing
    service, _, method = name.partition("/")
    attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}

    async def handle(request: Message, context: grpc.aio.ServicerContext) -> Message:
        parent = ""
        for key, value in context.invocation_metadata() or ():
            if key == TRACEPARENT and isinstance(value, str):
                parent = value
        with tracing.span(name, parent=parent, kind="server", attributes=attributes) as span:
            reply = await handler(request, context)
            error = getattr(reply, "error", None)
            if error is not None and reply.HasField("error"):
                tracing.mark_error(span, f"{error.code}: {error.message}")
            return reply

    return handle


def register(servicer: Servicer, server: grpc.aio.Server) -> None:
    """Add ``CentrifugoApi`` to ``server`` (api_pb2_grpc's registration, with ``_lenient``
    request parsing and ``_guarded`` handlers)."""
    service = api_pb2.DESCRIPTOR.services_by_name["CentrifugoApi"]
    handlers = {}
    for method in service.methods:
        request_type = getattr(api_pb2, method.input_type.name)
        response_type = getattr(api_pb2, method.output_type.name)
        handler = getattr(servicer, method.name)
        if servicer.api.tracing.enabled:
            handler = _traced(servicer, f"{service.full_name}/{method.name}", handler)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _guarded(servicer, method.name, handler),
            request_deserializer=_lenient(request_type.FromString),
            response_serializer=response_type.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))


def _bind(settings: GrpcApiSettings) -> str:
    return f"{settings.address or '[::]'}:{settings.port}"


async def serve(api: ServerApi, settings: GrpcApiSettings, started: asyncio.Event | None = None) -> None:
    """Serve the gRPC API until cancelled (then stop with a short grace period).

    Raises:
        RuntimeError: the port could not be bound.
    """
    options = []
    if settings.max_receive_message_size > 0:
        options.append(("grpc.max_receive_message_length", settings.max_receive_message_size))
    server = grpc.aio.server(options=options)
    register(Servicer(api, settings), server)
    address = _bind(settings)
    tls = settings.tls
    if tls.enabled:
        pair = (
            load_pem(tls.key_pem, "grpc_api.tls.key_pem"),
            load_pem(tls.cert_pem, "grpc_api.tls.cert_pem"),
        )
        client_ca = load_pem(tls.client_ca_pem, "grpc_api.tls.client_ca_pem") if tls.client_ca_pem else None
        credentials = grpc.ssl_server_credentials(
            [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
        )
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"grpc_api: cannot listen on {address}")
    await server.start()
    log.info("gRPC server API listening on %s%s", address, " (TLS)" if tls.enabled else "")
    if started is not None:
        started.set()
    try:
        await server.wait_for_termination()
    finally:
        await asyncio.shield(server.stop(1.0))
