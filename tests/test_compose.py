"""docker-compose.yml cannot run here (no Docker engine), so it is kept honest by reading it:
every file it mounts or builds from exists, every command is a real CLI command, every env var
is an option the service's config loader knows, ports agree with the configs, and every
long-running service has a healthcheck."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import relay.cli
import status_api.cli
from gateway.config.loading import load_settings
from relay.config import load_config as load_relay_config
from status_api.config import load_config as load_status_config

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
FAKE_SECRETS = {
    "TASKCAST_HMAC_SECRET": "x" * 40,
    "TASKCAST_API_KEY": "k" * 40,
    "TASKCAST_SERVICE_SECRET": "s" * 40,
    "TASKCAST_EXECUTION_SECRET": "e" * 40,
    "TASKCAST_USER_SECRET": "u" * 40,
}


def _interpolate(value: str) -> str:
    """Compose's ${VAR:?msg} / ${VAR:-default} interpolation with the fake secrets."""

    def repl(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if name in FAKE_SECRETS:
            return FAKE_SECRETS[name]
        assert op in (":-", "-"), f"${{{name}}} has no default and is not a documented secret"
        return arg

    return re.sub(r"\$\{([A-Z0-9_]+)(:?[-?])?([^}]*)\}", repl, value)


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: _interpolate(str(v)) for k, v in (service.get("environment") or {}).items()}


def _taskcast_services() -> list[str]:
    return [name for name, svc in SERVICES.items() if svc.get("image") == "taskcast:latest"]


def _argv(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    if service.get("entrypoint") == ["sh", "-c"]:
        # "taskcast a ... && exec taskcast b ...": check every taskcast invocation
        return command
    return ["taskcast " + " ".join(command)]


def test_the_image_builds_from_files_that_exist():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (.+) \S+$", dockerfile, flags=re.M):
        if src.startswith("--from="):
            continue  # from an earlier build stage (tests/test_image.py replays those)
        for item in src.split():
            assert list(ROOT.glob(item)), f"Dockerfile copies missing {item}"


def test_mounted_files_exist():
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            host = volume.split(":")[0]
            if host.startswith("."):
                assert (ROOT / host).exists(), f"{name} mounts missing {host}"


@pytest.mark.parametrize("name", _taskcast_services())
def test_commands_are_real_cli_commands_with_existing_configs(name):
    for line in _argv(SERVICES[name]):
        for invocation in line.split("&&"):
            words = invocation.replace("exec ", "").split()
            assert words[0] == "taskcast"
            config = Path(words[words.index("--config") + 1].replace("/app/", str(ROOT) + "/"))
            assert config.exists(), f"{name}: {config} missing"
            service, rest = words[1], words[2:]
            parser = {"status-api": status_api.cli._parser, "relay": relay.cli._parser}.get(service)
            if parser is not None:
                parser().parse_args([w.replace("/app/", str(ROOT) + "/") for w in rest])
            else:
                assert service == "gateway"


@pytest.mark.parametrize("name", ["gateway1", "gateway2"])
def test_gateway_env_and_config_agree(name):
    env = _env(SERVICES[name])
    settings, warnings = load_settings(str(ROOT / "deploy/gateway.json"), env)
    assert warnings == []
    assert settings.engine.type == "redis"
    assert settings.client.token.hmac_secret_key == FAKE_SECRETS["TASKCAST_HMAC_SECRET"]
    assert settings.http_api.key == FAKE_SECRETS["TASKCAST_API_KEY"]
    assert settings.engine.redis.address == ("redis://redis:6379/0",)
    assert settings.health.enabled and settings.sse.enabled
    assert SERVICES[name]["expose"] == [str(settings.http_server.port)]


@pytest.mark.parametrize("name", ["status-api", "reconciler"])
def test_status_api_env_and_config_agree(name):
    env = _env(SERVICES[name])
    cfg = load_status_config(ROOT / "deploy/status-api.yaml", env)
    assert cfg.realtime.secret == FAKE_SECRETS["TASKCAST_HMAC_SECRET"]
    assert cfg.database.url.startswith("mysql+asyncmy://") and "@mysql:3306/" in cfg.database.url
    if name == "status-api":
        assert SERVICES[name]["expose"] == [str(cfg.http.port)]
        assert cfg.http.host == "0.0.0.0"


@pytest.mark.parametrize("name", ["relay1", "relay2"])
def test_relay_env_and_config_agree(name):
    env = _env(SERVICES[name])
    cfg = load_relay_config(ROOT / "deploy/relay.yaml", env)
    assert cfg.gateway_api_key == FAKE_SECRETS["TASKCAST_API_KEY"]
    assert cfg.gateway_api_url == "http://lb:8001/api"
    assert cfg.relay_id == name
    assert SERVICES[name]["expose"] == [str(cfg.metrics_port)]


def test_load_balancer_template_names_every_variable_it_is_given():
    template = (ROOT / "deploy/nginx/taskcast.conf.template").read_text()
    used = set(re.findall(r"\$\{(TASKCAST_[A-Z0-9_]+)\}", template))
    given = set(SERVICES["lb"]["environment"])
    assert used == given
    lb_env = SERVICES["lb"]["environment"]
    assert (
        lb_env["TASKCAST_GATEWAY_1"] == "gateway1:8000" and lb_env["TASKCAST_STATUS_API_1"] == "status-api:8100"
    )
    assert SERVICES["lb"]["ports"] == [f"{lb_env['TASKCAST_PUBLIC_PORT']}:{lb_env['TASKCAST_PUBLIC_PORT']}"]
    assert f"{lb_env['TASKCAST_INTERNAL_PORT']}" in SERVICES["lb"]["expose"]


def test_secrets_are_shared_consistently():
    """The gateway verifies the tokens the Status API mints, and relays use the gateway's key."""
    assert (
        SERVICES["gateway1"]["environment"]["CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY"]
        == (SERVICES["status-api"]["environment"]["TASKCAST_STATUS_API_REALTIME__SECRET"])
    )
    assert (
        SERVICES["relay1"]["environment"]["TASKCAST_RELAY_GATEWAY_API_KEY"]
        == (SERVICES["gateway1"]["environment"]["CENTRIFUGO_HTTP_API_KEY"])
    )


def test_every_long_running_service_has_a_healthcheck_and_dependencies_exist():
    for name, svc in SERVICES.items():
        if name != "reconciler":
            assert "healthcheck" in svc, f"{name} has no healthcheck"
        for dep in svc.get("depends_on", {}):
            assert dep in SERVICES, f"{name} depends on unknown {dep}"


def test_redis_is_configured_as_the_docs_require():
    command = SERVICES["redis"]["command"]
    assert "noeviction" in command and "--appendonly" in command
