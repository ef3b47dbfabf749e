"""centrifuge-js over a gateway with ``websocket.compression`` on: the SDK's ``ws`` WebSocket
offers permessage-deflate by default, so the extension is negotiated and every push arrives
compressed (``compression_min_size`` 0) and is inflated by the SDK's socket, JSON and Protobuf;
a client message large enough for ``ws`` to compress it is inflated by the gateway."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import SECRET, GatewayFactory, Wire, standard_config
from tests.conformance.test_js_sdk import of, run_script, uid
from tests.support import mint_token

pytestmark = pytest.mark.node

WIRES = [Wire("json"), Wire("protobuf")]


@pytest.mark.parametrize("wire", WIRES, ids=[w.id for w in WIRES])
def test_js_sdk_negotiates_deflate_and_receives_every_push_intact(
    node_bin: str, gateway_factory: GatewayFactory, wire: Wire
) -> None:
    gw = gateway_factory(standard_config(websocket={"compression": True, "compression_level": 6}))
    channel = f"js-{uid()}"
    texts = ["", "short", "a task log line; " * 200, "".join(chr(0x400 + i % 200) for i in range(5000))]
    client_text = "published by the SDK; " * 100
    events = run_script(
        node_bin,
        "compression.mjs",
        gw,
        wire,
        token=mint_token(SECRET, "42"),
        channel=channel,
        texts=texts,
        clientText=client_text,
    )
    (opened,) = of(events, "ws_open")
    assert "permessage-deflate" in opened["extensions"]
    got = [(p["data"]["i"], p["data"]["text"]) for p in of(events, "publication", channel=channel)]
    assert got == [*enumerate(texts), ("client", client_text)]
