"""Validation of a namespace's ``subscription_type`` and ``map`` section (Centrifugo v6.9's rules,
checked at load so a bad map namespace stops startup with the option's name).

Taskcast implements ``subscription_type`` ``stream`` and ``map``; the map presence types
(``map_clients``, ``map_users``) and client-side map writes are refused with the reason
(``UNSUPPORTED_MAP``). ``shared_poll`` is checked where shared polling is implemented.
"""

from __future__ import annotations

from gateway.config.map_schema import MAP_MODES, MapSettings
from gateway.config.schema import ChannelOptions, ConfigError

SUBSCRIPTION_TYPES = ("stream", "map", "map_clients", "map_users", "shared_poll")

UNSUPPORTED_MAP = {
    "map_clients": "map presence (subscription type map_clients) is not implemented: use presence",
    "map_users": "map presence (subscription type map_users) is not implemented: use presence",
    "allow_publish_for_client": "clients cannot write map keys: write through the server API map_publish",
    "allow_publish_for_subscriber": "clients cannot write map keys: write through the server API map_publish",
    "allow_publish_for_anonymous": "clients cannot write map keys: write through the server API map_publish",
    "allow_remove_for_client": "clients cannot remove map keys: remove through the server API map_remove",
    "allow_remove_for_subscriber": "clients cannot remove map keys: remove through the server API map_remove",
    "allow_remove_for_anonymous": "clients cannot remove map keys: remove through the server API map_remove",
    "publish_proxy_enabled": "clients cannot write map keys, so there is nothing to proxy",
    "remove_proxy_enabled": "clients cannot remove map keys, so there is nothing to proxy",
    "remove_client_on_unsubscribe": "clients own no map keys (no client_key writes)",
}
"""What a map namespace may not enable, with what to do instead (docs/maps.md)."""


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
    if kind in UNSUPPORTED_MAP:
        raise ConfigError(f"{path}.subscription_type", UNSUPPORTED_MAP[kind])
    _check_section(opts.map, f"{path}.map", kind)


def _check_section(m: MapSettings, where: str, kind: str) -> None:
    if m.mode and m.mode not in MAP_MODES:
        raise ConfigError(f"{where}.mode", f"must be one of {', '.join(MAP_MODES)}, got {m.mode!r}")
    if kind == "map" and not m.mode:
        raise ConfigError(f"{where}.mode", "is required when subscription_type is map")
    for option, reason in UNSUPPORTED_MAP.items():
        if getattr(m, option, False):
            raise ConfigError(f"{where}.{option}", reason)
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
