"""Fixtures for the conformance suite: real gateway processes driven by the official clients
(centrifuge-js in Node, centrifuge-python, cent). Configs use Centrifugo v6 option names."""

from __future__ import annotations

import copy
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway_proc import GatewayProcess

SECRET = "conformance-secret-0123456789abcdefghij"

HISTORY = {"history_size": 10, "history_ttl": "300s", "force_recovery": True}

STANDARD_CONFIG: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}},
    "prometheus": {"enabled": True},
    "channel": {
        "without_namespace": {
            **HISTORY,
            "presence": True,
            "allow_subscribe_for_client": True,
            "allow_publish_for_subscriber": True,
            "allow_history_for_subscriber": True,
            "allow_presence_for_subscriber": True,
        },
        "namespaces": [
            # No allow_subscribe_for_client: a subscription token is required (else 103).
            {"name": "private", **HISTORY, "allow_publish_for_subscriber": True},
            {
                "name": "small",
                "history_size": 2,
                "history_ttl": "300s",
                "force_recovery": True,
                "allow_subscribe_for_client": True,
            },
            {"name": "detail", "allow_subscribe_for_client": True, "subscription_limit_per_connection": 2},
            # Server-side channels come from the token's `channels` claim.
            {"name": "feed", **HISTORY},
            {"name": "smallfeed", "history_size": 2, "history_ttl": "300s", "force_recovery": True},
        ],
    },
}

JS_DIR = Path(__file__).parent / "js"


def standard_config(**overrides: Any) -> dict[str, Any]:
    config = copy.deepcopy(STANDARD_CONFIG)
    config.update(overrides)
    return config


GatewayFactory = Callable[..., GatewayProcess]


@pytest.fixture(scope="session", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def engine(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every conformance scenario runs on the memory engine and on the Redis engine."""
    if request.param == "memory":
        return {}
    url = request.getfixturevalue("redis_url")
    prefix = f"conformance-{uuid.uuid4().hex[:8]}"
    return {"engine": {"type": "redis", "redis": {"address": url, "prefix": prefix}}}


def _with_engine(config: dict[str, Any], engine: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config.update(copy.deepcopy(engine))
    return config


@pytest.fixture
def gateway_factory(tmp_path: Path, engine: dict[str, Any]) -> Iterator[GatewayFactory]:
    """``gateway_factory(config)`` starts a gateway process on the parametrized engine; all are
    stopped at teardown."""
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any] | None = None) -> GatewayProcess:
        base = config if config is not None else standard_config()
        gw = GatewayProcess(_with_engine(base, engine), tmp_path / "gw").start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.terminate()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory, engine: dict[str, Any]) -> Iterator[GatewayProcess]:
    """One shared gateway per engine with the standard config (tests use unique channel names)."""
    gw = GatewayProcess(_with_engine(standard_config(), engine), tmp_path_factory.mktemp("shared-gw")).start()
    yield gw
    gw.terminate()
    assert gw.api_key not in gw.log_text()


@pytest.fixture(scope="session")
def node_bin() -> str:
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "centrifuge").is_dir():
        pytest.fail("node or tests/conformance/js/node_modules missing: run `bash scripts/bootstrap.sh`")
    return node
