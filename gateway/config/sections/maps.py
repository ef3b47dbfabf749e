"""The ``map`` section of a namespace (Centrifugo v6.8+ map subscriptions), as a frozen value.

Named and nested exactly like Centrifugo's ``MapConfig`` (``channel.namespaces[].map.*`` and
``channel.without_namespace.map.*``). Durations are float seconds. Only declares values:
gateway/config/map_checks.py validates them and gateway/maps/options.py resolves the defaults a
mode implies. Imports nothing from the rest of the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass

MAP_MODES = ("ephemeral", "recoverable", "persistent")
"""``map.mode`` values: ``ephemeral`` keeps keys with a TTL and no change stream (a subscriber
that reconnects re-reads the whole state); ``recoverable`` keeps keys with a TTL and a bounded
change stream; ``persistent`` keeps keys until removed, with a change stream."""

MAP_SUBSCRIPTION_TYPES = ("map", "map_clients", "map_users")
"""``subscription_type`` values that make a namespace's channels maps."""


@dataclass(frozen=True, slots=True)
class MapSettings:
    """``map``: how a map namespace stores and delivers keyed state (Centrifugo's MapConfig)."""

    mode: str = ""
    key_ttl: float = 0.0
    stream_size: int = 0
    stream_ttl: float = 0.0
    meta_ttl: float = 0.0
    remove_client_on_unsubscribe: bool = False
    client_key: str = ""
    allow_publish_for_client: bool = False
    allow_publish_for_subscriber: bool = False
    allow_publish_for_anonymous: bool = False
    allow_remove_for_client: bool = False
    allow_remove_for_subscriber: bool = False
    allow_remove_for_anonymous: bool = False
    publish_proxy_enabled: bool = False
    publish_proxy_name: str = ""
    remove_proxy_enabled: bool = False
    remove_proxy_name: str = ""
    default_page_size: int = 0
    min_page_size: int = 0
    max_page_size: int = 0
    live_transition_max_publication_limit: int = 0
    subscribe_catch_up_timeout: float = 0.0
