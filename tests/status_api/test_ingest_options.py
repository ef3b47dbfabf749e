"""The group-commit options documented in docs/status-api.md (``ingest.batch_max``,
``ingest.batch_runners``, ``ingest.commit_delay_ms``) are accepted from the file and the environment
and reach the service; they used to be refused as unknown options; values out of range are refused
naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from status_api.app import build_components
from status_api.config import ConfigError, load_config

SECRET = "ingest-options-secret-0123456789abcdef"
BASE = {
    "internal_auth": {"mode": "jwt", "jwt_secret": SECRET},
    "execution_token": {"secret": SECRET},
    "user_auth": {"mode": "hs", "secret": SECRET},
    "realtime": {"secret": SECRET},
    "reconciler": {"enabled": False},
}


def _file(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "status-api.json"
    database = {"url": f"sqlite+aiosqlite:///{tmp_path}/x.db"}
    path.write_text(json.dumps({**BASE, "database": database, **extra}))
    return path


async def test_ingest_options_from_file_and_environment_reach_the_service(tmp_path: Path) -> None:
    path = _file(tmp_path, ingest={"batch_max": 1, "batch_runners": 2})
    cfg = load_config(path, environ={"TASKCAST_STATUS_API_INGEST__BATCH_RUNNERS": "5"})
    assert (cfg.ingest.batch_max, cfg.ingest.batch_runners) == (1, 5)
    comp = build_components(cfg)
    try:
        assert comp.service.settings.ingest_batch_max == 1
        assert comp.service.settings.ingest_batch_runners == 5
    finally:
        await comp.engine.dispose()


async def test_commit_delay_from_file_and_environment_reaches_the_group_commit(tmp_path: Path) -> None:
    cfg = load_config(_file(tmp_path, ingest={"commit_delay_ms": 3}), environ={})
    assert cfg.ingest.commit_delay_ms == 3
    env = {"TASKCAST_STATUS_API_INGEST__COMMIT_DELAY_MS": "2.5"}
    comp = build_components(load_config(_file(tmp_path), environ=env))
    try:
        assert comp.service.ingestor.group is not None
        assert comp.service.ingestor.group.delay == 0.0025
    finally:
        await comp.engine.dispose()


def test_defaults_are_the_documented_ones(tmp_path: Path) -> None:
    cfg = load_config(_file(tmp_path), environ={})
    assert (cfg.ingest.batch_max, cfg.ingest.batch_runners, cfg.ingest.commit_delay_ms) == (64, 3, 10)


@pytest.mark.parametrize("option", ["batch_max", "batch_runners"])
def test_a_value_below_one_is_refused_by_name(tmp_path: Path, option: str) -> None:
    with pytest.raises(ConfigError, match=f"ingest.{option}"):
        load_config(_file(tmp_path, ingest={option: 0}), environ={})


@pytest.mark.parametrize("value", [-1, 100.5])
def test_a_commit_delay_out_of_range_is_refused_by_name(tmp_path: Path, value: float) -> None:
    with pytest.raises(ConfigError, match=r"ingest\.commit_delay_ms"):
        load_config(_file(tmp_path, ingest={"commit_delay_ms": value}), environ={})
