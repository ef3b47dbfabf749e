"""What the gateway serves, as frozen values: its listeners (``http_server``), the server API
(``http_api``, ``grpc_api``), the client transports' endpoints (``websocket``,
``uni_websocket``, ``sse``, ``http_stream``, ``uni_sse``, ``uni_http_stream``, ``emulation``,
``init``) and the operators' (``admin``, ``prometheus``, ``health``). gateway/app.py mounts them;
gateway/config/checks.py checks them."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.sections.fields import EXTENSION, NUMBER_AS_STRING
from gateway.config.sections.tls import TlsSettings

__all__ = [
    "AdminSettings",
    "EmulationSettings",
    "GrpcApiSettings",
    "HealthSettings",
    "HttpApiSettings",
    "HttpServerSettings",
    "InitSettings",
    "PrometheusSettings",
    "StreamTransportSettings",
    "UniWebSocketSettings",
    "WebSocketSettings",
]


@dataclass(frozen=True, slots=True)
class HttpServerSettings:
    """``internal_port`` (a string, as in Centrifugo) moves the server API, ``prometheus`` and
    ``health`` to a second listener on ``internal_address``:``internal_port``; ``tls`` applies
    to both listeners. ``request_timeout`` is a Taskcast extension: a connection must deliver a whole request
    (headers, and the body if any) within that many seconds of opening or of the request's first
    byte, else it is closed (slowloris); 0 disables the deadline. ``workers`` is a Taskcast
    extension too: that many gateway processes on one port (gateway/workers.py, docs/scaling.md)."""

    address: str = ""
    port: int = 8000
    internal_address: str = ""
    internal_port: str = field(default="", metadata=NUMBER_AS_STRING)
    tls: TlsSettings = field(default_factory=TlsSettings)
    request_timeout: float = field(default=10.0, metadata=EXTENSION)
    workers: int = field(default=1, metadata=EXTENSION)


@dataclass(frozen=True, slots=True)
class HttpApiSettings:
    """``disabled`` removes the server API from the listener (``/api*`` answers 404).
    ``max_batch_commands`` is a Taskcast extension: the most commands one ``batch`` request (or
    one legacy ``POST /api`` body) may carry; more are refused whole with error 107."""

    disabled: bool = False
    key: str = ""
    insecure: bool = False
    handler_prefix: str = "/api"
    error_mode: str = ""
    max_batch_commands: int = field(default=1000, metadata=EXTENSION)


@dataclass(frozen=True, slots=True)
class GrpcApiSettings:
    """``grpc_api``: Centrifugo's gRPC server API (api.proto) on ``address``:``port``; ``key``
    is checked against the ``authorization: apikey <key>`` metadata when set.
    ``max_batch_commands`` is a Taskcast extension, as ``http_api``'s for the ``Batch`` call."""

    enabled: bool = False
    address: str = ""
    port: int = 10000
    key: str = ""
    error_mode: str = ""
    tls: TlsSettings = field(default_factory=TlsSettings)
    max_receive_message_size: int = 0
    max_batch_commands: int = field(default=1000, metadata=EXTENSION)


@dataclass(frozen=True, slots=True)
class WebSocketSettings:
    """``websocket``: the bidirectional endpoint. ``compression`` offers permessage-deflate
    (gateway/transports/deflate.py) at ``compression_level`` (1-9) to messages larger than
    ``compression_min_size`` bytes; ``message_size_limit`` bounds a client message's bytes on the
    wire and ``decompressed_message_size_limit`` (0: ten times ``message_size_limit``) its
    inflated size."""

    disabled: bool = False
    handler_prefix: str = "/connection/websocket"
    message_size_limit: int = 65536
    compression: bool = False
    compression_level: int = 1
    compression_min_size: int = 0
    decompressed_message_size_limit: int = 0


@dataclass(frozen=True, slots=True)
class UniWebSocketSettings:
    """``uni_websocket``: Centrifugo's unidirectional WebSocket (the connect request is the
    ``cf_connect`` URL parameter or the first client message, then the server only pushes).
    ``compression`` offers permessage-deflate as ``websocket.compression`` does (same options,
    same once-per-publication compression: gateway/transports/deflate.py); ``join_push_messages`` sends
    the pushes of one write as one frame (newline-delimited); ``disable_disconnect_push`` closes
    without the disconnect push that precedes the close frame; ``disable_closing_handshake``
    ends the TCP connection without a close frame (Centrifugo before v6.5.1)."""

    enabled: bool = False
    handler_prefix: str = "/connection/uni_websocket"
    message_size_limit: int = 65536
    compression: bool = False
    compression_level: int = 1
    compression_min_size: int = 0
    decompressed_message_size_limit: int = 0
    join_push_messages: bool = False
    disable_closing_handshake: bool = False
    disable_disconnect_push: bool = False


@dataclass(frozen=True, slots=True)
class StreamTransportSettings:
    """``sse``, ``http_stream``, ``uni_sse`` and ``uni_http_stream`` (defaults differ by prefix)."""

    enabled: bool = False
    handler_prefix: str = ""
    max_request_body_size: int = 65536


@dataclass(frozen=True, slots=True)
class InitSettings:
    """``init``: the connection init endpoint (GET answers ``{}``; gateway/transports/init.py),
    on the public listener."""

    enabled: bool = False
    handler_prefix: str = "/connection/init"


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """``admin``: the admin web UI (gateway/admin/, docs/admin.md). The page is served at
    ``handler_prefix`` + ``/`` and its endpoints under ``handler_prefix`` + ``/admin/``; with
    ``http_server.internal_port`` set they are on the internal listener unless ``external``.
    ``password`` logs in and ``secret`` signs the admin token that login returns (both required
    unless ``insecure``, which serves everything without login). ``token_ttl`` is a Taskcast
    extension: an admin token's lifetime in seconds."""

    enabled: bool = False
    password: str = ""
    secret: str = ""
    insecure: bool = False
    handler_prefix: str = ""
    external: bool = False
    token_ttl: float = field(default=86400.0, metadata=EXTENSION)


@dataclass(frozen=True, slots=True)
class EmulationSettings:
    handler_prefix: str = "/emulation"
    max_request_body_size: int = 65536


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    enabled: bool = False
    handler_prefix: str = "/metrics"


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """``/health`` answers 200 while the engine can publish, else 503."""

    enabled: bool = False
    handler_prefix: str = "/health"
