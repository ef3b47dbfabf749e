"""Validation of a namespace's ``subscription_type`` and ``map`` section (Centrifugo v6.9's rules,
checked at load so a bad map namespace stops startup with the option's name).

Taskcast implements ``subscription_type`` ``stream``, ``map`` and the map presence types
``map_clients`` and ``map_users``, and client-side map writes by permission or through the map
publish / remove proxies (``check_map_proxies``: each enabled proxy names a configured one).
``shared_poll`` is checked where shared polling is implemented.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.config.schema import ChannelOptions, ChannelSettings, ConfigError, Settings
from gateway.config.sections.maps import MAP_MODES, MAP_SUBSCRIPTION_TYPES, MapSettings
from gateway.config.sections.proxy import ProxySettings, named_proxy

SUBSCRIPTION_TYPES = ("stream", "map", "map_clients", "map_users", "shared_poll")

CLIENT_KEYS = ("", "client_id", "user_id")
"""``map.client_key``: a client write's key is its own (""), its client ID, or its user ID."""


def check_map(opts: ChannelOptions, path: str) -> None:
    """Centrifugo's rules for ``subscription_type`` and ``map`` (validate.go).

    Raises:
        ConfigError: the first rule broken, naming the option.
    """
    kind = opts.subscription_type or "stream"
    if kind not in SUBSCRIPTION_TYPES:
        raise ConfigError(
            f"{path}.subscription_type", f"must be one of {', '.join(SUBSCRIPTION_TYPES)}, got {kind!r}"
        )
    _check_section(opts.map, f"{path}.map", kind)


def _check_section(m: MapSettings, where: str, kind: str) -> None:
    if m.mode and m.mode not in MAP_MODES:
        raise ConfigError(f"{where}.mode", f"must be one of {', '.join(MAP_MODES)}, got {m.mode!r}")
    if kind in MAP_SUBSCRIPTION_TYPES and not m.mode:
        raise ConfigError(f"{where}.mode", f"is required when subscription_type is {kind}")
    if kind in ("map_clients", "map_users") and m.mode == "persistent":
        raise ConfigError(
            f"{where}.mode", f'"persistent" is not allowed with {kind}: presence entries need a key_ttl'
        )
    if m.client_key not in CLIENT_KEYS:
        raise ConfigError(
            f"{where}.client_key", f'must be "", "client_id" or "user_id", got {m.client_key!r}'
        )
    if m.remove_client_on_unsubscribe and kind not in MAP_SUBSCRIPTION_TYPES:
        raise ConfigError(f"{where}.remove_client_on_unsubscribe", "needs a map subscription_type")
    _check_ttls(m, where)


def _check_ttls(m: MapSettings, where: str) -> None:
    if m.mode in ("ephemeral", "recoverable") and m.key_ttl <= 0:
        raise ConfigError(f"{where}.key_ttl", f'is required when map.mode is "{m.mode}"')
    if m.mode == "persistent" and m.key_ttl:
        raise ConfigError(
            f"{where}.key_ttl", 'must not be set when map.mode is "persistent" (keys do not expire)'
        )
    if m.mode == "ephemeral":
        for option in ("stream_size", "stream_ttl", "meta_ttl"):
            if getattr(m, option):
                raise ConfigError(f"{where}.{option}", 'must be 0 for map.mode "ephemeral" (no stream)')
    if m.stream_size < 0:
        raise ConfigError(f"{where}.stream_size", "must be non-negative")
    stream_ttl = m.stream_ttl or 60.0
    if m.meta_ttl and m.meta_ttl < stream_ttl:
        raise ConfigError(
            f"{where}.meta_ttl",
            f"must be >= map.stream_ttl ({stream_ttl:g}s): metadata must outlive the stream",
        )
    if m.meta_ttl and m.key_ttl and m.meta_ttl < m.key_ttl:
        raise ConfigError(
            f"{where}.meta_ttl", f"must be >= map.key_ttl ({m.key_ttl:g}s): metadata must outlive keys"
        )
    for option in (
        "default_page_size",
        "min_page_size",
        "max_page_size",
        "live_transition_max_publication_limit",
    ):
        if getattr(m, option) < 0:
            raise ConfigError(f"{where}.{option}", "must be non-negative")


def check_presence_prefixes(
    opts: ChannelOptions, namespaces: Mapping[str, ChannelOptions], boundary: str
) -> None:
    """``map_clients_presence_channel_prefix`` / ``map_users_presence_channel_prefix`` must name
    a map namespace (Centrifugo checks the namespace exists; its entries need a map).

    Raises:
        ConfigError: the prefix's namespace is missing or is not a map namespace.
    """
    where = f"channel.namespaces[{opts.name}]" if opts.name else "channel.without_namespace"
    for option in ("map_clients_presence_channel_prefix", "map_users_presence_channel_prefix"):
        prefix: str = getattr(opts, option)
        if not prefix:
            continue
        name, sep, _ = (prefix + "x").partition(boundary)
        target = namespaces.get(name) if sep else None
        if target is None or target.subscription_type not in MAP_SUBSCRIPTION_TYPES:
            raise ConfigError(f"{where}.{option}", f"{prefix!r} must name a map namespace (<name>{boundary})")


def check_map_proxies(
    settings: Settings,
    channel: ChannelSettings,
    opts: ChannelOptions,
    where: str,
    warnings: list[str],
    check_endpoint: Callable[[ProxySettings, str, list[str]], None],
) -> None:
    """``map.publish_proxy_enabled`` / ``map.remove_proxy_enabled``: the proxy named by
    ``map.*_proxy_name`` exists in ``proxies`` ("" / ``default``: ``channel.proxy.map_publish`` /
    ``map_remove``, whose endpoint ``check_endpoint`` checks), as Centrifugo refuses to start
    otherwise.

    Raises:
        ConfigError: a proxy name with no such proxy, or a default proxy without an endpoint.
    """
    for kind in ("map_publish", "map_remove"):
        option = kind.removeprefix("map_")
        if not getattr(opts.map, f"{option}_proxy_enabled"):
            continue
        name = getattr(opts.map, f"{option}_proxy_name")
        default = getattr(channel.proxy, kind)
        proxy = named_proxy(settings.proxies, default, name)
        if proxy is None:
            raise ConfigError(f"{where}.map.{option}_proxy_name", f"no proxy named {name!r} in proxies")
        if proxy is default:
            check_endpoint(proxy, f"channel.proxy.{kind}", warnings)
