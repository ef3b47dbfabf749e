"""Fixtures for the conformance suite: real gateway processes driven by the official clients
(centrifuge-js in Node, centrifuge-python, cent). Configs use Centrifugo v6 option names.

Every SDK scenario runs on both engines (``engine``) and over every client protocol the SDK
speaks (``js_wire`` / ``py_wire``): the scenarios are written once, a :class:`Wire` says how the
SDK connects and how payloads look on it (JSON values, or their JSON bytes over Protobuf)."""

from __future__ import annotations

import copy
import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import GatewayProcess

SECRET = "conformance-secret-0123456789abcdefghij"

HISTORY = {"history_size": 10, "history_ttl": "300s", "force_recovery": True}

STANDARD_CONFIG: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}},
    "prometheus": {"enabled": True},
    # centrifuge-js's Protobuf build also runs over HTTP-streaming (+ /emulation) (``js_wire``).
    "http_stream": {"enabled": True},
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
            # Join/leave pushes for subscribers asking for them, presence readable by subscribers.
            {
                "name": "joinleave",
                "presence": True,
                "join_leave": True,
                "allow_subscribe_for_client": True,
                "allow_presence_for_subscriber": True,
            },
        ],
    },
}

JS_DIR = Path(__file__).parent / "js"


def standard_config(**overrides: Any) -> dict[str, Any]:
    config = copy.deepcopy(STANDARD_CONFIG)
    config.update(overrides)
    return config


GatewayFactory = Callable[..., GatewayProcess]


@dataclass(frozen=True)
class Wire:
    """One way an SDK talks to the gateway: ``protocol`` is ``json`` or ``protobuf``,
    ``transport`` is ``websocket`` or ``http_stream`` (centrifuge-js only)."""

    protocol: str = "json"
    transport: str = "websocket"

    @property
    def id(self) -> str:
        return f"{self.protocol}-{self.transport}"

    @property
    def protobuf(self) -> bool:
        return self.protocol == "protobuf"

    def encode(self, value: Any) -> Any:
        """What an SDK publishes for the JSON value ``value``: the value itself over JSON, its
        JSON bytes over Protobuf (the SDKs take bytes there)."""
        return json.dumps(value, separators=(",", ":")).encode() if self.protobuf else value

    def decode(self, data: Any) -> Any:
        """The JSON value an SDK received: Protobuf SDKs hand out the bytes of the JSON the
        publisher sent (server API ``data``, a JSON client's publish)."""
        if self.protobuf and isinstance(data, bytes | bytearray):
            return json.loads(data) if data else None
        return data

    def js_args(self, gw: GatewayProcess) -> dict[str, Any]:
        """The ``url`` / ``emulationEndpoint`` / ``protocol`` arguments of a js/ script."""
        if self.transport == "websocket":
            return {"url": gw.ws_url, "protocol": self.protocol}
        endpoint = f"{gw.url}/connection/{self.transport}"
        return {
            "url": [{"transport": self.transport, "endpoint": endpoint}],
            "emulationEndpoint": f"{gw.url}/emulation",
            "protocol": self.protocol,
        }


# centrifuge-js: JSON over WebSocket (its JSON emulation transports run in tests/transports),
# Protobuf (`centrifuge/build/protobuf`) over WebSocket and HTTP-streaming (SSE is JSON-only).
JS_WIRES = [Wire("json"), Wire("protobuf"), Wire("protobuf", "http_stream")]
# centrifuge-python: WebSocket only, ``use_protobuf=False/True``.
PY_WIRES = [Wire("json"), Wire("protobuf")]


@pytest.fixture(params=JS_WIRES, ids=[w.id for w in JS_WIRES])
def js_wire(request: pytest.FixtureRequest) -> Wire:
    """Each centrifuge-js scenario runs over every protocol/transport the SDK offers."""
    wire: Wire = request.param
    return wire


@pytest.fixture(params=PY_WIRES, ids=[w.id for w in PY_WIRES])
def py_wire(request: pytest.FixtureRequest) -> Wire:
    """Each centrifuge-python scenario runs over JSON and over Protobuf."""
    wire: Wire = request.param
    return wire


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
    stopped at teardown. On Redis each gets its own key prefix, so a factory gateway (or one still
    listed in the node registry after its test) never shows up in the shared gateway's ``info``,
    ``channels`` or presence."""
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any] | None = None) -> GatewayProcess:
        base = config if config is not None else standard_config()
        own = copy.deepcopy(engine)
        if "engine" in own:  # its own Redis prefix: not a node of the shared gateway's cluster
            own["engine"]["redis"]["prefix"] += f"-{uuid.uuid4().hex[:6]}"
        gw = GatewayProcess(_with_engine(base, own), tmp_path / "gw").start()
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
