"""The alert rules and the dashboard only use metrics that the code really exports, and cover
the eight alert priorities of seed §14.3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
METRIC = re.compile(r"\b((?:centrifugo|taskcast)_[a-z0-9_]+)")


def test_alert_rules_are_complete_and_cover_the_seed_priorities():
    """Shape only: tests/operations/test_alerts.py checks every selected name and label value
    against real scrapes and runs promtool over them."""
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    for rule in alerts:
        assert {"alert", "expr", "labels", "annotations"} <= rule.keys()
    names = {rule["alert"] for rule in alerts}
    assert {
        "TaskcastOutboxBacklogGrowing",
        "TaskcastCommitToPublishSlow",
        "TaskcastRecoveryFailuresSpike",
        "TaskcastTaskRunningTooLong",
        "TaskcastLockContentionOrConflicts",
        "TaskcastTerminalStateNotPublished",
        "TaskcastOperationRejectionsSpike",
        "TaskcastEngineUnavailable",
        "TaskcastDatabaseUnavailable",
        "TaskcastRelayDeadRows",
    } <= names


def _status_api_exposition() -> set[str]:
    """Every sample name the Status API's registry renders, with one of each labelled child set."""
    from prometheus_client import generate_latest

    from status_api.metrics import StatusMetrics
    from status_api.telemetry import COUNTS, SAMPLES, ClientReport

    m = StatusMetrics()
    m.client_report(ClientReport("websocket", dict.fromkeys(COUNTS, 1), {k: (1.0,) for k in SAMPLES}))
    m.telemetry_rejected("VALUE_OUT_OF_RANGE")
    m.subscribe_proxy("subscribe", "granted")
    m.event("OP", "accepted")
    m.outbox_oldest_pending.labels("10").set(0)
    m.requests.labels("/x", "200").inc()
    m.duration.labels("/x").observe(0.1)
    text = generate_latest(m.registry).decode()
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def test_client_and_status_api_metrics_in_rules_and_dashboard_exist_exactly() -> None:
    """The Status API's names are checked against its real exposition (not a substring of the code)."""
    exposed = _status_api_exposition()
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    dashboard = json.loads((ROOT / "deploy/grafana/taskcast-dashboard.json").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {
        n
        for e in exprs
        for n in METRIC.findall(e)
        if n.startswith(("taskcast_state_", "taskcast_client_", "taskcast_status_api_"))
    }
    assert {"taskcast_state_commit_to_visible_seconds_bucket", "taskcast_client_connects_total"} <= used
    missing = sorted(n for n in used if n not in exposed)
    assert not missing, f"not exported by the Status API: {missing}"


def test_the_seed_alert_commit_ok_publish_late_and_the_client_side_alerts_exist() -> None:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    by_name = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    assert (
        "publish latency is beyond the SLO"
        in by_name["TaskcastCommitToPublishSlow"]["annotations"]["summary"]
    )
    for name in (
        "TaskcastCommitToVisibleSlow",
        "TaskcastClientRecoveryFailuresSpike",
        "TaskcastClientConnectFailures",
    ):
        assert name in by_name and by_name[name]["for"], name
    titles = {
        p["title"]
        for p in json.loads((ROOT / "deploy/grafana/taskcast-dashboard.json").read_text())["panels"]
    }
    assert "Commit → visible p50 / p99 (client-reported)" in titles
    ids = [
        p["id"] for p in json.loads((ROOT / "deploy/grafana/taskcast-dashboard.json").read_text())["panels"]
    ]
    assert len(ids) == len(set(ids))
