"""centrifuge-js (npm ``centrifuge`` 5.x) against a real gateway process, over every wire the SDK
offers (``js_wire``): JSON over WebSocket (``ws``), and its Protobuf build over WebSocket and
HTTP-streaming.

Each scenario is a Node script in ``js/`` that prints one JSON event per line and exits by
itself; the test starts the script with a (scaled) timeout and asserts on the events. Payloads
are JSON values in the events whatever the wire (``lib.mjs`` decodes Protobuf bytes).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.conformance.conftest import JS_DIR, SECRET, GatewayFactory, Wire, standard_config
from tests.support import GatewayProcess, mint_token, scaled, time_scale

pytestmark = pytest.mark.node

SCRIPT_TIMEOUT_SECONDS = 30


def run_script(
    node_bin: str, script: str, gw: GatewayProcess, wire: Wire, **args: Any
) -> list[dict[str, Any]]:
    """Run ``js/<script>`` against ``gw`` over ``wire``; its events, failing unless it printed "done"."""
    payload = {
        **wire.js_args(gw),
        "apiUrl": gw.api_url,
        "apiKey": gw.api_key,
        "timeScale": time_scale(),
        **args,
    }
    proc = subprocess.run(
        [node_bin, script, json.dumps(payload)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=scaled(SCRIPT_TIMEOUT_SECONDS),
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}\ngateway log:\n{gw.log_text()[-3000:]}"
    assert proc.returncode == 0, detail
    assert events and events[-1]["event"] == "done", detail
    return events


def of(events: list[dict[str, Any]], name: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]


def uid() -> str:
    return uuid.uuid4().hex[:10]


def test_js_connect_server_side_channel_subscription_token_publish_broadcast(node_bin, gateway, js_wire):
    plain, private, feed = f"js-{uid()}", f"private:{uid()}", f"feed:{uid()}"
    token = mint_token(SECRET, "42", channels=[feed], info={"name": "alice"})
    events = run_script(
        node_bin,
        "basic.mjs",
        gateway,
        js_wire,
        token=token,
        plain=plain,
        private=private,
        feed=feed,
        subTokens={private: mint_token(SECRET, "42", channel=private)},
    )
    assert of(events, "connected")[0]["transport"] == js_wire.transport
    assert of(events, "get_sub_token", channel=private)
    assert of(events, "server_subscribed", channel=feed)[0]["recoverable"] is True
    sub = of(events, "subscribed", channel=plain)[0]
    assert sub["recoverable"] is True and sub["recovered"] is False
    assert sub["streamPosition"]["offset"] == 0 and sub["streamPosition"]["epoch"]
    assert of(events, "subscribed", channel=private)

    pubs = of(events, "publication", channel=plain)
    assert [p["data"]["n"] for p in pubs] == [1, 2, 3]
    assert [p["offset"] for p in pubs] == [1, 2, 3]
    assert pubs[0]["info"]["user"] == "42"
    assert pubs[0]["info"]["connInfo"] == {"name": "alice"}
    assert "info" not in pubs[1]  # published through the server API
    assert of(events, "api_published")[0]["result"]["offset"] == 2
    assert [p["data"]["n"] for p in of(events, "publication", channel=private)] == [3]
    broadcast = of(events, "api_broadcast")[0]["result"]["responses"]
    assert [r["result"]["offset"] for r in broadcast] == [3, 1]
    server_pubs = of(events, "server_publication", channel=feed)
    assert [(p["data"], p["offset"]) for p in server_pubs] == [({"n": 1, "from": "api"}, 1)]
    history = of(events, "history")[0]
    assert [p["offset"] for p in history["publications"]] == [1, 2, 3]
    assert history["offset"] == 3 and history["epoch"] == sub["streamPosition"]["epoch"]


def test_js_refusals_quota_and_foreign_subscription_token(node_bin, gateway, js_wire):
    a, b, c, other = (f"detail:{uid()}" for _ in range(4))
    foreign = f"private:{uid()}"
    events = run_script(
        node_bin,
        "subscribe_each.mjs",
        gateway,
        js_wire,
        token=mint_token(SECRET, "42"),
        subs=[
            {"channel": f"private:{uid()}"},  # no token: 103
            {"channel": f"nope:{uid()}"},  # unknown namespace: 102
            {"channel": a},
            {"channel": b},
            {"channel": c},  # third detail channel: 106 DETAIL_SUBSCRIPTION_LIMIT
            {"channel": foreign, "token": mint_token(SECRET, "43", channel=foreign)},  # foreign user
            {"channel": other},
        ],
    )
    outcomes = of(events, "outcome")
    assert [(o["kind"], o.get("code")) for o in outcomes] == [
        ("unsubscribed", 103),
        ("unsubscribed", 102),
        ("subscribed", None),
        ("subscribed", None),
        ("unsubscribed", 106),
        ("disconnected", 3500),
    ]
    assert outcomes[4]["reason"] == "DETAIL_SUBSCRIPTION_LIMIT"
    assert len(of(events, "connecting")) == 1  # 3500 is terminal: no reconnect


def test_js_channel_limit_counts_server_side_subscriptions(
    node_bin, gateway_factory: GatewayFactory, js_wire
):
    config = standard_config()
    config["client"] = {**config["client"], "channel_limit": 2}
    gw = gateway_factory(config)
    events = run_script(
        node_bin,
        "subscribe_each.mjs",
        gw,
        js_wire,
        token=mint_token(SECRET, "42", channels=[f"feed:{uid()}"]),
        subs=[{"channel": f"js-{uid()}"}, {"channel": f"js-{uid()}"}],
    )
    outcomes = of(events, "outcome")
    assert [(o["kind"], o.get("code")) for o in outcomes] == [("subscribed", None), ("unsubscribed", 106)]


@pytest.mark.parametrize(
    ("namespace", "server_side", "recovered"),
    [("", False, True), ("small:", False, False), ("feed:", True, True), ("smallfeed:", True, False)],
    ids=[
        "recovered",
        "more-than-history-size",
        "server-side-recovered",
        "server-side-more-than-history-size",
    ],
)
def test_js_reconnect_recovers_missed_publications(
    node_bin, gateway, js_wire, namespace, server_side, recovered
):
    channel = f"{namespace}rec-{uid()}"
    events = run_script(
        node_bin,
        "recovery.mjs",
        gateway,
        js_wire,
        token=mint_token(SECRET, "42", channels=[channel] if server_side else []),
        user="42",
        channel=channel,
        before=2,
        away=3,
        expectRecovered=recovered,
        serverSide=server_side,
    )
    prefix = "server_" if server_side else ""
    assert [e["code"] for e in of(events, "connecting")][-1] == 3011
    away_pubs = of(events, "published_away")
    assert [p["offset"] for p in away_pubs] == [3, 4, 5]
    assert all(p["state"] == "connecting" for p in away_pubs)
    first, second = of(events, prefix + "subscribed")
    assert first["wasRecovering"] is False
    assert second["wasRecovering"] is True
    assert second["recovered"] is recovered
    pubs = of(events, prefix + "publication")
    if recovered:
        assert [p["data"]["n"] for p in pubs] == [1, 2, 3, 4, 5]
        assert [p["offset"] for p in pubs] == [1, 2, 3, 4, 5]
    else:
        assert [p["data"]["n"] for p in pubs] == [1, 2]
        assert second["streamPosition"]["offset"] == 5


def test_js_expired_token_refreshed_through_get_token(node_bin, gateway, js_wire):
    channel = f"js-{uid()}"
    events = run_script(
        node_bin,
        "refresh.mjs",
        gateway,
        js_wire,
        token=mint_token(SECRET, "42", exp_in=-10),
        secret=SECRET,
        user="42",
        expiries=[3, 120],  # minted when the SDK asks (a loaded machine can't expire them early)
        channel=channel,
    )
    assert [e["call"] for e in of(events, "get_token")] == [1, 2]
    assert [e["code"] for e in of(events, "disconnected")] == [0]  # only the final disconnect()
    assert [e["code"] for e in of(events, "client_error")] == [109]  # the first, expired token
    assert of(events, "state")[0] == {"event": "state", "state": "connected", "connects": 1}


def test_js_wrong_signature_disconnects_3500_without_reconnect_loop(node_bin, gateway, js_wire):
    events = run_script(
        node_bin,
        "bad_token.mjs",
        gateway,
        js_wire,
        token=mint_token("not-the-secret-0123456789abcdefghijkl", "42"),
        quietMs=1500,
    )
    assert of(events, "disconnected")[0]["code"] == 3500
    summary = of(events, "summary")[0]
    assert summary["connecting"] == 1 and summary["state"] == "disconnected"


def test_js_join_leave_and_presence(node_bin, gateway, js_wire):
    channel = f"joinleave:{uid()}"
    events = run_script(
        node_bin,
        "join_leave.mjs",
        gateway,
        js_wire,
        token=mint_token(SECRET, "42", info={"name": "alice"}),
        otherToken=mint_token(SECRET, "43", info={"name": "bob"}),
        otherUser="43",
        channel=channel,
    )
    (join,) = [e for e in of(events, "join", channel=channel) if e["info"]["user"] == "43"]
    assert join["info"]["connInfo"] == {"name": "bob"}
    (leave,) = [e for e in of(events, "leave", channel=channel) if e["info"]["user"] == "43"]
    assert leave["info"]["client"] == join["info"]["client"]
    assert of(events, "presence")[0]["users"] == ["42", "43"]
    assert of(events, "presence_stats")[0] == {"event": "presence_stats", "numClients": 2, "numUsers": 2}
