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
