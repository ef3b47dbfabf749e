"""The alert rules and the dashboard only use metrics that the code really exports, and cover
the eight alert priorities of seed §14.3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*ROOT.glob("gateway/**/*.py"), *ROOT.glob("status_api/**/*.py"), *ROOT.glob("relay/**/*.py")]
EXPORTED = "\n".join(p.read_text() for p in SOURCES)
METRIC = re.compile(r"\b((?:centrifugo|taskcast)_[a-z0-9_]+)")


def _exported(name: str) -> bool:
    """A metric is exported when its name (or, for prometheus-client, its name without the
    namespace and the _total/_bucket/_count/_sum suffix) is written in the code."""
    candidates = {name, re.sub(r"_(bucket|count|sum|total)$", "", name)}
    for candidate in list(candidates):
        short = re.sub(r"^(centrifugo|taskcast_status_api|taskcast_relay)_", "", candidate)
        candidates.add(short)
    return any(
        candidate in EXPORTED or re.search(rf'["_]{re.escape(candidate)}(_total|_seconds)?"', EXPORTED)
        for candidate in candidates
        if "_" in candidate
    )


def test_alert_rules_use_exported_metrics_and_cover_the_seed_priorities():
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    for rule in alerts:
        assert {"alert", "expr", "labels", "annotations"} <= rule.keys()
        for name in METRIC.findall(rule["expr"]):
            assert _exported(name), f"{rule['alert']} uses unknown metric {name}"
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
    } <= names


def test_dashboard_queries_use_exported_metrics():
    dashboard = json.loads((ROOT / "deploy/grafana/taskcast-dashboard.json").read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in METRIC.findall(target["expr"]):
                assert _exported(name), f"panel {panel['title']!r} uses unknown metric {name}"


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
