"""Prometheus rule tests over real scrapes: ``promtool`` (Debian's ``prometheus`` package) is the
judge, the exposition text of running services is the input.

:func:`scrape_series` turns one ``/metrics`` body into promtool ``input_series`` that hold the
scraped value constant over the test's window (a snapshot of a steady state: counters do not
move, so every ``rate`` is 0); :func:`run_rule_test` writes the test document and runs
``promtool test rules``; :func:`check_rules` runs ``promtool check rules``.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

#: Minutes of input every series covers (the alerts' longest ``for`` is 10 m).
WINDOW_MINUTES = 30
#: When the alerts are evaluated: past every ``for`` of the rules.
EVAL_TIME = "20m"


def promtool() -> str:
    """The promtool binary (installed by scripts/services.sh ensure_packages)."""
    path = shutil.which("promtool")
    assert path, "promtool is missing: scripts/services.sh installs Debian's prometheus package"
    return path


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class Scrape:
    """One ``/metrics`` body of one service: the target labels Prometheus would add, and the
    families as the parser reads them."""

    job: str
    instance: str
    text: str
    families: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(self.text)}

    def samples(self) -> Iterable[tuple[str, dict[str, str], float]]:
        for family in self.families.values():
            for sample in family.samples:
                yield sample.name, dict(sample.labels), float(sample.value)


def scrape_series(scrape: Scrape) -> list[dict[str, str]]:
    """promtool ``input_series`` of one scrape, every value constant over :data:`WINDOW_MINUTES`
    (non-finite values are left out: promtool's series notation has no +Inf value)."""
    out = []
    for name, labels, value in scrape.samples():
        if not math.isfinite(value):
            continue
        labels = {**labels, "job": scrape.job, "instance": scrape.instance}
        selector = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
        out.append({"series": f"{name}{{{selector}}}", "values": f"{value:g}+0x{WINDOW_MINUTES}"})
    return out


def alert_names(rule_file: Path) -> list[str]:
    rules = yaml.safe_load(rule_file.read_text())
    return [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]


def run_rule_test(
    rule_file: Path,
    scrapes: list[Scrape],
    firing: dict[str, list[dict[str, Any]]],
    workdir: Path,
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` over ``scrapes``: at :data:`EVAL_TIME` exactly the alerts in
    ``firing`` (name → promtool ``exp_alerts``) fire, every other alert of ``rule_file`` none."""
    unknown = set(firing) - set(alert_names(rule_file))
    assert not unknown, f"not alerts of {rule_file.name}: {sorted(unknown)}"
    series = [s for scrape in scrapes for s in scrape_series(scrape)]
    doc = {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": EVAL_TIME, "alertname": name, "exp_alerts": firing.get(name, [])}
                    for name in alert_names(rule_file)
                ],
            }
        ],
    }
    path = workdir / "alerts-test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )


def check_rules(rule_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=60
    )
