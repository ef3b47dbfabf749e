"""centrifuge-js (npm ``centrifuge`` 5.x in Node 20) over its ``sse`` and ``http_stream``
transports against a real gateway: the connect goes in the stream request, every later command
through ``POST /emulation``, every reply and push comes back on the stream (PROTOCOL.md §4.2–4.6).
The scripts are tests/conformance/js/emulation_*.mjs."""

from __future__ import annotations

import pytest

from tests.support import mint_token
from tests.transports.conftest import SECRET, of, run_js, uid

pytestmark = pytest.mark.node

TRANSPORTS = ["sse", "http_stream"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_js_connect_subscribe_publish_receive_history(node_bin, gateway, transport):
    channel, feed = f"js-{uid()}", f"feed:{uid()}"
    events = run_js(
        node_bin,
        "emulation_basic.mjs",
        gateway,
        transport=transport,
        token=mint_token(SECRET, "42", channels=[feed]),
        channel=channel,
        feed=feed,
    )
    assert [e["transport"] for e in of(events, "connected")] == [transport]
    assert of(events, "connecting")[0]["code"] == 0  # the initial connect, nothing else
    assert len(of(events, "connecting")) == 1
    assert [p["data"]["n"] for p in of(events, "publication")] == [1, 2, 3]
    assert [p["offset"] for p in of(events, "publication")] == [1, 2, 3]
    assert of(events, "publication")[0]["info"]["user"] == "42"
    assert of(events, "server_publication")[0]["data"] == {"n": 1, "from": "api"}
    assert of(events, "history")[0]["publications"] == [1, 2]
    assert of(events, "client_publish")[0]["outcome"] == "ok"
    assert of(events, "state")[0]["state"] == "connected"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("server_side", [False, True], ids=["client-side", "server-side"])
def test_js_reconnect_recovers_missed_publications(node_bin, gateway, transport, server_side):
    user = f"u-{uid()}"
    channel = f"feed:{uid()}" if server_side else f"rec-{uid()}"
    events = run_js(
        node_bin,
        "recovery.mjs",
        gateway,
        transport=transport,
        token=mint_token(SECRET, user, channels=[channel] if server_side else []),
        user=user,
        channel=channel,
        before=2,
        away=3,
        serverSide=server_side,
    )
    prefix = "server_" if server_side else ""
    assert [e["code"] for e in of(events, "connecting")][-1] == 3011
    away = of(events, "published_away")
    assert [p["offset"] for p in away] == [3, 4, 5]
    assert all(p["state"] == "connecting" for p in away)
    first, second = of(events, prefix + "subscribed")
    assert first["wasRecovering"] is False
    assert second["wasRecovering"] is True and second["recovered"] is True
    pubs = of(events, prefix + "publication")
    assert [p["data"]["n"] for p in pubs] == [1, 2, 3, 4, 5]
    assert [p["offset"] for p in pubs] == [1, 2, 3, 4, 5]
    assert [e["transport"] for e in of(events, "connected")] == [transport, transport]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_js_expiring_token_refreshed_through_emulation(node_bin, gateway, transport):
    events = run_js(
        node_bin,
        "refresh.mjs",
        gateway,
        transport=transport,
        token=mint_token(SECRET, "42", exp_in=-10),
        # refresh.mjs mints with these lifetimes when the SDK asks (a pre-minted 3 s token can
        # expire while a loaded machine starts node); ``tokens`` is its fallback.
        secret=SECRET,
        user="42",
        expiries=[3, 120],
        tokens=[mint_token(SECRET, "42", exp_in=3), mint_token(SECRET, "42", exp_in=120)],
        channel=f"js-{uid()}",
    )
    assert [e["call"] for e in of(events, "get_token")] == [1, 2]
    assert [e["code"] for e in of(events, "disconnected")] == [0]  # only the final disconnect()
    assert [e["code"] for e in of(events, "client_error")] == [109]  # the first, expired token
    assert of(events, "state")[0] == {"event": "state", "state": "connected", "connects": 1}
