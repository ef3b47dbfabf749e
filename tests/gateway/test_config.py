"""load_settings: defaults, file formats, env overrides, validation errors, warnings, durations."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.config.loading import load_settings, parse_duration
from gateway.config.schema import ConfigError, Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.json"


Loader = Callable[..., tuple[Settings, list[str]]]


def load(
    config: dict[str, Any] | None = None, env: dict[str, str] | None = None, *, tmp: Path | None = None
) -> tuple[Settings, list[str]]:
    path = None
    if config is not None:
        assert tmp is not None
        file = tmp / "config.json"
        file.write_text(json.dumps(config))
        path = str(file)
    return load_settings(path, env or {})


@pytest.fixture
def cfg(tmp_path: Path) -> Loader:
    def _load(
        config: dict[str, Any] | None = None, env: dict[str, str] | None = None
    ) -> tuple[Settings, list[str]]:
        return load(config, env, tmp=tmp_path)

    return _load


def error_of(
    cfg: Loader, config: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        cfg(config, env)
    return info.value


# --- defaults ----------------------------------------------------------------------------------


def test_defaults() -> None:
    s, warnings = load_settings(None, {})
    assert warnings == []
    assert s.client.ping_interval == 25.0 and s.client.pong_timeout == 8.0
    assert s.client.channel_limit == 128 and s.client.queue_max_size == 1048576
    assert s.client.allowed_origins == ()
    assert s.client.token.algorithms == ()
    assert s.client.subscription_token.enabled is False
    assert s.channel.history_meta_ttl == 720 * 3600
    assert (s.channel.private_prefix, s.channel.namespace_boundary) == ("$", ":")
    assert (s.channel.user_boundary, s.channel.user_separator) == ("#", ",")
    assert s.channel.max_length == 255
    assert s.http_server.port == 8000 and s.http_server.address == ""
    assert s.http_api.handler_prefix == "/api"
    assert s.websocket.handler_prefix == "/connection/websocket"
    assert s.websocket.message_size_limit == 65536
    assert s.sse.handler_prefix == "/connection/sse" and not s.sse.enabled
    assert s.http_stream.handler_prefix == "/connection/http_stream"
    assert s.uni_sse.handler_prefix == "/connection/uni_sse"
    assert s.uni_http_stream.handler_prefix == "/connection/uni_http_stream"
    assert s.emulation.handler_prefix == "/emulation"
    assert s.engine.type == "memory"
    assert s.engine.redis.address == ("redis://127.0.0.1:6379",)
    assert s.engine.redis.prefix == "centrifugo"
    assert (s.engine.redis.connect_timeout, s.engine.redis.io_timeout, s.engine.redis.presence_ttl) == (
        1,
        4,
        60,
    )
    assert s.shutdown.timeout == 30.0 and s.log.level == "info"
    assert s.rpc.ping.method == "ping" and not s.rpc.ping.enabled
    assert s.node.name == f"{socket.gethostname()}_8000"
    assert s.channel.without_namespace.history_meta_ttl_resolved == 720 * 3600


def test_example_config_loads_cleanly() -> None:
    s, warnings = load_settings(str(EXAMPLE), {})
    assert warnings == []
    assert s.http_server.port == 8000 and s.engine.type == "memory"
    assert s.client.token.hmac_secret_key == "change-me"
    assert s.health.enabled and s.prometheus.enabled and s.http_api.key
    assert [ns.name for ns in s.channel.namespaces] == ["task_user", "task_detail", "task_project"]
    detail = s.channel_options("$task_detail:42")
    assert detail is not None and detail.subscription_limit_per_connection == 20
    for ns in s.channel.namespaces:
        assert (ns.history_size, ns.history_ttl, ns.force_recovery) == (100, 300.0, True)


# --- file formats ------------------------------------------------------------------------------


def test_yaml_and_toml(tmp_path: Path) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(
        "client:\n  ping_interval: 30s\n  allowed_origins: ['https://*.example.com']\n"
        "channel:\n  namespaces:\n    - name: news\n      presence: true\n"
    )
    s, _ = load_settings(str(yaml_file), {})
    assert s.client.ping_interval == 30.0
    assert s.client.allowed_origins == ("https://*.example.com",)
    assert s.channel.namespaces[0].presence
    toml_file = tmp_path / "c.toml"
    toml_file.write_text(
        '[http_server]\nport = 9001\n[engine]\ntype = "redis"\n[engine.redis]\naddress = "redis://r:6379"\n'
        '[[channel.namespaces]]\nname = "ns"\nhistory_size = 5\nhistory_ttl = "1m"\n'
    )
    s, _ = load_settings(str(toml_file), {})
    assert s.http_server.port == 9001
    assert s.engine.redis.address == ("redis://r:6379",)
    assert s.channel.namespaces[0].history_ttl == 60.0
    yml_file = tmp_path / "empty.yml"
    yml_file.write_text("")
    assert load_settings(str(yml_file), {})[0].http_server.port == 8000


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.json", "{", "not valid JSON"),
        ("bad.yaml", "a: [", "not valid YAML"),
        ("bad.toml", "a = ", "not valid TOML"),
        ("list.json", "[1]", "top level must be an object"),
        ("conf.ini", "x", "unsupported extension"),
    ],
)
def test_bad_files(tmp_path: Path, name: str, content: str, match: str) -> None:
    file = tmp_path / name
    file.write_text(content)
    with pytest.raises(ConfigError, match=match) as info:
        load_settings(str(file), {})
    assert info.value.option == "config file"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(str(tmp_path / "nope.json"), {})


# --- env ---------------------------------------------------------------------------------------


def test_env_overrides_file(cfg: Loader) -> None:
    s, warnings = cfg(
        {"http_server": {"port": 7000}, "client": {"token": {"hmac_secret_key": "file"}}},
        {
            "CENTRIFUGO_HTTP_SERVER_PORT": "7001",
            "CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY": "env",
            "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_PRESENCE": "true",
            "CENTRIFUGO_CLIENT_PING_INTERVAL": "1m30s",
            "CENTRIFUGO_CLIENT_PONG_TIMEOUT": "10",
            "CENTRIFUGO_CLIENT_ALLOWED_ORIGINS": "https://a.com, https://b.com",
            "CENTRIFUGO_ENGINE_REDIS_ADDRESS": '["redis://x:1", "redis://y:2"]',
            "CENTRIFUGO_ENGINE_REDIS_TLS_ENABLED": "1",
            "CENTRIFUGO_RPC_PING_ENABLED": "TRUE",
        },
    )
    assert warnings == []
    assert s.http_server.port == 7001
    assert s.client.token.hmac_secret_key == "env"
    assert s.channel.without_namespace.presence is True
    assert (s.client.ping_interval, s.client.pong_timeout) == (90.0, 10.0)
    assert s.client.allowed_origins == ("https://a.com", "https://b.com")
    assert s.engine.redis.address == ("redis://x:1", "redis://y:2")
    assert s.engine.redis.tls.enabled and s.rpc.ping.enabled


def test_taskcast_prefix_wins() -> None:
    s, _ = load_settings(None, {"CENTRIFUGO_HTTP_API_KEY": "c", "TASKCAST_HTTP_API_KEY": "t"})
    assert s.http_api.key == "t"
    s, _ = load_settings(None, {"TASKCAST_LOG_LEVEL": "debug"})
    assert s.log.level == "debug"


def test_namespaces_from_env_names() -> None:
    s, warnings = load_settings(
        None,
        {
            "CENTRIFUGO_CHANNEL_NAMESPACES": "ns1 my-ns",
            "CENTRIFUGO_CHANNEL_NAMESPACES_NS1_HISTORY_SIZE": "10",
            "CENTRIFUGO_CHANNEL_NAMESPACES_NS1_HISTORY_TTL": "300s",
            "TASKCAST_CHANNEL_NAMESPACES_NS1_FORCE_RECOVERY": "true",
            "CENTRIFUGO_CHANNEL_NAMESPACES_MY_NS_PRESENCE": "true",
        },
    )
    assert warnings == []
    ns1, my = s.channel.namespaces
    assert (ns1.name, ns1.history_size, ns1.history_ttl, ns1.force_recovery) == ("ns1", 10, 300.0, True)
    assert (my.name, my.presence) == ("my-ns", True)


def test_namespaces_from_env_json_array() -> None:
    value = json.dumps([{"name": "news", "presence": True}, {"name": "chat"}])
    s, _ = load_settings(None, {"CENTRIFUGO_CHANNEL_NAMESPACES": value})
    assert [(n.name, n.presence) for n in s.channel.namespaces] == [("news", True), ("chat", False)]


def test_namespace_env_overrides_file_namespace(cfg: Loader) -> None:
    config = {"channel": {"namespaces": [{"name": "news", "presence": True, "join_leave": True}]}}
    s, _ = cfg(config, {"CENTRIFUGO_CHANNEL_NAMESPACES_NEWS_PRESENCE": "false"})
    assert (s.channel.namespaces[0].presence, s.channel.namespaces[0].join_leave) == (False, True)
    s, _ = cfg(config, {"CENTRIFUGO_CHANNEL_NAMESPACES": "news,other"})
    assert [(n.name, n.join_leave) for n in s.channel.namespaces] == [("news", True), ("other", False)]


def test_unknown_centrifugo_env_warns_taskcast_env_does_not() -> None:
    _, warnings = load_settings(
        None,
        {
            "CENTRIFUGO_CLIENT_TOKNE_HMAC_SECRET_KEY": "x",
            "CENTRIFUGO_CHANNEL_NAMESPACES_GHOST_PRESENCE": "true",
            "TASKCAST_TEST_REDIS_URL": "redis://",
            "PATH": "/bin",
        },
    )
    assert warnings == [
        'unknown environment variable "CENTRIFUGO_CHANNEL_NAMESPACES_GHOST_PRESENCE"',
        'unknown environment variable "CENTRIFUGO_CLIENT_TOKNE_HMAC_SECRET_KEY"',
    ]


@pytest.mark.parametrize(
    ("env", "option"),
    [
        ({"CENTRIFUGO_CLIENT_INSECURE": "yes"}, "client.insecure"),
        ({"CENTRIFUGO_HTTP_SERVER_PORT": "80a"}, "http_server.port"),
        ({"CENTRIFUGO_CLIENT_PING_INTERVAL": "soon"}, "client.ping_interval"),
        ({"CENTRIFUGO_CLIENT_ALLOWED_ORIGINS": "[1,"}, "client.allowed_origins"),
        ({"CENTRIFUGO_CHANNEL_NAMESPACES": "[1,"}, "channel.namespaces"),
        ({"CENTRIFUGO_CHANNEL_NAMESPACES": "{}"}, "channel.namespaces"),
        ({"CENTRIFUGO_CHANNEL_NAMESPACES": "x"}, "channel.namespaces[x].name"),
    ],
)
def test_bad_env_values(env: dict[str, str], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, env)
    assert info.value.option == option


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("25s", 25.0),
        ("720h", 2592000.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("2h45m", 9900.0),
        ("100us", 0.0001),
        ("0", 0.0),
        ("12", 12.0),
        ("0.25", 0.25),
        (3, 3.0),
        (2.5, 2.5),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "s", "5", "5d", "1h-5m", "-5s", -1, True, None, [1], "1 h"])
def test_bad_durations(value: object) -> None:
    if value == "5":
        assert parse_duration(value, "x") == 5.0
        return
    with pytest.raises(ConfigError) as info:
        parse_duration(value, "client.ping_interval")
    assert info.value.option == "client.ping_interval"


# --- validation: every error names its option --------------------------------------------------

NS = "channel.namespaces"


@pytest.mark.parametrize(
    ("config", "option", "problem"),
    [
        ({"client": "x"}, "client", "expected an object"),
        ({"client": {"channel_limit": "10"}}, "client.channel_limit", "expected an integer"),
        ({"client": {"channel_limit": -1}}, "client.channel_limit", "negative"),
        ({"client": {"channel_limit": True}}, "client.channel_limit", "integer"),
        ({"client": {"insecure": "true"}}, "client.insecure", "true or false"),
        ({"client": {"ping_interval": "x"}}, "client.ping_interval", "invalid duration"),
        ({"client": {"ping_interval": "-5s"}}, "client.ping_interval", "invalid duration"),
        ({"client": {"ping_interval": -5}}, "client.ping_interval", "non-negative"),
        ({"client": {"ping_interval": 0}}, "client.ping_interval", "positive"),
        ({"client": {"pong_timeout": "25s"}}, "client.pong_timeout", "less than client.ping_interval"),
        ({"client": {"allowed_origins": [1]}}, "client.allowed_origins", "list of strings"),
        ({"client": {"token": {"audience_regex": "("}}}, "client.token.audience_regex", "regular expression"),
        ({"client": {"token": {"issuer_regex": "["}}}, "client.token.issuer_regex", "regular expression"),
        (
            {"client": {"token": {"issuer": "a", "issuer_regex": "a"}}},
            "client.token.issuer_regex",
            "not both",
        ),
        ({"client": {"token": {"rsa_public_key": "nope"}}}, "client.token.rsa_public_key", "PEM"),
        (
            {"client": {"token": {"hmac_previous_secret_key": "old"}}},
            "client.token.hmac_previous_secret_key",
            "hmac_secret_key is not",
        ),
        (
            {"client": {"token": {"jwks_public_endpoint": "ftp://x"}}},
            "client.token.jwks_public_endpoint",
            "http",
        ),
        (
            {"client": {"token": {"jwks_public_endpoint": "https://x/{{tenant}}/jwks"}}},
            "client.token.jwks_public_endpoint",
            "templated",
        ),
        (
            {"client": {"subscription_token": {"enabled": True}}},
            "client.subscription_token.enabled",
            "no verification key",
        ),
        ({"channel": {"namespaces": {}}}, NS, "list"),
        ({"channel": {"namespaces": [1]}}, f"{NS}[0]", "namespace object"),
        ({"channel": {"namespaces": [{}]}}, f"{NS}[0].name", "string"),
        ({"channel": {"namespaces": [{"name": "a"}]}}, f"{NS}[a].name", "must match"),
        ({"channel": {"namespaces": [{"name": "a b"}]}}, f"{NS}[a b].name", "must match"),
        ({"channel": {"namespaces": [{"name": "ns"}, {"name": "ns"}]}}, f"{NS}[ns].name", "duplicate"),
        (
            {"channel": {"namespaces": [{"name": "ns", "channel_regex": "("}]}},
            f"{NS}[ns].channel_regex",
            "regular",
        ),
        (
            {"channel": {"namespaces": [{"name": "ns", "history_size": 10}]}},
            f"{NS}[ns].history_ttl",
            "history",
        ),
        (
            {"channel": {"namespaces": [{"name": "ns", "history_ttl": "1m"}]}},
            f"{NS}[ns].history_size",
            "history",
        ),
        ({"channel": {"namespaces": [{"name": "ns", "presence": 1}]}}, f"{NS}[ns].presence", "true or false"),
        (
            {"channel": {"namespaces": [{"name": "ns", "force_recovery": True}]}},
            f"{NS}[ns].force_recovery",
            "needs history",
        ),
        (
            {"channel": {"without_namespace": {"allow_positioning": True}}},
            "channel.without_namespace.allow_positioning",
            "needs history",
        ),
        (
            {"channel": {"without_namespace": {"force_positioning": True}}},
            "channel.without_namespace.force_positioning",
            "needs history",
        ),
        (
            {"channel": {"without_namespace": {"allow_recovery": True}}},
            "channel.without_namespace.allow_recovery",
            "needs history",
        ),
        (
            {
                "channel": {
                    "without_namespace": {"history_size": 1, "history_ttl": "1h", "history_meta_ttl": "30m"}
                }
            },
            "channel.without_namespace.history_ttl",
            "must not exceed history_meta_ttl",
        ),
        (
            {
                "channel": {
                    "history_meta_ttl": "1h",
                    "namespaces": [{"name": "ns", "history_size": 1, "history_ttl": "2h"}],
                }
            },
            f"{NS}[ns].history_ttl",
            "must not exceed channel.history_meta_ttl",
        ),
        (
            {"channel": {"without_namespace": {"force_recovery_mode": "fast"}}},
            "channel.without_namespace.force_recovery_mode",
            "stream",
        ),
        ({"channel": {"namespace_boundary": ""}}, "channel.namespace_boundary", "empty"),
        ({"engine": {"type": "nats"}}, "engine.type", "memory"),
        ({"engine": {"redis": {"db": -1}}}, "engine.redis.db", "negative"),
        ({"engine": {"redis": {"address": 5}}}, "engine.redis.address", "list of strings"),
        ({"engine": {"type": "redis", "redis": {"address": []}}}, "engine.redis.address", "empty"),
        ({"engine": {"redis": {"address": [""]}}}, "engine.redis.address", "empty"),
        (
            {"engine": {"redis": {"sentinel_address": ["s:26379"]}}},
            "engine.redis.sentinel_master_name",
            "must be set",
        ),
        (
            {
                "engine": {
                    "redis": {
                        "sentinel_address": ["s"],
                        "sentinel_master_name": "m",
                        "cluster_address": ["c"],
                    }
                }
            },
            "engine.redis.cluster_address",
            "sentinel",
        ),
        ({"engine": {"redis": {"io_timeout": "fast"}}}, "engine.redis.io_timeout", "duration"),
        ({"engine": {"redis": {"tls": {"enabled": "yes"}}}}, "engine.redis.tls.enabled", "true or false"),
        ({"engine": "redis"}, "engine", "use engine.type"),
        ({"prometheus": True}, "prometheus", "use prometheus.enabled"),
        ({"log": {"level": "verbose"}}, "log.level", "debug"),
        ({"http_server": {"port": 70000}}, "http_server.port", "65535"),
        ({"http_api": {"error_mode": "loud"}}, "http_api.error_mode", "transport"),
        ({"websocket": {"handler_prefix": "ws"}}, "websocket.handler_prefix", "start with"),
        ({"sse": {"max_request_body_size": 1.5}}, "sse.max_request_body_size", "integer"),
        ({"shutdown": {"timeout": {}}}, "shutdown.timeout", "duration"),
        ({"rpc": {"ping": {"enabled": True, "method": ""}}}, "rpc.ping.method", "empty"),
    ],
)
def test_validation_errors_name_the_option(
    cfg: Loader, config: dict[str, Any], option: str, problem: str
) -> None:
    err = error_of(cfg, config)
    assert err.option == option
    assert problem in err.problem
    assert str(err).startswith(f"{option}: ")


def test_ecdsa_key_in_rsa_option_rejected(cfg: Loader) -> None:
    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    err = error_of(cfg, {"client": {"token": {"rsa_public_key": pem}}})
    assert err.option == "client.token.rsa_public_key"
    s, _ = cfg({"client": {"token": {"ecdsa_public_key": pem}}})
    assert s.client.token.algorithms == ("ES256", "ES384", "ES512")


# --- warnings ----------------------------------------------------------------------------------


def test_unknown_options_warn_with_full_path(cfg: Loader) -> None:
    _, warnings = cfg(
        {
            "client": {"tokne": {}, "token": {"hmac_secret": "x"}},
            "channel": {"namespaces": [{"name": "ns", "presense": True}], "without_namespace": {"name": "x"}},
            "surprise": 1,
        }
    )
    assert warnings == [
        'unknown option "client.tokne"',
        'unknown option "client.token.hmac_secret"',
        'unknown option "channel.namespaces[ns].presense"',
        'unknown option "channel.without_namespace.name"',
        'unknown option "surprise"',
    ]


def test_v5_names_warn_with_hint(cfg: Loader) -> None:
    _, warnings = cfg({"token_hmac_secret_key": "x", "api_key": "k", "allowed_origins": [], "namespaces": []})
    assert warnings == [
        'unknown option "token_hmac_secret_key" (Centrifugo v5 name; use client.token.hmac_secret_key)',
        'unknown option "api_key" (Centrifugo v5 name; use http_api.key)',
        'unknown option "allowed_origins" (Centrifugo v5 name; use client.allowed_origins)',
        'unknown option "namespaces" (Centrifugo v5 name; use channel.namespaces)',
    ]


def test_unsupported_centrifugo_options_warn(cfg: Loader) -> None:
    _, warnings = cfg(
        {
            "client": {"concurrency": 4},
            "admin": {"web_path": "/srv/admin"},
            "channel": {"without_namespace": {"auto_cache_recover": True}},
        }
    )
    assert warnings == [
        'unsupported option "client.concurrency" (a Centrifugo option Taskcast ignores: '
        "one connection's commands run in order; nothing to tune)",
        'unsupported option "admin.web_path" (a Centrifugo option Taskcast ignores: the admin '
        "UI's files are part of the gateway (gateway/admin/static/))",
        'unsupported option "channel.without_namespace.auto_cache_recover" (a Centrifugo option '
        "Taskcast ignores: use force_recovery with force_recovery_mode)",
    ]


def test_value_warnings(cfg: Loader) -> None:
    s, warnings = cfg(
        {
            "client": {
                "insecure": True,
                "token": {"jwks_public_endpoint": "https://idp/jwks", "hmac_secret_key": "x"},
                "subscription_token": {"hmac_secret_key": "y"},
            },
        }
    )
    assert s.client.token.algorithms == ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA")
    assert any(w.startswith("client.insecure") for w in warnings)
    assert any("static keys are not used" in w for w in warnings)
    assert any(w.startswith("client.subscription_token: keys are set but enabled is false") for w in warnings)


# --- derived values and helpers ----------------------------------------------------------------


def test_algorithms_derived_from_keys(cfg: Loader) -> None:
    s, _ = cfg(
        {
            "client": {
                "token": {"hmac_secret_key": "k"},
                "subscription_token": {"enabled": True, "hmac_secret_key": "s"},
            }
        }
    )
    assert s.client.token.algorithms == ("HS256", "HS384", "HS512")
    assert s.client.subscription_token.enabled
    assert s.client.subscription_token.algorithms == ("HS256", "HS384", "HS512")


def test_algorithms_cannot_be_configured(cfg: Loader) -> None:
    s, warnings = cfg({"client": {"token": {"algorithms": ["none"]}}})
    assert s.client.token.algorithms == ()
    assert warnings == ['unknown option "client.token.algorithms"']


def test_history_meta_ttl_resolution(cfg: Loader) -> None:
    s, _ = cfg(
        {
            "channel": {
                "history_meta_ttl": "2h",
                "namespaces": [
                    {"name": "inherit", "history_size": 1, "history_ttl": "1h"},
                    {"name": "own", "history_size": 1, "history_ttl": "1h", "history_meta_ttl": "3h"},
                ],
            }
        }
    )
    inherit, own = s.channel.namespaces
    assert (inherit.history_meta_ttl, inherit.history_meta_ttl_resolved) == (0.0, 7200.0)
    assert (own.history_meta_ttl, own.history_meta_ttl_resolved) == (10800.0, 10800.0)
    assert inherit.history_enabled and not s.channel.without_namespace.history_enabled


def test_force_recovery_mode_empty_means_stream(cfg: Loader) -> None:
    s, _ = cfg({"channel": {"without_namespace": {"force_recovery_mode": ""}}})
    assert s.channel.without_namespace.force_recovery_mode == "stream"
    s, _ = cfg({"channel": {"without_namespace": {"force_recovery_mode": "cache"}}})
    assert s.channel.without_namespace.force_recovery_mode == "cache"


def test_channel_options_resolution(cfg: Loader) -> None:
    s, _ = cfg({"channel": {"namespaces": [{"name": "chat", "presence": True, "channel_regex": "^[a-z]+$"}]}})
    chat = s.channel.namespaces[0]
    assert s.channel_options("chat:room") is chat
    assert s.channel_options("$chat:room") is chat
    assert s.channel_options("chat:a:b") is chat
    assert s.channel_options("news") is s.channel.without_namespace
    assert s.channel_options("$news") is s.channel.without_namespace
    assert s.channel_options("nope:x") is None
    assert s.channel_options(":x") is None
    assert chat.channel_pattern is not None and chat.channel_pattern.match("room")


def test_channel_options_custom_boundaries(cfg: Loader) -> None:
    s, _ = cfg(
        {"channel": {"private_prefix": "private-", "namespace_boundary": "/", "namespaces": [{"name": "ns"}]}}
    )
    assert s.channel_options("private-ns/x") is s.channel.namespaces[0]
    assert s.channel_options("ns:x") is s.channel.without_namespace


def test_node_name(cfg: Loader) -> None:
    assert cfg({"node": {"name": "gw-1"}})[0].node.name == "gw-1"
    assert cfg({"http_server": {"port": 0}})[0].node.name == f"{socket.gethostname()}_0"


def test_single_string_becomes_tuple(cfg: Loader) -> None:
    s, _ = cfg(
        {
            "engine": {
                "redis": {
                    "address": "redis://one:6379",
                    "sentinel_address": "s:1",
                    "sentinel_master_name": "m",
                }
            }
        }
    )
    assert s.engine.redis.address == ("redis://one:6379",)
    assert s.engine.redis.sentinel_address == ("s:1",)


def test_redacted(cfg: Loader) -> None:
    s, _ = cfg(
        {
            "client": {"token": {"hmac_secret_key": "topsecret", "hmac_previous_secret_key": "old"}},
            "http_api": {"key": "apikey"},
            "engine": {"redis": {"password": "pw", "address": ["redis://user:hunter2@h:6379/0"]}},
            "channel": {"namespaces": [{"name": "ns"}]},
        }
    )
    red = s.redacted()
    text = json.dumps(red)
    for secret in ("topsecret", "old", "apikey", 'pw"', "hunter2"):
        assert secret not in text
    assert red["client"]["token"]["hmac_secret_key"] == "***"
    assert red["client"]["subscription_token"]["hmac_secret_key"] == ""
    assert red["engine"]["redis"]["address"] == ["redis://user:***@h:6379/0"]
    assert red["channel"]["namespaces"][0]["name"] == "ns"
    assert "by_name" not in red["channel"] and "algorithms" not in red["client"]["token"]


def test_settings_are_frozen() -> None:
    s, _ = load_settings(None, {})
    with pytest.raises(AttributeError):
        s.client.ping_interval = 1.0  # type: ignore[misc]
    assert isinstance(s, Settings)
    assert not hasattr(s.client, "__dict__")


PROXY_OBJECTS = (
    "client.proxy.connect.",
    "client.proxy.refresh.",
    "channel.proxy.subscribe.",
    "channel.proxy.publish.",
    "channel.proxy.sub_refresh.",
    "channel.proxy.subscribe_stream.",
    "rpc.proxy.",
)


def test_docs_cover_every_option() -> None:
    from gateway.config.loading import _leaf_paths

    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = []
    for parts in _leaf_paths(Settings, ()):
        path = ".".join(parts)
        if path.startswith(("channel.without_namespace.", "client.token.", "client.subscription_token.")):
            needle = f"`{parts[-1]}`"
        elif path.startswith(PROXY_OBJECTS):
            # Each proxy object has the same fields, documented once in the proxy object table.
            prefix = next(p for p in PROXY_OBJECTS if path.startswith(p))
            assert f"`{prefix[:-1]}`" in docs, prefix
            needle = f"`{path[len(prefix) :]}`"
        else:
            needle = f"`{path}`"
        if needle not in docs:
            missing.append(path)
    assert missing == []
