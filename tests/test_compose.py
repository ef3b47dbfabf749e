"""docker-compose.yml cannot run here (no Docker engine), so it is kept honest by reading it:
every file it mounts or builds from exists, every command is a real CLI command, every env var
is an option the service's config loader knows, ports agree with the configs, every long-running
service has a healthcheck, and the data path has no single point of failure (two of every
Taskcast service, Redis behind three Sentinels, MariaDB with a replica) — the same shape
``make topology`` runs from local processes (tests/e2e/test_rolling_restart.py runs that one)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import relay.cli
import status_api.cli
from gateway.config.loading import load_settings
from gateway.config.redis_address import Kind
from gateway.config.redis_address import parse as parse_address
from relay.config import load_config as load_relay_config
from status_api import redis_client
from status_api.config import load_config as load_status_config
from taskcast.dev.sentinel import QUORUM
from taskcast.dev.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
FAKE_SECRETS = {
    "TASKCAST_HMAC_SECRET": "x" * 40,
    "TASKCAST_API_KEY": "k" * 40,
    "TASKCAST_SERVICE_SECRET": "s" * 40,
    "TASKCAST_EXECUTION_SECRET": "e" * 40,
    "TASKCAST_USER_SECRET": "u" * 40,
    "TASKCAST_ADMIN_PASSWORD": "p" * 20,
    "TASKCAST_ADMIN_SECRET": "a" * 40,
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
    assert settings.engine.redis.address == (SENTINEL_URL,)
    assert settings.health.enabled and settings.sse.enabled
    # The admin web UI: on, behind nginx's internal listener only, with the operator's secrets.
    assert settings.admin.enabled and settings.admin.handler_prefix == "/gateway-admin"
    assert settings.admin.password == FAKE_SECRETS["TASKCAST_ADMIN_PASSWORD"]
    assert settings.admin.secret == FAKE_SECRETS["TASKCAST_ADMIN_SECRET"]
    assert SERVICES[name]["expose"] == [str(settings.http_server.port)]


@pytest.mark.parametrize("name", ["status-api1", "status-api2", "reconciler", "migrate"])
def test_status_api_env_and_config_agree(name):
    env = _env(SERVICES[name])
    cfg = load_status_config(ROOT / "deploy/status-api.yaml", env)
    assert cfg.realtime.secret == FAKE_SECRETS["TASKCAST_HMAC_SECRET"]
    assert cfg.database.url.startswith("mysql+asyncmy://") and "@mariadb:3306/" in cfg.database.url
    assert cfg.wake.redis_url == SENTINEL_URL
    if name.startswith("status-api"):
        assert SERVICES[name]["expose"] == [str(cfg.http.port)]
        assert cfg.http.host == "0.0.0.0"


@pytest.mark.parametrize("name", ["relay1", "relay2"])
def test_relay_env_and_config_agree(name):
    env = _env(SERVICES[name])
    cfg = load_relay_config(ROOT / "deploy/relay.yaml", env)
    assert cfg.gateway_api_key == FAKE_SECRETS["TASKCAST_API_KEY"]
    assert cfg.gateway_api_url == "http://lb:8001/api"
    assert cfg.relay_id == name
    assert cfg.wake_redis_url == SENTINEL_URL
    assert "@mariadb:3306/" in cfg.database_url
    assert SERVICES[name]["expose"] == [str(cfg.metrics_port)]


def test_load_balancer_template_names_every_variable_it_is_given():
    template = (ROOT / "deploy/nginx/taskcast.conf.template").read_text()
    used = set(re.findall(r"\$\{(TASKCAST_[A-Z0-9_]+)\}", template))
    given = set(SERVICES["lb"]["environment"])
    assert used == given
    lb_env = SERVICES["lb"]["environment"]
    assert lb_env["TASKCAST_GATEWAY_1"] == "gateway1:8000" and lb_env["TASKCAST_GATEWAY_2"] == "gateway2:8000"
    assert lb_env["TASKCAST_STATUS_API_1"] == "status-api1:8100"
    assert lb_env["TASKCAST_STATUS_API_2"] == "status-api2:8100"
    assert SERVICES["lb"]["ports"] == [f"{lb_env['TASKCAST_PUBLIC_PORT']}:{lb_env['TASKCAST_PUBLIC_PORT']}"]
    assert f"{lb_env['TASKCAST_INTERNAL_PORT']}" in SERVICES["lb"]["expose"]


def test_secrets_are_shared_consistently():
    """The gateway verifies the tokens the Status API mints, and relays use the gateway's key."""
    assert (
        SERVICES["gateway1"]["environment"]["CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY"]
        == (SERVICES["status-api1"]["environment"]["TASKCAST_STATUS_API_REALTIME__SECRET"])
    )
    assert (
        SERVICES["relay1"]["environment"]["TASKCAST_RELAY_GATEWAY_API_KEY"]
        == (SERVICES["gateway1"]["environment"]["CENTRIFUGO_HTTP_API_KEY"])
    )


def test_every_long_running_service_has_a_healthcheck_and_dependencies_exist():
    for name, svc in SERVICES.items():
        if name not in ("reconciler", "migrate"):
            assert "healthcheck" in svc, f"{name} has no healthcheck"
        if name != "migrate":
            assert svc.get("restart") == "unless-stopped", f"{name} is not restarted when it exits"
        for dep in svc.get("depends_on", {}):
            assert dep in SERVICES, f"{name} depends on unknown {dep}"


def test_redis_is_configured_as_the_docs_require():
    for name in ("redis", "redis-replica"):
        command = SERVICES[name]["command"]
        assert "noeviction" in command and "--appendonly" in command
    assert SERVICES["redis-replica"]["command"][-3:] == ["--replicaof", "redis", "6379"]


SENTINEL_URL = (
    "redis+sentinel://sentinel1:26379?sentinel_master_name=taskcast&addr=sentinel2:26379&addr=sentinel3:26379"
)


def _count(prefix: str) -> int:
    return sum(1 for name in SERVICES if re.fullmatch(rf"{prefix}\d+", name))


def test_no_single_point_of_failure_and_the_local_topology_has_the_same_shape(tmp_path: Path) -> None:
    topo = Topology(tmp_path, ha=True)
    assert _count("gateway") == topo.gateways == 2
    assert _count("status-api") == topo.status_apis == 2
    assert _count("relay") == topo.relays == 2
    assert _count("sentinel") == 3
    assert {"redis", "redis-replica", "mariadb", "mariadb-replica", "lb"} <= SERVICES.keys()
    # nothing on the data path names one Redis server: only the Sentinels
    for name, svc in SERVICES.items():
        for key, value in _env(svc).items():
            assert "redis://" not in value, f"{name} {key} bypasses the Sentinels"
    assert SERVICES["gateway1"]["environment"]["CENTRIFUGO_ENGINE_REDIS_ADDRESS"] == SENTINEL_URL


def test_the_sentinel_url_is_read_alike_by_the_gateway_and_the_wake_up_clients() -> None:
    gateway = parse_address(SENTINEL_URL)
    assert gateway.kind is Kind.SENTINEL and gateway.sentinel_master_name == "taskcast"
    assert gateway.hosts == (("sentinel1", 26379), ("sentinel2", 26379), ("sentinel3", 26379))
    redis_client.check(SENTINEL_URL)


def test_three_sentinels_watch_the_master_with_a_majority_quorum() -> None:
    conf = (ROOT / "deploy/redis/sentinel.conf").read_text()
    monitor = re.search(r"^sentinel monitor (\S+) (\S+) (\d+) (\d+)$", conf, flags=re.M)
    assert monitor and monitor.groups() == ("taskcast", "redis", "6379", str(QUORUM))
    assert QUORUM == 2  # a majority of three: one Sentinel down still fails over, one alone never does
    for n in (1, 2, 3):
        svc = SERVICES[f"sentinel{n}"]
        assert "./deploy/redis/sentinel.conf:/etc/taskcast/sentinel.conf:ro" in svc["volumes"]
        assert "--sentinel" in svc["command"][0]


def _cnf(name: str) -> dict[str, str]:
    text = (ROOT / f"deploy/mariadb/{name}.cnf").read_text()
    return dict(re.findall(r"^([a-z-]+) = (\S+)$", text, flags=re.M))


def test_mariadb_has_a_binlog_and_a_read_only_gtid_replica() -> None:
    primary, replica = _cnf("primary"), _cnf("replica")
    assert primary["log-bin"] and primary["binlog-format"] == "ROW"
    assert replica["read-only"] == "ON" and primary["server-id"] != replica["server-id"]
    env = SERVICES["mariadb-replica"]["environment"]
    assert env["MARIADB_MASTER_HOST"] == "mariadb"
    assert SERVICES["mariadb"]["environment"]["MARIADB_REPLICATION_USER"] == env["MARIADB_REPLICATION_USER"]
    assert "./deploy/mariadb/primary.cnf:/etc/mysql/conf.d/taskcast.cnf:ro" in SERVICES["mariadb"]["volumes"]


def test_the_schema_is_migrated_once_before_the_status_api_replicas_start() -> None:
    assert SERVICES["migrate"]["command"][:2] == ["status-api", "init-db"]
    for name in ("status-api1", "status-api2", "reconciler", "relay1", "relay2"):
        condition = SERVICES[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name
        assert "init-db" not in " ".join(SERVICES[name]["command"]), name


def _deploy_doc_yaml_after(heading: str) -> list[dict[str, Any]]:
    text = (ROOT / "docs/deploy.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, re.S)]


def test_the_deploy_doc_without_redis_is_a_valid_udp_wake_configuration(tmp_path: Path) -> None:
    """docs/deploy.md "Without Redis": its two snippets, over deploy/*.yaml, wake over UDP only."""
    status_doc, relay_doc = _deploy_doc_yaml_after("## Without Redis")
    status_raw = {**yaml.safe_load((ROOT / "deploy/status-api.yaml").read_text()), **status_doc}
    relay_raw = {**yaml.safe_load((ROOT / "deploy/relay.yaml").read_text()), **relay_doc}
    relay_raw.pop("wake_redis_url")
    (tmp_path / "status-api.yaml").write_text(yaml.safe_dump(status_raw))
    (tmp_path / "relay.yaml").write_text(yaml.safe_dump(relay_raw))
    # docker-compose.yml sets the Sentinel wake-up URL in the environment; a deployment without Redis
    # does not.
    status_env = {k: v for k, v in _env(SERVICES["status-api1"]).items() if "WAKE" not in k}
    relay_env = {k: v for k, v in _env(SERVICES["relay1"]).items() if "WAKE" not in k}
    status = load_status_config(tmp_path / "status-api.yaml", status_env)
    assert status.wake.redis_url is None
    assert list(status.wake.udp_targets) == ["relay1.internal:7390", "relay2.internal:7390"]
    relay_cfg = load_relay_config(tmp_path / "relay.yaml", relay_env)
    assert relay_cfg.wake_redis_url is None
    assert relay_cfg.wake_udp_listen == "0.0.0.0:7390"
