"""The gateway's /metrics under Centrifugo's names, as Centrifugo exports them: Go's client adds no
``_total`` to a counter and writes no ``_created`` sample, so dashboards and alerts written for
Centrifugo (``centrifugo_node_messages_sent_count``, ``centrifugo_client_recover``…) match.
prometheus_client adds both; ``gateway.metrics.exposition`` writes Centrifugo's counters itself."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import CENTRIFUGO_TOTAL_COUNTERS, Metrics


def _scrape() -> str:
    metrics = Metrics("test")
    metrics.messages_sent("ch", 3)
    metrics.server_disconnects.labels("3000").inc()
    metrics.recover.labels("yes", "", "no").inc(2)
    metrics.api_errors.labels("http", "publish", 'a "quoted"\\value').inc()
    metrics.commands_decoded.labels("websocket").inc()
    return metrics.render().decode()


def test_centrifugo_counters_carry_centrifugo_names() -> None:
    text = _scrape()
    lines = text.splitlines()
    assert 'centrifugo_node_messages_sent_count{channel_namespace="",type="publication"} 3.0' in lines
    assert 'centrifugo_client_num_server_disconnects{code="3000"} 1.0' in lines
    assert "# TYPE centrifugo_client_recover counter" in lines
    error = 'error="a \\"quoted\\"\\\\value"'
    assert f'centrifugo_api_command_errors_total{{{error},method="publish",protocol="http"}} 1.0' in lines
    centrifugo = [line for line in lines if line.startswith("centrifugo_")]
    counters = (
        "centrifugo_node_messages_sent_count",
        "centrifugo_client_recover",
        "centrifugo_api_command_errors",
    )
    assert not [line for line in centrifugo if line.startswith(tuple(f"{c}_created" for c in counters))]
    names = {line.split("{")[0].split(" ")[0] for line in centrifugo}
    assert {n for n in names if n.endswith("_total")} <= {f"{n}_total" for n in CENTRIFUGO_TOTAL_COUNTERS}
    # Taskcast's own counters keep Prometheus' conventions
    assert 'taskcast_gateway_client_commands_decoded_total{transport="websocket"} 1.0' in lines


def test_the_scrape_parses_as_one_family_per_name() -> None:
    families = {f.name: f for f in text_string_to_metric_families(_scrape())}
    sent = families["centrifugo_node_messages_sent_count"]
    assert sent.type == "counter"
    assert [s.value for s in sent.samples if s.labels.get("type") == "publication"] == [3.0]


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus) not installed")
def test_promtool_accepts_the_scrape() -> None:
    run = subprocess.run(
        ["promtool", "check", "metrics"], input=_scrape(), capture_output=True, text=True, timeout=60
    )
    # promtool lints naming conventions (counters "should have _total"): Centrifugo's names are
    # the contract here, so only errors of the format fail the test.
    assert "error while linting" not in run.stdout + run.stderr, run.stdout + run.stderr
