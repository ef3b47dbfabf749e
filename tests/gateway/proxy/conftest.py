"""Fixtures: the proxy backend (HTTP + gRPC) and gateways configured to use it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.proxy.backend import Served, serve_backend
from tests.support import scaled
from tests.support.procs import GatewayProcess


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serve_backend() as s:
        yield s


def proxy_config(
    endpoint: Callable[[str], str], *, timeout: str = "", refresh: bool = False, **extra: Any
) -> dict[str, Any]:
    """Every proxy on, each kind at ``endpoint(kind)``; ``px:`` channels use the channel
    proxies, ``feed:`` channels are server-side only; RPC without namespace goes to the proxy.
    The proxies' ``timeout`` defaults to a generous scaled bound (a loaded machine's backend is
    slow, not failing); tests of the timeout itself pass theirs."""
    common: dict[str, Any] = {"timeout": timeout or f"{scaled(30):g}s", "http_headers": ["Cookie"], **extra}
    config: dict[str, Any] = {
        "prometheus": {"enabled": True},
        "client": {"proxy": {"connect": {"enabled": True, "endpoint": endpoint("connect"), **common}}},
        "channel": {
            "proxy": {
                "subscribe": {"endpoint": endpoint("subscribe"), **common},
                "publish": {"endpoint": endpoint("publish"), "include_connection_meta": True, **common},
                "sub_refresh": {"endpoint": endpoint("sub_refresh"), **common},
            },
            "namespaces": [
                {
                    "name": "px",
                    "subscribe_proxy_enabled": True,
                    "publish_proxy_enabled": True,
                    "sub_refresh_proxy_enabled": True,
                    "history_size": 10,
                    "history_ttl": "300s",
                },
                {"name": "feed"},
            ],
        },
        "rpc": {
            "proxy": {"endpoint": endpoint("rpc"), "include_connection_meta": True, **common},
            "without_namespace": {"proxy_enabled": True},
        },
    }
    if refresh:
        config["client"]["proxy"]["refresh"] = {"enabled": True, "endpoint": endpoint("refresh"), **common}
    return config


GatewayStarter = Callable[..., GatewayProcess]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def engine(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {}
    url = request.getfixturevalue("redis_url")
    return {"engine": {"type": "redis", "redis": {"address": url, "prefix": f"px-{uuid.uuid4().hex[:8]}"}}}


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[GatewayStarter]:
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any]) -> GatewayProcess:
        gw = GatewayProcess(config, tmp_path / f"gw{len(started)}").start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.terminate()
