"""deploy/prometheus/alerts.yml judged by promtool over what the running services export.

A Status API, a gateway and a relay run as real processes on MariaDB. A healthy run (every row
PUBLISHED) is scraped and fires no alert; then a relay publishing to a gateway that knows none of
the task namespaces dead-letters a failed task's rows (TASK_FAILED included: error 102 is
permanent), and the scrape of that state fires the DEAD-row alert and nothing else. Every metric
name and label value an alert or a dashboard panel selects is checked against these scrapes.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from status_api.storage.database import create_engine
from status_api.storage.tables import task_event_log, task_outbox
from taskcast.demo.runner import Pace, TaskRun
from taskcast.demo.scenarios import SCENARIOS
from taskcast.demo.status_client import StatusApi
from tests.helpers.mysql_db import schema_database
from tests.helpers.promtool import Scrape, check_rules, run_rule_test
from tests.status_api.harness import SERVICE_SECRET, TEST_CONFIG
from tests.support import ROOT, GatewayProcess, RelayProcess, StatusApiProcess, free_port, scaled, wait_until

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(scaled(300))]

RULES = ROOT / "deploy/prometheus/alerts.yml"
DASHBOARD = ROOT / "deploy/grafana/taskcast-dashboard.json"
API_KEY = "alerts-test-api-key"
HMAC = "alerts-test-hmac-secret-0123456789"


def _gateway_config(namespaces: bool) -> dict[str, Any]:
    """deploy/gateway.json on the memory engine; without ``namespaces`` every task channel is
    unknown to it (error 102, which the relay treats as permanent)."""
    cfg = json.loads((ROOT / "deploy/gateway.json").read_text())
    cfg.pop("engine")
    cfg["client"]["token"]["hmac_secret_key"] = HMAC
    cfg["http_api"]["key"] = API_KEY
    cfg["shutdown"] = {"timeout": "2s"}
    if not namespaces:
        cfg["channel"]["namespaces"] = []
    return cfg


@dataclass
class Pipeline:
    api: StatusApiProcess
    gateways: dict[str, GatewayProcess]
    db_url: str
    workdir: Path

    def relay(self, name: str, gateway: str) -> RelayProcess:
        cfg = {
            "relay_id": name,
            "database_url": self.db_url,
            "gateway_api_url": self.gateways[gateway].api_url,
            "gateway_api_key": API_KEY,
            "poll_interval_seconds": 0.1,
            "stats_interval_seconds": 0.2,
            "metrics_host": "127.0.0.1",
            "metrics_port": free_port(),
        }
        return RelayProcess(cfg, self.workdir)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, mysql_url: str) -> Iterator[Pipeline]:
    workdir = tmp_path_factory.mktemp("alerts")
    with schema_database(mysql_url, "alerts") as db_url:
        api = StatusApiProcess({**TEST_CONFIG, "database": {"url": db_url}}, workdir / "api")
        gateways = {
            "known": GatewayProcess(_gateway_config(namespaces=True), workdir / "gw-known"),
            "unknown": GatewayProcess(_gateway_config(namespaces=False), workdir / "gw-unknown"),
        }
        started: list[Any] = []
        try:
            for proc in (api, *gateways.values()):
                started.append(proc.start())
            yield Pipeline(api, gateways, db_url, workdir)
        finally:
            for proc in reversed(started):
                proc.terminate()


async def _run(api_url: str, scenario: str) -> str:
    task_id = f"alerts-{uuid.uuid4().hex[:12]}"
    async with httpx.AsyncClient(base_url=api_url, timeout=scaled(10)) as client:
        run = TaskRun(
            StatusApi(client, SERVICE_SECRET), SCENARIOS[scenario](task_id), "t1/u1", Pace(speed=50)
        )
        await run.run()
    return task_id


async def _outbox(db_url: str, task_id: str) -> dict[str, str]:
    """``{event_type@version: outbox status}`` of one task's rows (user channel only)."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(task_event_log.c.event_type, task_outbox.c.aggregate_version, task_outbox.c.status)
                .join(
                    task_event_log,
                    (task_event_log.c.task_id == task_outbox.c.aggregate_id)
                    & (task_event_log.c.task_version == task_outbox.c.aggregate_version),
                )
                .where(task_outbox.c.aggregate_id == task_id, task_outbox.c.channel.like("task_user:%"))
            )
            return {f"{e}@{v}": s for e, v, s in rows}
    finally:
        await engine.dispose()


async def _scrape(pipeline: Pipeline, relay: RelayProcess) -> list[Scrape]:
    targets = [
        ("taskcast-status-api", f"{pipeline.api.url}/metrics"),
        *((f"taskcast-gateway-{n}", f"{g.url}/metrics") for n, g in pipeline.gateways.items()),
        ("taskcast-relay", relay.health_url),
    ]
    async with httpx.AsyncClient(timeout=scaled(10)) as http:
        bodies = await asyncio.gather(*(http.get(url) for _, url in targets))
    for body in bodies:
        body.raise_for_status()
    return [
        Scrape(job, url.split("/")[2], body.text) for (job, url), body in zip(targets, bodies, strict=True)
    ]


def _relay_gauge(scrape: Scrape, status: str) -> float:
    family = scrape.families["taskcast_relay_outbox_rows"]
    return sum(s.value for s in family.samples if s.labels.get("status") == status)


@pytest.fixture(scope="module")
def scrapes(pipeline: Pipeline) -> dict[str, list[Scrape]]:
    """The two scrapes every test here judges: ``healthy`` and ``dead``."""

    async def both() -> dict[str, list[Scrape]]:
        out = {}
        relay = pipeline.relay("relay-known", "known").start()
        try:
            task_id = await _run(pipeline.api.url, "document_ok")
            await wait_until(
                lambda: _all(pipeline.db_url, task_id, "PUBLISHED"), 60, "every row PUBLISHED", every=0.1
            )

            async def settled() -> list[Scrape] | None:
                got = await _scrape(pipeline, relay)
                published = _relay_gauge(got[-1], "published")
                return got if published and not _relay_gauge(got[-1], "pending") else None

            out["healthy"] = await wait_until(settled, 30, "relay gauges refreshed", every=0.2)
        finally:
            relay.terminate()
        relay = pipeline.relay("relay-unknown", "unknown").start()
        try:
            task_id = await _run(pipeline.api.url, "document_rejected")
            await wait_until(lambda: _all(pipeline.db_url, task_id, "DEAD"), 60, "every row DEAD", every=0.1)
            rows = await _outbox(pipeline.db_url, task_id)
            assert any(k.startswith("TASK_FAILED@") and v == "DEAD" for k, v in rows.items()), rows

            async def dead() -> list[Scrape] | None:
                got = await _scrape(pipeline, relay)
                return got if _relay_gauge(got[-1], "dead") >= len(rows) else None

            out["dead"] = await wait_until(dead, 30, "relay gauges show the DEAD rows", every=0.2)
        finally:
            relay.terminate()
        return out

    return asyncio.run(both())


async def _all(db_url: str, task_id: str, status: str) -> bool:
    rows = await _outbox(db_url, task_id)
    return bool(rows) and set(rows.values()) == {status}


def test_promtool_accepts_the_rules() -> None:
    result = check_rules(RULES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_healthy_pipeline_fires_no_alert(scrapes: dict[str, list[Scrape]], tmp_path: Path) -> None:
    result = run_rule_test(RULES, scrapes["healthy"], {}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_dead_task_failed_row_fires_the_dead_row_alert_and_nothing_else(
    scrapes: dict[str, list[Scrape]], tmp_path: Path
) -> None:
    dead = _relay_gauge(scrapes["dead"][-1], "dead")
    firing = {
        "TaskcastRelayDeadRows": [
            {
                "exp_labels": {"severity": "warning"},
                "exp_annotations": {
                    "summary": f"{dead:g} outbox rows are DEAD (taskcast relay dead list)",
                    "runbook": "docs/operations.md#dead-rows",
                },
            }
        ]
    }
    result = run_rule_test(RULES, scrapes["dead"], firing, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# --- every selector against the exposition ------------------------------------------------------

SELECTOR = re.compile(r"\b((?:centrifugo|taskcast)_[a-zA-Z0-9_]+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}

#: Label values an alert selects that a steady healthy or DEAD-row scrape does not show, each with
#: the line of code that exports it (file, regex). Anything else must be seen in a real scrape.
CONDITIONAL_VALUES: dict[tuple[str, str, str], tuple[str, str]] = {
    ("centrifugo_client_recover", "recovered", "no"): ("gateway/positions.py", r'recover\.labels\("no"'),
    ("centrifugo_client_num_server_disconnects", "code", "3008"): (
        "gateway/protocol/codes.py",
        r"DISCONNECT_SLOW = Disconnect\(3008,",
    ),
    ("taskcast_status_api_events_total", "outcome", "rejected"): (
        "status_api/http.py",
        r'metrics\.event\(label, "rejected"',
    ),
    ("taskcast_status_api_requests_total", "status", "503"): ("status_api/http.py", r"UNAVAILABLE: 503"),
    ("taskcast_client_recoveries_total", "recovered", "all"): ("status_api/metrics.py", r'\("all",\)'),
    ("taskcast_client_recoveries_total", "recovered", "false"): ("status_api/metrics.py", r'\("false",\)'),
    ("taskcast_client_connects_total", "outcome", "attempt"): ("status_api/metrics.py", r'\("attempt",\)'),
    ("taskcast_client_connects_total", "outcome", "success"): ("status_api/metrics.py", r'\("success",\)'),
}


def _exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    out = [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        out += [(f"panel {panel['title']!r}", t["expr"]) for t in panel["targets"]]
    return out


def _exposed(scrapes: list[Scrape]) -> tuple[set[str], dict[tuple[str, str], set[str]]]:
    """Sample names (a family's declared ones included, even with no sample yet) and, per
    (sample name, label), the values seen."""
    names: set[str] = set()
    values: dict[tuple[str, str], set[str]] = {}
    for scrape in scrapes:
        # a counter is exported under the name its TYPE line declares: ``x_total`` from
        # prometheus_client, ``x`` for Centrifugo's counters (Go's client adds no suffix)
        counters = set(re.findall(r"^# TYPE (\S+) counter$", scrape.text, re.M))
        for family in scrape.families.values():
            base = family.name
            if family.type == "counter":
                names |= counters & {base, base + "_total"}
            else:
                names |= {base, *(base + s for s in SUFFIXES.get(family.type, ()))}
            for sample in family.samples:
                names.add(sample.name)
                for label, value in sample.labels.items():
                    values.setdefault((sample.name, label), set()).add(value)
    return names, values


def test_every_selected_metric_and_label_value_is_exported(scrapes: dict[str, list[Scrape]]) -> None:
    names, values = _exposed(scrapes["healthy"] + scrapes["dead"])
    problems = []
    for where, expr in _exprs():
        for name, braces in SELECTOR.findall(expr):
            if name not in names:
                problems.append(f"{where}: {name} is not exported")
                continue
            for label, op, value in MATCHER.findall(braces or ""):
                if op != "=" or label == "le":
                    continue
                seen = values.get((name, label), set())
                if value in seen:
                    continue
                source, evidence = CONDITIONAL_VALUES.get((name, label, value), ("", ""))
                if evidence and re.search(evidence, (ROOT / source).read_text()):
                    continue
                problems.append(f"{where}: {name}{{{label}={value!r}}} never exported (seen: {sorted(seen)})")
    assert not problems, "\n".join(problems)
