"""Map namespace options: Centrifugo's validation rules (a bad combination stops startup with the
option's name) and the defaults a mode implies (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError
from gateway.config.sections.maps import MapSettings
from gateway.maps.options import resolve
from gateway.metrics import Metrics
from gateway.proxy.caller import Proxies


def load(*namespaces: dict[str, Any]) -> None:
    load_settings(None, {"TASKCAST_CHANNEL_NAMESPACES": json.dumps(list(namespaces))})


def ns(name: str = "mm", kind: str = "map", **map_opts: Any) -> dict[str, Any]:
    return {"name": name, "subscription_type": kind, "map": map_opts}


@pytest.mark.parametrize(
    ("namespaces", "option"),
    [
        ([ns()], "channel.namespaces[mm].map.mode"),
        ([ns(mode="sometimes")], "channel.namespaces[mm].map.mode"),
        ([ns(mode="persistent", key_ttl="1s")], "channel.namespaces[mm].map.key_ttl"),
        ([ns(mode="recoverable")], "channel.namespaces[mm].map.key_ttl"),
        ([ns(mode="ephemeral", key_ttl="1s", stream_size=5)], "channel.namespaces[mm].map.stream_size"),
        ([ns(mode="recoverable", key_ttl="60s", meta_ttl="10s")], "channel.namespaces[mm].map.meta_ttl"),
        ([ns(kind="map_clients", mode="persistent")], "channel.namespaces[mm].map.mode"),
        ([ns(mode="persistent", publish_proxy_enabled=True)], "channel.proxy.map_publish.endpoint"),
        ([ns(mode="persistent", remove_proxy_enabled=True)], "channel.proxy.map_remove.endpoint"),
        (
            [ns(mode="persistent", remove_proxy_enabled=True, remove_proxy_name="nope")],
            "channel.namespaces[mm].map.remove_proxy_name",
        ),
        ([ns(mode="persistent", client_key="session")], "channel.namespaces[mm].map.client_key"),
        ([ns(kind="lists", mode="persistent")], "channel.namespaces[mm].subscription_type"),
        (
            [{"name": "room", "map_clients_presence_channel_prefix": "plain:"}, {"name": "plain"}],
            "channel.namespaces[room].map_clients_presence_channel_prefix",
        ),
        (
            [{"name": "room", "map_users_presence_channel_prefix": "nowhere:"}],
            "channel.namespaces[room].map_users_presence_channel_prefix",
        ),
    ],
)
def test_bad_map_namespaces_stop_startup_naming_the_option(
    namespaces: list[dict[str, Any]], option: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(*namespaces)
    assert caught.value.option == option


def test_valid_map_namespaces_load() -> None:
    load(
        ns(mode="persistent"),
        ns("eph", mode="ephemeral", key_ttl="5s"),
        ns("pres", kind="map_clients", mode="recoverable", key_ttl="60s"),
        {"name": "room", "map_clients_presence_channel_prefix": "pres:"},
    )


def test_map_proxies_resolve_to_the_default_or_a_named_proxy() -> None:
    """``map.*_proxy_name`` "" is ``channel.proxy.map_publish`` / ``map_remove``; another name is
    a ``proxies`` entry (Centrifugo v6.8 starts with either; it refused nothing here before)."""
    env = {
        "TASKCAST_CHANNEL_NAMESPACES": json.dumps(
            [
                ns(
                    mode="persistent",
                    publish_proxy_enabled=True,
                    remove_proxy_enabled=True,
                    remove_proxy_name="be",
                )
            ]
        ),
        "TASKCAST_CHANNEL_PROXY_MAP_PUBLISH_ENDPOINT": "http://127.0.0.1:1/map_publish",
        "TASKCAST_PROXIES": json.dumps([{"name": "be", "endpoint": "grpc://127.0.0.1:1"}]),
    }
    settings, warnings = load_settings(None, env)
    assert settings.channel.proxy.map_publish.endpoint == "http://127.0.0.1:1/map_publish"
    assert not [w for w in warnings if "map" in w]
    proxies = Proxies(settings, Metrics("test"))
    assert proxies.any  # a map proxy alone makes the gateway ask the backend
    opts = settings.channel_options("mm:x")
    assert opts is not None
    publish, remove = proxies.for_map("map_publish", opts), proxies.for_map("map_remove", opts)
    assert publish is not None and publish.name == "default" and publish.protocol == "http"
    assert remove is not None and remove.name == "be" and remove.protocol == "grpc"


def test_the_defaults_a_mode_implies() -> None:
    recoverable = resolve(MapSettings(mode="recoverable", key_ttl=600))
    assert (recoverable.stream_size, recoverable.stream_ttl, recoverable.meta_ttl) == (100, 60.0, 600.0)
    assert recoverable.has_stream and recoverable.has_expiry
    persistent = resolve(MapSettings(mode="persistent", stream_size=7))
    assert (persistent.stream_size, persistent.meta_ttl, persistent.key_ttl) == (7, 0.0, 0.0)
    ephemeral = resolve(MapSettings(mode="ephemeral", key_ttl=5))
    assert not ephemeral.has_stream and ephemeral.stream_size == 0
    pages = resolve(MapSettings(mode="persistent", min_page_size=5, max_page_size=20, default_page_size=10))
    assert [pages.page_size(n) for n in (0, 1, 15, 99)] == [10, 5, 15, 20]
    assert pages.live_transition_limit == 20
