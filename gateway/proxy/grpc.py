"""The gRPC transport of a proxy: the ``CentrifugoProxy`` service (``proxy.proto``, generated code
committed beside this module) over one grpcio aio channel per proxy. Forwarded headers and
``grpc_metadata`` go out as metadata over ``grpc.static_metadata``, ``grpc.credentials_key``/
``credentials_value`` as one more metadata pair, ``grpc.tls`` makes the channel secure. A status
other than OK raises ``ProxyFailure``; the caller bounds time. The channel receives no message
larger than the proxy's ``max_response_size`` (RESOURCE_EXHAUSTED: ``too_large``).
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.config.sections.proxy import ProxySettings
from gateway.config.sections.tls import TlsSettings
from gateway.config.tls import load_pem
from gateway.log_limit import LogLimiter
from gateway.proxy import proxy_pb2 as pb
from gateway.proxy import proxy_pb2_grpc as pb_grpc
from gateway.proxy.http import max_response_size
from gateway.proxy.replies import ProxyFailure

_METHODS: dict[str, tuple[str, type[Message]]] = {
    "connect": ("Connect", pb.ConnectRequest),
    "refresh": ("Refresh", pb.RefreshRequest),
    "subscribe": ("Subscribe", pb.SubscribeRequest),
    "publish": ("Publish", pb.PublishRequest),
    "rpc": ("RPC", pb.RPCRequest),
    "sub_refresh": ("SubRefresh", pb.SubRefreshRequest),
    "subscribe_stream": ("SubscribeUnidirectional", pb.SubscribeRequest),
    "shared_poll_refresh": ("SharedPollRefresh", pb.SharedPollRefreshRequest),
    "map_publish": ("MapPublish", pb.MapPublishRequest),
    "map_remove": ("MapRemove", pb.MapRemoveRequest),
}
_RESULT_BYTES = ("data", "info", "meta")
_METADATA_KEY = re.compile(r"^[0-9a-z_.-]+$")
_METADATA_VALUE = re.compile(r"^[\x20-\x7e]*$")
log = logging.getLogger("taskcast.gateway.proxy")
_dropped = LogLimiter(log)


def _carriable(name: str, value: str) -> bool:
    """True when gRPC metadata can carry this pair (HTTP/2 header rules; ``-bin`` keys are
    binary and reserved for the proxy's own use)."""
    return (
        bool(_METADATA_KEY.match(name)) and not name.endswith("-bin") and bool(_METADATA_VALUE.match(value))
    )


def _credentials(tls: TlsSettings) -> grpc.ChannelCredentials:
    """Channel credentials from Centrifugo's ``grpc.tls`` (each ``*_pem``: PEM, base64 or a path)."""

    def read(value: str, option: str) -> bytes | None:
        return load_pem(value, f"grpc.tls.{option}") if value else None

    return grpc.ssl_channel_credentials(
        root_certificates=read(tls.server_ca_pem, "server_ca_pem"),
        private_key=read(tls.key_pem, "key_pem"),
        certificate_chain=read(tls.cert_pem, "cert_pem"),
    )


def _unb64(obj: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if isinstance(obj.get(key), str):
            obj[key] = base64.b64decode(obj[key])


def to_plain(response: Message) -> dict[str, Any]:
    """A response message as the plain object ``replies.parse_reply`` reads (bytes as bytes)."""
    obj: dict[str, Any] = json_format.MessageToDict(response, preserving_proto_field_name=True)
    result = obj.get("result")
    if isinstance(result, dict):
        _unb64(result, _RESULT_BYTES)
        for entry in result.get("subs", {}).values():
            _unb64(entry, ("data", "info"))
    return obj


def request_message(kind: str, request: Mapping[str, Any]) -> Message:
    """The proxy.proto request message of ``kind`` from a request object (bytes as bytes)."""
    plain = {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v for k, v in request.items()}
    return json_format.ParseDict(plain, _METHODS[kind][1]())


class GrpcProxyTransport:
    """Calls one gRPC proxy (``grpc://host:port``). ``close`` closes the channel."""

    protocol = "grpc"

    def __init__(self, settings: ProxySettings) -> None:
        target = settings.endpoint.removeprefix("grpc://")
        g = settings.grpc
        limit = max_response_size(settings)
        options = [
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.max_receive_message_length", limit),  # a larger answer: RESOURCE_EXHAUSTED
        ]
        if g.tls.enabled:
            if g.tls.server_name:
                options.append(("grpc.ssl_target_name_override", g.tls.server_name))  # type: ignore[arg-type]
            self.channel = grpc.aio.secure_channel(target, _credentials(g.tls), options=options)
        else:
            self.channel = grpc.aio.insecure_channel(target, options=options)
        self.stub = pb_grpc.CentrifugoProxyStub(self.channel)  # type: ignore[no-untyped-call]
        self.static = {k.lower(): v for k, v in g.static_metadata.items()}
        self.extra = ((g.credentials_key.lower(), g.credentials_value),) if g.credentials_key else ()
        self.compression = grpc.Compression.Gzip if g.compression else None

    async def call(self, kind: str, request: Mapping[str, Any], headers: Mapping[str, str]) -> object:
        name = _METHODS[kind][0]
        message = request_message(kind, request)
        metadata = self.metadata(headers)
        try:
            response = await getattr(self.stub, name)(
                message, metadata=metadata, compression=self.compression
            )
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ProxyFailure("timeout", "deadline exceeded") from None
            if code is grpc.StatusCode.UNAVAILABLE:
                raise ProxyFailure("unavailable", str(exc.details())) from None
            if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise ProxyFailure("too_large", "answer over max_response_size") from None
            raise ProxyFailure("status", f"gRPC status {code.name}") from None
        return to_plain(response)

    def metadata(self, headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """``grpc.static_metadata`` under the forwarded headers, then the credentials pair. A
        forwarded header gRPC metadata cannot carry (a value that is not printable ASCII, from
        the client's request) is left out with one rate-limited line, instead of failing the
        call with a traceback on every connect."""
        merged = dict(self.static)
        for key, value in headers.items():
            name = key.lower()
            if _carriable(name, value):
                merged[name] = value
            else:
                _dropped.log(
                    logging.WARNING,
                    name,
                    "forwarded header %s is not printable ASCII: not sent to the gRPC proxy",
                    name,
                )
        return tuple(merged.items()) + self.extra

    async def close(self) -> None:
        await self.channel.close()
