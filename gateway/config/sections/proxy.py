"""The proxies to the application backend as frozen values (Centrifugo's ``Proxy``): the
top-level ``proxies`` list, ``client.proxy.connect``/``refresh``, ``channel.proxy.*`` and the
selection of a proxy by a ``*_proxy_name`` option (docs/proxy.md). gateway/proxy/ calls them;
gateway/config/checks.py checks them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.config.sections.tls import TlsSettings

__all__ = [
    "DEFAULT_PROXY_NAME",
    "ChannelProxySettings",
    "ClientProxySettings",
    "EnabledProxySettings",
    "NamedProxySettings",
    "ProxyGrpcSettings",
    "ProxyHttpSettings",
    "ProxySettings",
    "ProxyStatusTransform",
    "ProxyTransformDisconnect",
    "ProxyTransformError",
    "named_proxy",
]


@dataclass(frozen=True, slots=True)
class ProxyTransformError:
    """``to_error`` of an ``http.status_to_code_transforms`` entry (code 0 = not used)."""

    code: int = 0
    message: str = ""
    temporary: bool = False


@dataclass(frozen=True, slots=True)
class ProxyTransformDisconnect:
    """``to_disconnect`` of an ``http.status_to_code_transforms`` entry (code 0 = not used)."""

    code: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ProxyStatusTransform:
    """One ``http.status_to_code_transforms`` entry: a backend answering ``status_code`` is
    answered to the client as ``to_error`` or ``to_disconnect`` instead of error 100."""

    status_code: int = 0
    to_error: ProxyTransformError = field(default_factory=ProxyTransformError)
    to_disconnect: ProxyTransformDisconnect = field(default_factory=ProxyTransformDisconnect)


@dataclass(frozen=True, slots=True)
class ProxyHttpSettings:
    """``http`` of a proxy: ``tls`` of the client connection to the backend (``cert_pem``/
    ``key_pem`` = client certificate, ``server_ca_pem`` verifies the backend), ``static_headers``
    (the client's forwarded headers win over them, as in Centrifugo), ``status_to_code_transforms``."""

    tls: TlsSettings = field(default_factory=lambda: TlsSettings())
    static_headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    status_to_code_transforms: tuple[ProxyStatusTransform, ...] = ()


@dataclass(frozen=True, slots=True)
class ProxyGrpcSettings:
    """``grpc`` of a proxy: ``tls``, one per-call metadata pair ``credentials_key``:
    ``credentials_value``, gzip ``compression``, ``static_metadata`` (forwarded values win)."""

    tls: TlsSettings = field(default_factory=lambda: TlsSettings())
    credentials_key: str = ""
    credentials_value: str = ""
    compression: bool = False
    static_metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """One proxy (Centrifugo's ``Proxy``): ``endpoint`` is ``http(s)://…`` or ``grpc://host:port``.
    ``emulated_headers`` names the entries of the connect command's headers map (headers
    emulation, gateway/protocol/headers.py) forwarded as headers of the proxy's requests; a
    name also in ``http_headers`` takes the real header's value when the request has one.
    ``max_concurrency`` is a Taskcast extension: calls in flight to this proxy at once (0 = 64).
    ``max_response_size`` is a Taskcast extension: the largest answer read from it, in bytes
    (0 = 4 MiB, grpc-go's default receive limit, which bounds a Centrifugo gRPC proxy too)."""

    endpoint: str = ""
    timeout: float = 1.0
    http_headers: tuple[str, ...] = ()
    grpc_metadata: tuple[str, ...] = ()
    emulated_headers: tuple[str, ...] = ()
    binary_encoding: bool = False
    include_connection_meta: bool = False
    http: ProxyHttpSettings = field(default_factory=ProxyHttpSettings)
    grpc: ProxyGrpcSettings = field(default_factory=ProxyGrpcSettings)
    max_concurrency: int = 0
    max_response_size: int = 0


@dataclass(frozen=True, slots=True)
class NamedProxySettings(ProxySettings):
    """An entry of the top-level ``proxies`` list, referenced by ``*_proxy_name``."""

    name: str = ""


@dataclass(frozen=True, slots=True)
class EnabledProxySettings(ProxySettings):
    """``client.proxy.connect`` / ``client.proxy.refresh``: used only when ``enabled``."""

    enabled: bool = False


@dataclass(frozen=True, slots=True)
class ClientProxySettings:
    connect: EnabledProxySettings = field(default_factory=EnabledProxySettings)
    refresh: EnabledProxySettings = field(default_factory=EnabledProxySettings)


@dataclass(frozen=True, slots=True)
class ChannelProxySettings:
    """``channel.proxy``: each can be referenced by the proxy name ``default``."""

    subscribe: ProxySettings = field(default_factory=ProxySettings)
    publish: ProxySettings = field(default_factory=ProxySettings)
    sub_refresh: ProxySettings = field(default_factory=ProxySettings)
    subscribe_stream: ProxySettings = field(default_factory=ProxySettings)
    shared_poll_refresh: ProxySettings = field(default_factory=ProxySettings)
    map_publish: ProxySettings = field(default_factory=ProxySettings)
    """The map publish proxy (a map namespace's ``map.publish_proxy_enabled``, docs/maps.md)."""
    map_remove: ProxySettings = field(default_factory=ProxySettings)
    """The map remove proxy (a map namespace's ``map.remove_proxy_enabled``)."""


DEFAULT_PROXY_NAME = "default"
"""``*_proxy_name`` value (or empty) that selects the proxy configured in place
(``channel.proxy.<kind>``, ``rpc.proxy``) instead of an entry of ``proxies``."""


def named_proxy(
    proxies: tuple[NamedProxySettings, ...], default: ProxySettings, name: str
) -> ProxySettings | None:
    """The proxy a ``*_proxy_name`` selects; None when no ``proxies`` entry has that name."""
    if not name or name == DEFAULT_PROXY_NAME:
        return default
    return next((p for p in proxies if p.name == name), None)
