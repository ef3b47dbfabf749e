"""centrifuge-js against a real gateway process, on both engines: fossil delta compression
(``delta: 'fossil'``, ``deltaStats()``: delta payloads received, the exact published data
reconstructed, also across a recovery, whose publications and the first live one are full) and
the publication tags filter (``tagsFilter``)."""

from __future__ import annotations

import copy

from tests.conformance.conftest import SECRET, GatewayFactory, Wire, standard_config
from tests.conformance.test_js_sdk import of, run_script, uid
from tests.support import mint_token

DELTA_NAMESPACE = {
    "name": "delta",
    "history_size": 50,
    "history_ttl": "300s",
    "force_recovery": True,
    "allow_subscribe_for_client": True,
    "allowed_delta_types": ["fossil"],
    "delta_publish": True,
}


def expected_state(n: int) -> dict[str, object]:
    steps = [
        {"name": f"step {i}", "state": "done" if i < n else "pending", "note": "x" * 30} for i in range(30)
    ]
    return {"task": "delta-task", "version": n, "steps": steps}


def test_js_fossil_delta_reconstructs_exact_data_across_recovery(
    node_bin, gateway_factory: GatewayFactory, js_wire: Wire
):
    # Every wire: JSON (the delta travels as a JSON string), Protobuf over WebSocket and
    # HTTP-streaming (a binary fossil delta, Publication.delta = true).
    config = copy.deepcopy(standard_config())
    config["channel"]["namespaces"].append(DELTA_NAMESPACE)
    gw = gateway_factory(config)
    channel = f"delta:{uid()}"
    events = run_script(
        node_bin,
        "delta.mjs",
        gw,
        js_wire,
        token=mint_token(SECRET, "42"),
        user="42",
        channel=channel,
        before=4,
        away=3,
        after=4,
    )
    pubs = of(events, "publication")
    assert [p["data"] for p in pubs] == [expected_state(n) for n in range(1, 12)]
    assert [p["offset"] for p in pubs] == list(range(1, 12))
    before, recovered, after = (
        of(events, "stats", phase="before")[0],
        of(events, "stats", phase="recovered")[0],
        of(events, "stats", phase="after")[0],
    )
    # First publication after subscribe full, then deltas.
    assert before["numFullPayloads"] == 1 and before["numDeltaPayloads"] == 3
    # Recovered publications come full.
    assert recovered["numFullPayloads"] == 1 + 3 and recovered["numDeltaPayloads"] == 3
    # After recovery: the first live one full, the rest deltas.
    assert after["numFullPayloads"] == 1 + 3 + 1 and after["numDeltaPayloads"] == 3 + 3
    assert after["compressionRatio"] > 0.5
    _first, second = of(events, "subscribed")
    assert second["recovered"] is True and second["wasRecovering"] is True


def test_js_tags_filter_delivers_only_matching_publications(
    node_bin, gateway_factory: GatewayFactory, js_wire: Wire
):
    config = copy.deepcopy(standard_config())
    config["channel"]["namespaces"].append(
        {"name": "tagged", "allow_subscribe_for_client": True, "allow_tags_filter": True}
    )
    gw = gateway_factory(config)
    events = run_script(
        node_bin,
        "tags_filter.mjs",
        gw,
        js_wire,
        token=mint_token(SECRET, "42"),
        channel=f"tagged:{uid()}",
    )
    assert [p["data"]["n"] for p in of(events, "publication")] == [2, 4, 5, "end"]
