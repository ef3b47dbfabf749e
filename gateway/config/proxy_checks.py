"""Validation of the proxies to the application backend (Centrifugo refuses to start on the
same): every enabled proxy resolves to a configured endpoint (``proxies`` entries by name,
``client.proxy.*``, ``channel.proxy.*``, ``rpc.proxy``), its scheme, timeout, TLS and status
transforms are valid, and the subscribe stream proxy is a gRPC one used alone. Pure, like
gateway/config/checks.py, which calls it; raises ``ConfigError`` naming the option.
"""

from __future__ import annotations

from gateway.config.map_checks import check_map_proxies
from gateway.config.schema import ChannelOptions, ChannelSettings, ConfigError, Settings
from gateway.config.sections.proxy import ProxySettings, named_proxy
from gateway.config.tls import check_client
from gateway.protocol import codes

__all__ = ["check_proxies", "check_proxy_endpoint"]

_PROXY_SCHEMES = ("http://", "https://", "grpc://")


def check_proxy_endpoint(proxy: ProxySettings, path: str, warnings: list[str]) -> None:
    """One proxy at ``path``: its endpoint scheme and timeout, its TLS, its status transforms;
    a static header the client can replace by forwarding its own is warned about."""
    if not proxy.endpoint.startswith(_PROXY_SCHEMES):
        raise ConfigError(
            f"{path}.endpoint",
            f"must be an http://, https:// or grpc:// address, got {proxy.endpoint!r}",
        )
    if proxy.timeout <= 0:
        raise ConfigError(f"{path}.timeout", "must be positive")
    forwarded = {h.lower() for h in (*proxy.http_headers, *proxy.grpc_metadata)}
    for option, statics in (("http.static_headers", proxy.http.static_headers),
                            ("grpc.static_metadata", proxy.grpc.static_metadata)):  # fmt: skip
        for name in sorted(k for k in statics if k.lower() in forwarded):
            warnings.append(
                f"{path}.{option}: {name!r} is also forwarded from the client (http_headers / "
                "grpc_metadata), and a forwarded header wins: the client can replace this value"
            )
    check_client(proxy.http.tls, f"{path}.http.tls")
    check_client(proxy.grpc.tls, f"{path}.grpc.tls")
    for index, t in enumerate(proxy.http.status_to_code_transforms):
        where = f"{path}.http.status_to_code_transforms[{index}]"
        if not 100 <= t.status_code <= 599:
            raise ConfigError(f"{where}.status_code", f"must be an HTTP status code, got {t.status_code}")
        if bool(t.to_error.code) == bool(t.to_disconnect.code):
            raise ConfigError(where, "set exactly one of to_error.code and to_disconnect.code")
        d = t.to_disconnect
        if d.code and not codes.is_close_code(d.code):
            raise ConfigError(f"{where}.to_disconnect.code", f"must be in 3000-4999, got {d.code}")
        if len(d.reason.encode()) > codes.MAX_CLOSE_REASON_BYTES:
            raise ConfigError(f"{where}.to_disconnect.reason", "must fit in 123 bytes of UTF-8")
        if not 0 <= t.to_error.code <= codes.MAX_ERROR_CODE:
            raise ConfigError(f"{where}.to_error.code", "must fit in 32 bits")


def _check_stream_proxy(opts: ChannelOptions, proxy: ProxySettings, where: str) -> None:
    """Centrifugo's rules for ``subscribe_stream_proxy_enabled``: a gRPC proxy, and no
    subscribe / publish / sub_refresh proxy in the same namespace."""
    if not proxy.endpoint.startswith("grpc://"):
        raise ConfigError(
            f"{where}.subscribe_stream_proxy_enabled", "the subscribe stream proxy must be a grpc:// endpoint"
        )
    if opts.subscribe_proxy_enabled or opts.publish_proxy_enabled or opts.sub_refresh_proxy_enabled:
        raise ConfigError(
            f"{where}.subscribe_stream_proxy_enabled",
            "can't use subscribe stream proxy together with subscribe, publish or sub refresh proxies",
        )


def check_proxies(settings: Settings, channel: ChannelSettings, warnings: list[str]) -> None:
    """Every enabled proxy resolves to a configured endpoint (Centrifugo fails to start too)."""
    for named in settings.proxies:
        check_proxy_endpoint(named, f"proxies[{named.name}]", warnings)
    for kind, cp in (("connect", settings.client.proxy.connect), ("refresh", settings.client.proxy.refresh)):
        if cp.enabled:
            check_proxy_endpoint(cp, f"client.proxy.{kind}", warnings)
    kinds = ("subscribe", "publish", "sub_refresh", "subscribe_stream")
    for opts in (channel.without_namespace, *channel.namespaces):
        where = f"channel.namespaces[{opts.name}]" if opts.name else "channel.without_namespace"
        for kind in kinds:
            if not getattr(opts, f"{kind}_proxy_enabled"):
                continue
            name = getattr(opts, f"{kind}_proxy_name")
            proxy = named_proxy(settings.proxies, getattr(channel.proxy, kind), name)
            if proxy is None:
                raise ConfigError(f"{where}.{kind}_proxy_name", f"no proxy named {name!r} in proxies")
            if proxy is getattr(channel.proxy, kind):
                check_proxy_endpoint(proxy, f"channel.proxy.{kind}", warnings)
            if kind == "subscribe_stream":
                _check_stream_proxy(opts, proxy, where)
        check_map_proxies(settings, channel, opts, where, warnings, check_proxy_endpoint)
    rpc = settings.rpc
    for ropts in (rpc.without_namespace, *rpc.namespaces):
        if not ropts.proxy_enabled:
            continue
        where = f"rpc.namespaces[{ropts.name}]" if ropts.name else "rpc.without_namespace"
        proxy = named_proxy(settings.proxies, rpc.proxy, ropts.proxy_name)
        if proxy is None:
            raise ConfigError(f"{where}.proxy_name", f"no proxy named {ropts.proxy_name!r} in proxies")
        if proxy is rpc.proxy:
            check_proxy_endpoint(proxy, "rpc.proxy", warnings)
