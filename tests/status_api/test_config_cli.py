"""Configuration loading (file + env overrides, refusing bad options by name) and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from status_api import cli
from status_api.config import ConfigError, load_config
from tests.status_api.harness import TEST_CONFIG


def _write(tmp_path: Path, raw: dict[str, object], name: str = "c.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(raw))
    return p


def test_file_and_env_overrides(tmp_path: Path) -> None:
    p = _write(tmp_path, TEST_CONFIG)
    cfg = load_config(
        p,
        environ={
            "TASKCAST_STATUS_API_DATABASE__URL": "sqlite+aiosqlite:///x.db",
            "TASKCAST_STATUS_API_REALTIME__CONNECTION_TTL_SECONDS": "120",
            "TASKCAST_STATUS_API_REALTIME__SECRET": "12345678901234567890123456789012345",
        },
    )
    assert cfg.database.url == "sqlite+aiosqlite:///x.db"
    assert cfg.realtime.connection_ttl_seconds == 120
    assert cfg.realtime.secret == "12345678901234567890123456789012345"


def test_yaml_config(tmp_path: Path) -> None:
    import yaml

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(TEST_CONFIG))
    assert load_config(p, environ={}).user_auth.mode == "hs"


@pytest.mark.parametrize(
    ("raw", "env", "needle"),
    [
        ({**TEST_CONFIG, "databse": {}}, {}, "databse: unknown option"),
        ({**TEST_CONFIG, "http": {"port": "80"}}, {}, "http.port: expected int"),
        ({**TEST_CONFIG, "execution_token": {}}, {}, "execution_token.secret"),
        (TEST_CONFIG, {"TASKCAST_STATUS_API_USER_AUTH__MODE": "magic"}, "user_auth.mode"),
        (TEST_CONFIG, {"TASKCAST_STATUS_API_REALTIME__BOGUS": "1"}, "realtime.bogus: unknown option"),
    ],
)
def test_bad_options_are_refused_by_name(
    tmp_path: Path, raw: dict[str, object], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(_write(tmp_path, raw), environ=env)


def test_cli_init_db_is_idempotent_and_bad_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    raw = {**TEST_CONFIG, "database": {"url": f"sqlite+aiosqlite:///{db}"}}
    p = _write(tmp_path, raw)
    assert cli.main(["init-db", "--config", str(p)]) == 0
    assert "4 definition sets registered" in capsys.readouterr().out
    assert cli.main(["init-db", "--config", str(p)]) == 0
    assert "(0 changes); 0 definition sets" in capsys.readouterr().out
    eng = sa.create_engine(f"sqlite:///{db}")
    with eng.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM task_operation_definition")) == 8
    eng.dispose()
    bad = _write(tmp_path, {**TEST_CONFIG, "nope": 1}, "bad.json")
    assert cli.main(["serve", "--config", str(bad)]) == 2
    assert "nope: unknown option" in capsys.readouterr().err
