"""Validation of what the gateway serves: its listeners (``http_server``: TLS, the internal
port; ``grpc_api.tls``), every endpoint's ``handler_prefix`` (a path, no two enabled endpoints
on one, none under the server API's), the WebSocket compression options and the admin UI
(credentials unless insecure, a path that shadows no endpoint); and what follows from them:
the admin UI's paths, the paths served only on the internal port. Pure, like
gateway/config/checks.py, which calls it; raises ``ConfigError`` naming the option.
"""

from __future__ import annotations

from gateway.config.schema import ConfigError, Settings
from gateway.config.sections.endpoints import UniWebSocketSettings, WebSocketSettings
from gateway.config.tls import check_listener

__all__ = [
    "PREFIXED_SECTIONS",
    "admin_paths",
    "check_admin",
    "check_compression",
    "check_endpoints",
    "check_listeners",
    "check_transports",
    "internal_prefixes",
    "served_endpoints",
]


def check_compression(websocket: WebSocketSettings | UniWebSocketSettings, section: str) -> None:
    """``<section>.compression_level`` in 1-9 and no negative size."""
    # Checked whether or not compression is on, as Centrifugo parses them.
    if not 1 <= websocket.compression_level <= 9:
        level = websocket.compression_level
        raise ConfigError(f"{section}.compression_level", f"must be in 1-9, got {level}")
    for name in ("compression_min_size", "decompressed_message_size_limit"):
        if getattr(websocket, name) < 0:
            raise ConfigError(f"{section}.{name}", f"must not be negative, got {getattr(websocket, name)}")


def check_listeners(settings: Settings, warnings: list[str]) -> None:
    """``http_server.tls`` (a loadable certificate + key), ``internal_port``, ``grpc_api.tls``."""
    http = settings.http_server
    check_listener(http.tls, "http_server.tls")
    if http.tls.insecure_skip_verify or http.tls.server_name or http.tls.server_ca_pem:
        warnings.append(
            "http_server.tls: insecure_skip_verify, server_name and server_ca_pem apply to clients, "
            "not to a listener; ignored"
        )
    if http.internal_port:
        if not http.internal_port.isdigit() or not 0 < int(http.internal_port) <= 65535:
            raise ConfigError(
                "http_server.internal_port", f"must be a port number (1-65535), got {http.internal_port!r}"
            )
        if int(http.internal_port) == http.port and (http.internal_address or "") == (http.address or ""):
            raise ConfigError("http_server.internal_port", "must differ from http_server.port")
    elif http.internal_address:
        warnings.append("http_server.internal_address is set but internal_port is not; ignored")
    if settings.grpc_api.enabled:
        check_listener(settings.grpc_api.tls, "grpc_api.tls")
    if settings.engine.type == "redis" and settings.engine.redis.tls.server_name:
        warnings.append(
            "engine.redis.tls.server_name: not supported, ignored (the host of the address is verified)"
        )


PREFIXED_SECTIONS = (
    "http_api",
    "websocket",
    "sse",
    "http_stream",
    "emulation",
    "uni_sse",
    "uni_http_stream",
    "uni_websocket",
    "prometheus",
    "health",
    "init",
)


def check_transports(settings: Settings, warnings: list[str]) -> None:
    """Every ``handler_prefix`` a path (``/…``, no trailing ``/``); a gateway with no
    bidirectional transport is warned about."""
    for section in PREFIXED_SECTIONS:
        prefix: str = getattr(settings, section).handler_prefix
        if not prefix.startswith("/"):
            raise ConfigError(f"{section}.handler_prefix", f'must start with "/", got {prefix!r}')
        if prefix == "/" or prefix.endswith("/"):
            # "/" is the gateway's own page; the API adds "/<method>" to its prefix.
            raise ConfigError(f"{section}.handler_prefix", f'must not end with "/", got {prefix!r}')
    if settings.websocket.disabled and not (settings.sse.enabled or settings.http_stream.enabled):
        warnings.append("websocket.disabled is true and no other bidirectional transport is enabled")


def served_endpoints(settings: Settings) -> dict[str, str]:
    """Option section -> path of every endpoint the settings enable (``http_api`` also serves
    ``<prefix>/<method>``). Emulation is served when a bidirectional streaming transport is."""
    enabled = {
        "http_api": not settings.http_api.disabled,
        "websocket": not settings.websocket.disabled,
        "sse": settings.sse.enabled,
        "http_stream": settings.http_stream.enabled,
        "emulation": settings.sse.enabled or settings.http_stream.enabled,
        "uni_sse": settings.uni_sse.enabled,
        "uni_http_stream": settings.uni_http_stream.enabled,
        "uni_websocket": settings.uni_websocket.enabled,
        "prometheus": settings.prometheus.enabled,
        "health": settings.health.enabled,
        "init": settings.init.enabled,
    }
    return {section: getattr(settings, section).handler_prefix for section, on in enabled.items() if on}


def check_endpoints(settings: Settings) -> None:
    """Two enabled endpoints on one path would shadow each other: refuse to start."""
    owner: dict[str, str] = {}
    for section, path in served_endpoints(settings).items():
        if path in owner:
            raise ConfigError(
                f"{section}.handler_prefix", f"{path!r} is already {owner[path]}.handler_prefix"
            )
        owner[path] = section
    api = settings.http_api.handler_prefix
    if not settings.http_api.disabled:
        for path, section in owner.items():
            if section != "http_api" and path.startswith(api + "/"):
                raise ConfigError(
                    f"{section}.handler_prefix", f"{path!r} is under http_api.handler_prefix {api!r}"
                )


def admin_paths(settings: Settings) -> tuple[str, str]:
    """(the admin page's path, the prefix of the admin endpoints) for ``admin.handler_prefix``:
    ``("/", "/admin")`` for the default empty prefix, ``("/ui", "/ui/admin")`` for ``/ui``."""
    prefix = settings.admin.handler_prefix.rstrip("/")
    return prefix or "/", prefix + "/admin"


def check_admin(settings: Settings, warnings: list[str]) -> None:
    """``admin``: credentials unless insecure, a path that shadows no other endpoint."""
    admin = settings.admin
    if not admin.enabled:
        return
    if admin.handler_prefix and not admin.handler_prefix.startswith("/"):
        raise ConfigError(
            "admin.handler_prefix", f'must be empty or start with "/", got {admin.handler_prefix!r}'
        )
    if admin.token_ttl <= 0:
        raise ConfigError("admin.token_ttl", "must be positive")
    if admin.insecure:
        warnings.append(
            "admin.insecure is true: the admin web UI and its API accept every request without "
            "login (keep the admin endpoints on a private listener)"
        )
    else:
        for option in ("password", "secret"):
            if not getattr(admin, option):
                raise ConfigError(
                    f"admin.{option}", "must be set when admin.enabled is true (or set admin.insecure)"
                )
    if admin.secret and len(admin.secret.encode()) < 32:
        warnings.append("admin.secret is shorter than 32 bytes: admin tokens are easier to forge")
    page, endpoints = admin_paths(settings)
    for section, path in served_endpoints(settings).items():
        if path in (page, endpoints) or path.startswith(endpoints + "/"):
            raise ConfigError("admin.handler_prefix", f"the admin UI's {path!r} is {section}.handler_prefix")


def internal_prefixes(settings: Settings) -> tuple[str, ...]:
    """Paths served only on ``http_server.internal_port`` when it is set (Centrifugo's internal
    endpoints: the server API, ``prometheus``, ``health``, ``admin`` unless ``admin.external``);
    empty when it is not."""
    if not settings.http_server.internal_port:
        return ()
    prefixes = [settings.prometheus.handler_prefix, settings.health.handler_prefix]
    if not settings.http_api.disabled:
        prefixes.append(settings.http_api.handler_prefix)
    if settings.admin.enabled and not settings.admin.external:
        prefixes += admin_paths(settings)
    return tuple(prefixes)
