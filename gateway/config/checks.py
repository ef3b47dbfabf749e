"""Cross-field validation of parsed ``Settings`` and the values derived from them.

Pure: takes typed settings (already type-checked by ``gateway.config.loading``), returns new settings with
derived fields filled (token ``algorithms``, namespace ``history_meta_ttl_resolved`` and
``channel_pattern``, ``channel.by_name``, ``node.name``), appends warnings, and raises
``ConfigError`` naming the option for anything Centrifugo would refuse to start with. The only
outside facts it uses are the host name (default node name) and the PEM files that TLS options
name (``gateway.config.tls`` loads them to check them). The rules of one concept live beside it:
the proxies' in gateway/config/proxy_checks.py, the served endpoints' and listeners' in
gateway/config/endpoint_checks.py (and the maps', consumers', webhooks' and shared poll's in
their ``*_checks`` modules); this module runs them all and keeps the client's, channels',
tokens', log's and engine's.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from gateway.config import redis_address
from gateway.config.consumer_checks import check_consumers
from gateway.config.endpoint_checks import (
    check_admin,
    check_compression,
    check_endpoints,
    check_listeners,
    check_transports,
)
from gateway.config.map_checks import check_map, check_presence_prefixes
from gateway.config.proxy_checks import check_proxies, check_proxy_endpoint
from gateway.config.schema import (
    ChannelOptions,
    ChannelSettings,
    ClientSettings,
    ConfigError,
    LogSettings,
    Settings,
    TokenSettings,
)
from gateway.config.shared_poll_checks import check_shared_poll
from gateway.config.tls import check_client
from gateway.config.webhook_checks import check_webhooks

NAMESPACE_NAME = re.compile(r"^[-a-zA-Z0-9_]{2,}$")
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512")
ECDSA_ALGORITHMS = ("ES256", "ES384", "ES512")
JWKS_ALGORITHMS = (*RSA_ALGORITHMS, *ECDSA_ALGORITHMS, "EdDSA")
LOG_LEVELS = ("trace", "debug", "info", "warn", "error", "fatal", "none")
"""Centrifugo's ``log.level`` values (the official SDKs' test configs use trace)."""
ENGINE_TYPES = ("memory", "redis")
RECOVERY_MODES = ("stream", "cache")

_T = TypeVar("_T", bound=TokenSettings)


def validate_and_derive(settings: Settings, warnings: list[str]) -> Settings:
    """Validate ``settings`` as a whole and return it with every derived field resolved.

    Raises:
        ConfigError: the first invalid option found (path + problem).
    """
    client = _check_client(settings.client, warnings)
    channel = _check_channel(settings.channel)
    check_transports(settings, warnings)
    check_endpoints(settings)
    check_admin(settings, warnings)
    _check_engine(settings)
    check_proxies(settings, channel, warnings)
    check_shared_poll(settings, channel, warnings, check_proxy_endpoint)
    check_listeners(settings, warnings)
    log = _check_log(settings.log)
    consumers = check_consumers(settings.consumers, warnings)
    check_webhooks(settings, warnings)
    if settings.http_server.port > 65535:
        raise ConfigError("http_server.port", f"must be at most 65535, got {settings.http_server.port}")
    if settings.client.queue_conflate_size < 0:
        raise ConfigError(
            "client.queue_conflate_size", f"must be 0 or more, got {settings.client.queue_conflate_size}"
        )
    if 0 < settings.client.queue_max_size <= settings.client.queue_conflate_size:
        warnings.append(
            "client.queue_conflate_size: not below client.queue_max_size, so a backed-up connection is "
            "disconnected (3008) before its output is conflated"
        )
    if settings.http_server.workers < 1:
        raise ConfigError("http_server.workers", f"must be at least 1, got {settings.http_server.workers}")
    for section in ("http_api", "grpc_api"):
        limit = getattr(settings, section).max_batch_commands
        if limit < 1:
            raise ConfigError(f"{section}.max_batch_commands", f"must be at least 1, got {limit}")
    if settings.http_api.error_mode not in ("", "transport"):
        raise ConfigError(
            "http_api.error_mode", f'must be "" or "transport", got {settings.http_api.error_mode!r}'
        )
    grpc_api = settings.grpc_api
    mtls = grpc_api.tls.enabled and bool(grpc_api.tls.client_ca_pem)
    if grpc_api.enabled and not grpc_api.key and not mtls:
        # As Centrifugo, which installs its key check only when a key is set; loud, because the
        # listener binds every interface by default (docs/security.md).
        warnings.append(
            f"grpc_api is enabled without grpc_api.key: every call to the gRPC server API on "
            f"{grpc_api.address or '[::]'}:{grpc_api.port} is accepted unauthenticated (set "
            "grpc_api.key, or grpc_api.tls.client_ca_pem, or bind grpc_api.address privately)"
        )
    if settings.http_api.insecure:
        warnings.append("http_api.insecure is true: the server API accepts every request without a key")
    if settings.rpc.ping.enabled and not settings.rpc.ping.method:
        raise ConfigError("rpc.ping.method", "must not be empty when rpc.ping.enabled is true")
    node = settings.node
    if not node.name:
        node = dataclasses.replace(node, name=f"{socket.gethostname()}_{settings.http_server.port}")
    websocket = settings.websocket
    check_compression(websocket, "websocket")
    uni_websocket = settings.uni_websocket
    check_compression(uni_websocket, "uni_websocket")
    return dataclasses.replace(
        settings,
        client=client,
        channel=channel,
        node=node,
        websocket=websocket,
        uni_websocket=uni_websocket,
        log=log,
        consumers=consumers,
    )


def _check_log(log: LogSettings) -> LogSettings:
    level = log.level.strip().lower()
    if level not in LOG_LEVELS:
        raise ConfigError("log.level", f"must be one of {', '.join(LOG_LEVELS)}, got {log.level!r}")
    if log.file:
        directory = Path(log.file).expanduser().parent
        if not directory.is_dir():
            raise ConfigError("log.file", f"directory {str(directory)!r} does not exist")
        if Path(log.file).expanduser().is_dir():
            raise ConfigError("log.file", f"{log.file!r} is a directory")
    return dataclasses.replace(log, level=level)


def _check_client(client: ClientSettings, warnings: list[str]) -> ClientSettings:
    if client.ping_interval <= 0:
        raise ConfigError("client.ping_interval", "must be positive")
    if client.pong_timeout >= client.ping_interval:
        raise ConfigError(
            "client.pong_timeout",
            f"must be less than client.ping_interval ({client.ping_interval:g}s), "
            f"got {client.pong_timeout:g}s",
        )
    if client.insecure:
        warnings.append("client.insecure is true: connections are not authenticated (development only)")
    if client.insecure_skip_token_signature_verify:
        warnings.append(
            "client.insecure_skip_token_signature_verify is true: token signatures are NOT checked"
        )
    token = _check_token(client.token, "client.token", warnings)
    sub = client.subscription_token
    sub = _check_token(sub, "client.subscription_token", warnings)
    if sub.enabled and not sub.algorithms:
        raise ConfigError(
            "client.subscription_token.enabled",
            "is true but no verification key or JWKS endpoint is configured",
        )
    if not sub.enabled and sub.algorithms:
        warnings.append(
            "client.subscription_token: keys are set but enabled is false; subscription tokens are "
            "verified with client.token"
        )
    return dataclasses.replace(client, token=token, subscription_token=sub)


def _check_token(token: _T, path: str, warnings: list[str]) -> _T:
    _check_token_keys(token, path)
    for exact, regex in (("audience", "audience_regex"), ("issuer", "issuer_regex")):
        if getattr(token, exact) and getattr(token, regex):
            raise ConfigError(f"{path}.{regex}", f"set either {exact} or {regex}, not both")
        _compile(getattr(token, regex), f"{path}.{regex}")
    algorithms: tuple[str, ...] = ()
    if token.jwks_public_endpoint:
        if token.hmac_secret_key or token.rsa_public_key or token.ecdsa_public_key:
            warnings.append(f"{path}: static keys are not used because jwks_public_endpoint is set")
        algorithms = JWKS_ALGORITHMS
    else:
        if token.hmac_secret_key:
            algorithms += HMAC_ALGORITHMS
        if token.rsa_public_key:
            algorithms += RSA_ALGORITHMS
        if token.ecdsa_public_key:
            algorithms += ECDSA_ALGORITHMS
    return dataclasses.replace(token, algorithms=algorithms)


def _check_token_keys(token: TokenSettings, path: str) -> None:
    if token.hmac_previous_secret_key and not token.hmac_secret_key:
        raise ConfigError(f"{path}.hmac_previous_secret_key", "is set but hmac_secret_key is not")
    if token.hmac_previous_secret_key_valid_until and not token.hmac_previous_secret_key:
        raise ConfigError(
            f"{path}.hmac_previous_secret_key_valid_until", "is set but hmac_previous_secret_key is not"
        )
    for option, kind in (
        ("rsa_public_key", rsa.RSAPublicKey),
        ("ecdsa_public_key", ec.EllipticCurvePublicKey),
    ):
        pem = getattr(token, option)
        if not pem:
            continue
        try:
            key = load_pem_public_key(pem.encode())
        except ValueError:
            raise ConfigError(f"{path}.{option}", "is not a valid PEM public key") from None
        if not isinstance(key, kind):
            raise ConfigError(
                f"{path}.{option}", f"is a PEM public key of the wrong type ({type(key).__name__})"
            )
    endpoint = token.jwks_public_endpoint
    if endpoint:
        if "{{" in endpoint:
            raise ConfigError(f"{path}.jwks_public_endpoint", "templated JWKS endpoints are not supported")
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"{path}.jwks_public_endpoint", "must be an http:// or https:// URL")


def _compile(pattern: str, path: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(path, f"invalid regular expression: {exc}") from None


def _check_channel(channel: ChannelSettings) -> ChannelSettings:
    if not channel.namespace_boundary:
        raise ConfigError("channel.namespace_boundary", "must not be empty")
    without = _check_options(channel.without_namespace, "channel.without_namespace", channel.history_meta_ttl)
    namespaces: list[ChannelOptions] = []
    by_name: dict[str, ChannelOptions] = {}
    for ns in channel.namespaces:
        path = f"channel.namespaces[{ns.name}]"
        if not NAMESPACE_NAME.match(ns.name):
            raise ConfigError(f"{path}.name", "must match ^[-a-zA-Z0-9_]{2,}$")
        if ns.name in by_name:
            raise ConfigError(f"{path}.name", "duplicate namespace name")
        checked = _check_options(ns, path, channel.history_meta_ttl)
        namespaces.append(checked)
        by_name[ns.name] = checked
    for ns in (without, *namespaces):
        check_presence_prefixes(ns, by_name, channel.namespace_boundary)
    return dataclasses.replace(
        channel, without_namespace=without, namespaces=tuple(namespaces), by_name=MappingProxyType(by_name)
    )


def _check_options(opts: ChannelOptions, path: str, global_meta_ttl: float) -> ChannelOptions:
    if not opts.force_recovery_mode:  # Centrifugo's "" means the default, stream
        opts = dataclasses.replace(opts, force_recovery_mode="stream")
    if opts.force_recovery_mode not in RECOVERY_MODES:
        raise ConfigError(
            f"{path}.force_recovery_mode", f'must be "stream" or "cache", got {opts.force_recovery_mode!r}'
        )
    if opts.history_size and not opts.history_ttl:
        raise ConfigError(f"{path}.history_ttl", "must be set when history_size is set (history needs both)")
    if opts.history_ttl and not opts.history_size:
        raise ConfigError(f"{path}.history_size", "must be set when history_ttl is set (history needs both)")
    for option in ("force_recovery", "allow_recovery", "force_positioning", "allow_positioning"):
        if getattr(opts, option) and not opts.history_enabled:
            raise ConfigError(f"{path}.{option}", "needs history (history_size and history_ttl)")
    meta_ttl = opts.history_meta_ttl or global_meta_ttl
    if meta_ttl and opts.history_ttl > meta_ttl:
        source = "history_meta_ttl" if opts.history_meta_ttl else "channel.history_meta_ttl"
        raise ConfigError(
            f"{path}.history_ttl", f"must not exceed {source} ({meta_ttl:g}s), got {opts.history_ttl:g}s"
        )
    if not opts.subscription_type:  # Centrifugo's "" means the default, stream
        opts = dataclasses.replace(opts, subscription_type="stream")
    check_map(opts, path)
    pattern = _compile(opts.channel_regex, f"{path}.channel_regex")
    return dataclasses.replace(opts, history_meta_ttl_resolved=meta_ttl, channel_pattern=pattern)


def _check_engine(settings: Settings) -> None:
    engine = settings.engine
    if engine.type not in ENGINE_TYPES:
        raise ConfigError("engine.type", f'must be "memory" or "redis", got {engine.type!r}')
    redis = engine.redis
    if redis.sentinel_address and redis.cluster_address:
        raise ConfigError("engine.redis.cluster_address", "cannot be combined with sentinel_address")
    if redis.sentinel_address and not redis.sentinel_master_name:
        raise ConfigError("engine.redis.sentinel_master_name", "must be set when sentinel_address is set")
    if not (redis.address or redis.sentinel_address or redis.cluster_address) and engine.type == "redis":
        raise ConfigError("engine.redis.address", "must not be empty")
    for option in ("address", "sentinel_address", "cluster_address"):
        for item in getattr(redis, option):
            if not item.strip():
                raise ConfigError(f"engine.redis.{option}", "contains an empty address")
    if engine.type != "redis":
        return
    if not (redis.sentinel_address or redis.cluster_address):
        for item in redis.address:
            try:
                redis_address.parse(item)
            except redis_address.RedisAddressError as exc:
                raise ConfigError(
                    "engine.redis.address", f"{redis_address.redacted(item)!r}: {exc}"
                ) from None
    tls = redis.tls
    check_client(tls, "engine.redis.tls")
