"""Endpoint options (issue 13, defect 9): ``http_api.disabled`` and the ``handler_prefix`` of
``http_api``, ``prometheus`` and ``health`` load as validated settings; paths that would shadow
each other are refused by name. (Routing them is tested with the app, tests/gateway/test_api.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.endpoint_checks import served_endpoints
from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings


def load(tmp_path: Path, config: dict[str, Any]) -> tuple[Settings, list[str]]:
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    return load_settings(str(file), {})


def test_endpoint_defaults_are_centrifugos() -> None:
    s, _ = load_settings(None, {})
    assert s.http_api.disabled is False and s.http_api.handler_prefix == "/api"
    assert (s.prometheus.enabled, s.prometheus.handler_prefix) == (False, "/metrics")
    assert (s.health.enabled, s.health.handler_prefix) == (False, "/health")


def test_http_api_disabled_and_prefixes_are_options_not_unknown(tmp_path: Path) -> None:
    s, warnings = load(
        tmp_path,
        {
            "http_api": {"disabled": True, "handler_prefix": "/server-api"},
            "prometheus": {"enabled": True, "handler_prefix": "/internal/metrics"},
            "health": {"enabled": True, "handler_prefix": "/healthz"},
        },
    )

    assert warnings == []
    assert s.http_api.disabled and s.http_api.handler_prefix == "/server-api"
    assert s.prometheus.handler_prefix == "/internal/metrics"
    assert s.health.handler_prefix == "/healthz"
    assert "http_api" not in served_endpoints(s)
    assert served_endpoints(s)["health"] == "/healthz"


def test_endpoint_options_from_env() -> None:
    s, warnings = load_settings(
        None,
        {
            "CENTRIFUGO_HTTP_API_DISABLED": "true",
            "CENTRIFUGO_HEALTH_HANDLER_PREFIX": "/hc",
            "TASKCAST_PROMETHEUS_HANDLER_PREFIX": "/m",
        },
    )
    assert warnings == []
    assert s.http_api.disabled and s.health.handler_prefix == "/hc" and s.prometheus.handler_prefix == "/m"


@pytest.mark.parametrize(
    ("config", "option", "problem"),
    [
        ({"health": {"handler_prefix": "health"}}, "health.handler_prefix", "start with"),
        ({"prometheus": {"handler_prefix": "/metrics/"}}, "prometheus.handler_prefix", 'end with "/"'),
        ({"http_api": {"handler_prefix": "/"}}, "http_api.handler_prefix", 'end with "/"'),
        ({"http_api": {"disabled": "no"}}, "http_api.disabled", "true or false"),
        (
            {"health": {"enabled": True, "handler_prefix": "/connection/websocket"}},
            "health.handler_prefix",
            "already websocket.handler_prefix",
        ),
        (
            {"health": {"enabled": True}, "prometheus": {"enabled": True, "handler_prefix": "/health"}},
            "health.handler_prefix",
            "already prometheus.handler_prefix",
        ),
        (
            {"prometheus": {"enabled": True, "handler_prefix": "/api/metrics"}},
            "prometheus.handler_prefix",
            "under http_api.handler_prefix",
        ),
    ],
)
def test_bad_endpoint_options_are_refused_by_name(
    tmp_path: Path, config: dict[str, Any], option: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, config)
    assert info.value.option == option
    assert problem in info.value.problem


def test_paths_of_disabled_endpoints_may_be_reused(tmp_path: Path) -> None:
    s, _ = load(
        tmp_path,
        {
            "http_api": {"disabled": True},
            "prometheus": {"enabled": True, "handler_prefix": "/api/metrics"},
            "health": {"handler_prefix": "/connection/sse"},
        },
    )
    assert served_endpoints(s)["prometheus"] == "/api/metrics"
