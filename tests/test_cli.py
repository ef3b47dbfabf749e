"""``taskcast`` console script: ``--help`` (one line per subcommand), ``--version``, and
Centrifugo's helper commands with its flags, output and exit codes (taskcast/centrifugo_cli.py),
run as real processes. A token printed by ``gentoken`` is accepted by a running gateway."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from websockets.asyncio.client import connect

from gateway.config.loading import load_settings
from taskcast.centrifugo_cli import HELP, go_duration
from tests.support import GatewayProcess, scaled

SECRET = "cli-secret-0123456789abcdefghijklmnopq"


def taskcast(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("CENTRIFUGO_", "TASKCAST_HTTP"))}
    return subprocess.run(
        [sys.executable, "-m", "taskcast", *args],
        cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=scaled(60), check=False,
    )  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"client": {"token": {"hmac_secret_key": SECRET}}}))
    return path


def test_help_lists_every_subcommand_with_a_description() -> None:
    out = taskcast("--help")
    assert out.returncode == 0
    for name in ("up", "demo", "gateway", "status-api", "relay", *HELP):
        line = next(line for line in out.stdout.splitlines() if line.strip().startswith(name + " "))
        assert len(line.split(maxsplit=1)[1]) > 10, line
    assert "--version" in out.stdout


def test_version_and_dash_dash_version() -> None:
    for args in (["version"], ["--version"]):
        out = taskcast(*args)
        assert out.returncode == 0
        assert re.fullmatch(r"Taskcast v\d+\.\d+\.\d+ \(Python version: 3\.\d+\.\d+\)\n", out.stdout)


def test_gentoken_output_claims_and_quiet(config: Path) -> None:
    out = taskcast("gentoken", "-c", str(config), "-u", "42")
    assert out.returncode == 0
    head, token, tail = out.stdout.split("\n")
    assert head == 'HMAC SHA-256 JWT for user "42" with expiration TTL 168h0m0s:' and tail == ""
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["sub"] == "42" and claims["exp"] - claims["iat"] == 604800
    quiet = taskcast("gentoken", "--config", str(config), "--user", "7", "--ttl", "-1", "--quiet")
    assert quiet.returncode == 0 and "\n" not in quiet.stdout
    assert "exp" not in jwt.decode(quiet.stdout, SECRET, algorithms=["HS256"])
    anonymous = taskcast("gentoken", "-c", str(config), "-t", "90")
    assert anonymous.stdout.startswith("HMAC SHA-256 JWT for anonymous user with expiration TTL 1m30s:\n")


def test_gentoken_without_secret_and_config_from_env_only(tmp_path: Path) -> None:
    missing = taskcast("gentoken", "-u", "1", cwd=tmp_path)  # no config.json: defaults + env
    assert (missing.returncode, missing.stdout) == (1, "error: no HMAC secret key set\n")
    from_env = taskcast(
        "gentoken", "-u", "1", "-q", cwd=tmp_path, env={"CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY": SECRET}
    )
    assert (
        from_env.returncode == 0 and jwt.decode(from_env.stdout, SECRET, algorithms=["HS256"])["sub"] == "1"
    )


def test_gensubtoken_and_checksubtoken(config: Path) -> None:
    assert taskcast("gensubtoken", "-c", str(config), "-u", "42").stdout == "channel is required\n"
    out = taskcast("gensubtoken", "-c", str(config), "-u", "42", "-s", "news")
    head, token, _ = out.stdout.split("\n")
    assert head == 'HMAC SHA-256 JWT for user "42" and channel "news" with expiration TTL 168h0m0s:'
    assert jwt.decode(token, SECRET, algorithms=["HS256"])["channel"] == "news"
    checked = taskcast("checksubtoken", "-c", str(config), token)
    assert checked.returncode == 0
    first, payload = checked.stdout.splitlines()
    assert first == 'valid subscription token for user "42" and channel "news"'
    assert json.loads(payload.removeprefix("payload: "))["channel"] == "news"


def test_checktoken_valid_invalid_and_missing(config: Path) -> None:
    token = taskcast("gentoken", "-c", str(config), "-u", "42", "-q").stdout
    ok = taskcast("checktoken", "-c", str(config), token)
    assert ok.returncode == 0
    first, payload = ok.stdout.splitlines()
    assert first == "valid token for user 42" and json.loads(payload.removeprefix("payload: "))["sub"] == "42"
    forged = jwt.encode({"sub": "42"}, "another-secret-0123456789abcdefghijkl", algorithm="HS256")
    bad = taskcast("checktoken", "-c", str(config), forged)
    assert bad.returncode == 1
    assert bad.stdout.startswith('error: token with algorithm HS256 and claims {"sub":"42"} has error: ')
    none = taskcast("checktoken", "-c", str(config))
    assert (none.returncode, none.stdout) == (
        1,
        "error: provide token to check [taskcast checktoken <TOKEN>]\n",
    )


def test_checkconfig_exit_codes_name_the_option(tmp_path: Path, config: Path) -> None:
    assert taskcast("checkconfig", "-c", str(config)).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("client:\n  ping_interval: 1s\n  pong_timeout: 5s\n")
    out = taskcast("checkconfig", "-c", str(bad))
    assert out.returncode == 1
    assert out.stdout == (
        "error validating config: client.pong_timeout: must be less than client.ping_interval (1s), got 5s\n"
    )
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"client": {"tokne": {}}, "admin": {"enabled": False}}))
    lenient = taskcast("checkconfig", "-c", str(typo))
    assert lenient.returncode == 0 and 'unknown option "client.tokne"' in lenient.stderr
    strict = taskcast("checkconfig", "-c", str(typo), "--strict")
    assert (strict.returncode, strict.stdout) == (1, "unknown keys in config: client.tokne\n")  # admin: known
    assert taskcast("checkconfig", "-c", str(tmp_path / "none.json")).stdout == "config file not found\n"


def test_genconfig_writes_a_valid_minimal_config_once(tmp_path: Path) -> None:
    for name in ("config.json", "c.yaml", "c.toml"):
        out = taskcast("genconfig", "-c", name, cwd=tmp_path)
        assert out.returncode == 0, out.stdout
        settings, warnings = load_settings(str(tmp_path / name), {})
        assert len(settings.client.token.hmac_secret_key) >= 32 and settings.http_api.key and warnings == []
        assert settings.admin.password and len(settings.admin.secret) >= 32 and not settings.admin.enabled
    again = taskcast("genconfig", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (1, "error: output config file already exists: config.json\n")
    wrong = taskcast("genconfig", "-c", "c.ini", cwd=tmp_path)
    assert wrong.returncode == 1 and "supported extensions: json, toml, yaml, yml" in wrong.stdout


@pytest.mark.parametrize("ext", ["json", "yaml", "toml"])
def test_defaultconfig_round_trips_every_option(tmp_path: Path, config: Path, ext: str) -> None:
    out = taskcast("defaultconfig", "-c", f"full.{ext}", "-b", str(config), cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    text = (tmp_path / f"full.{ext}").read_text()
    data: dict[str, Any] = (
        json.loads(text) if ext == "json" else yaml.safe_load(text) if ext == "yaml" else tomllib.loads(text)
    )
    assert data["client"]["ping_interval"] == "25s" and data["channel"]["history_meta_ttl"] == "720h0m0s"
    assert data["client"]["token"]["hmac_secret_key"] == SECRET  # from the base file
    settings, warnings = load_settings(str(tmp_path / f"full.{ext}"), {})
    assert warnings == [] and settings.client.token.hmac_secret_key == SECRET
    assert (
        taskcast("defaultconfig", "-c", f"full.{ext}", cwd=tmp_path).stdout
        == "error: target file already exists\n"
    )
    dry = taskcast("defaultconfig", "-c", f"full.{ext}", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "ping_interval" in dry.stdout


def test_defaultenv_lists_every_variable_and_the_list_loads(tmp_path: Path) -> None:
    out = taskcast("defaultenv")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines == sorted(lines)
    values = dict(line.split("=", 1) for line in lines)
    assert values["CENTRIFUGO_CLIENT_PING_INTERVAL"] == "25s"
    assert values["CENTRIFUGO_ENGINE_REDIS_ADDRESS"] == '"redis://127.0.0.1:6379"'
    assert values["CENTRIFUGO_CLIENT_ALLOWED_ORIGINS"] == '""'
    assert values["CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_PRESENCE"] == "false"
    assert values["CENTRIFUGO_HTTP_SERVER_PORT"] == "8000"
    env = {k: v.strip('"').replace('\\"', '"') for k, v in values.items()}
    _, warnings = load_settings(None, env)  # what a shell would export from the list
    assert warnings == []


def test_go_duration_formatting() -> None:
    cases = [(25, "25s"), (90, "1m30s"), (720 * 3600, "720h0m0s"), (0.5, "500ms"), (0, "0s"), (1.5, "1.5s")]
    assert [go_duration(s) for s, _ in cases] == [text for _, text in cases]


async def test_a_gentoken_token_is_accepted_by_a_running_gateway(tmp_path: Path, config: Path) -> None:
    token = taskcast("gentoken", "-c", str(config), "-u", "42", "-q").stdout
    gw = GatewayProcess({"client": {"token": {"hmac_secret_key": SECRET}}}, tmp_path / "gw").start()
    try:
        async with connect(gw.ws_url) as ws:
            await ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), scaled(10)))
        assert reply["id"] == 1 and reply["connect"]["client"], reply
    finally:
        gw.terminate()


def test_a_service_command_does_not_load_the_helper_commands() -> None:
    """``taskcast relay ...`` dispatches before the Centrifugo helpers' table is imported (it loads
    the gateway's config schema and node: 0.4 CPU-s more per relay or Status API start)."""
    probe = (
        "import sys\n"
        "from taskcast.cli import main\n"
        "try:\n"
        "    main(['relay', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('taskcast.centrifugo_cli', 'gateway.config.schema', 'gateway.node')\n"
        "print(sorted(m for m in sys.modules if m in heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=scaled(60), check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
