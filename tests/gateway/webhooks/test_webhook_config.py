"""The ``webhooks`` list and the ``occupancy`` section as loaded (gateway/config/webhook_*.py):
durations, defaults, refusals naming the option, secrets masked in the logged configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings

HOOK: dict[str, Any] = {"name": "backend", "url": "https://backend.example/hooks", "secret": "hook-s3cret"}


def load(tmp_path: Path, config: dict[str, Any]) -> tuple[Settings, list[str]]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_settings(str(path), {})


def test_defaults_and_durations(tmp_path: Path) -> None:
    settings, warnings = load(
        tmp_path,
        {"webhooks": [{**HOOK, "timeout": "750ms"}], "occupancy": {"vacated_grace": "2s"}},
    )
    hook = settings.webhooks[0]
    assert (hook.name, hook.timeout, hook.queue_size, hook.max_batch_size) == ("backend", 0.75, 10000, 100)
    assert hook.events == () and hook.namespaces == ()
    assert settings.occupancy.vacated_grace == 2.0 and settings.occupancy.node_ttl == 15.0
    assert warnings == []


@pytest.mark.parametrize(
    ("change", "option"),
    [
        ({"url": "ftp://x"}, "webhooks[backend].url"),
        ({"secret": ""}, "webhooks[backend].secret"),
        ({"events": ["connect", "nope"]}, "webhooks[backend].events"),
        ({"namespaces": ["missing"]}, "webhooks[backend].namespaces"),
        ({"queue_size": 0}, "webhooks[backend].queue_size"),
        ({"timeout": "0s"}, "webhooks[backend].timeout"),
        ({"retry_min_backoff": "2s", "retry_max_backoff": "1s"}, "webhooks[backend].retry_max_backoff"),
    ],
)
def test_a_bad_webhook_stops_startup_naming_the_option(
    tmp_path: Path, change: dict[str, Any], option: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, {"webhooks": [{**HOOK, **change}]})
    assert info.value.option == option
    assert "hook-s3cret" not in str(info.value)


def test_node_ttl_must_outlast_three_sweeps(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, {"occupancy": {"node_ttl": "2s", "sweep_interval": "1s"}})
    assert info.value.option == "occupancy.node_ttl"


def test_namespaces_name_existing_ones_and_plain_http_is_warned(tmp_path: Path) -> None:
    config = {
        "channel": {"namespaces": [{"name": "task_detail"}]},
        "webhooks": [{**HOOK, "url": "http://backend.example/h", "namespaces": ["task_detail", ""]}],
    }
    settings, warnings = load(tmp_path, config)
    assert settings.webhooks[0].namespaces == ("task_detail", "")
    assert warnings == ["webhooks[backend].url: plain http:// sends lifecycle events unencrypted"]


def test_the_secret_is_masked_in_the_logged_configuration(tmp_path: Path) -> None:
    settings, _ = load(tmp_path, {"webhooks": [HOOK]})
    text = json.dumps(settings.redacted())
    assert "hook-s3cret" not in text and "https://backend.example/hooks" in text
