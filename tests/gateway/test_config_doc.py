"""docs/configuration.md's option tables are generated from the code, and every Centrifugo v6
option is either supported or named unsupported with what to do instead (issue 19)."""

from __future__ import annotations

import pytest

from gateway.config import doc as config_doc
from gateway.config.loading import load_settings
from gateway.config.unsupported import UNSUPPORTED, UNSUPPORTED_CHANNEL_OPTIONS

# Centrifugo v6 option paths (internal/configtypes, v6.0 - v6.8): every top-level section and the
# leaves of the sections Taskcast implements in part.
CENTRIFUGO_V6_OPTIONS = (
    "http_server.address", "http_server.port", "http_server.internal_address",
    "http_server.internal_port", "http_server.tls.enabled", "http_server.tls.cert_pem",
    "http_server.tls.key_pem", "http_server.tls.server_ca_pem", "http_server.tls.client_ca_pem",
    "http_server.tls.insecure_skip_verify", "http_server.tls.server_name", "http_server.tls_autocert",
    "http_server.tls_external", "http_server.internal_tls", "http_server.http3", "log.level",
    "log.file", "engine.type", "engine.redis.address", "engine.redis.prefix",
    "engine.redis.connect_timeout", "engine.redis.io_timeout", "engine.redis.db", "engine.redis.user",
    "engine.redis.password", "engine.redis.client_name", "engine.redis.force_resp2",
    "engine.redis.cluster_address", "engine.redis.tls.enabled", "engine.redis.tls.cert_pem",
    "engine.redis.tls.key_pem", "engine.redis.tls.server_ca_pem", "engine.redis.tls.client_ca_pem",
    "engine.redis.tls.insecure_skip_verify", "engine.redis.tls.server_name",
    "engine.redis.sentinel_address", "engine.redis.sentinel_user", "engine.redis.sentinel_password",
    "engine.redis.sentinel_master_name", "engine.redis.sentinel_client_name",
    "engine.redis.sentinel_tls", "engine.redis.history_use_lists", "engine.redis.presence_ttl",
    "engine.redis.presence_hash_field_ttl", "engine.redis.presence_user_mapping", "broker",
    "presence_manager", "map_broker", "controller", "init", "pid_file", "enable_unreleased_features",
    "client.proxy", "client.allowed_origins", "client.token.hmac_secret_key",
    "client.token.rsa_public_key", "client.token.ecdsa_public_key", "client.token.jwks_public_endpoint",
    "client.token.audience", "client.token.audience_regex", "client.token.issuer",
    "client.token.issuer_regex", "client.token.user_id_claim", "client.subscription_token.enabled",
    "client.subscription_token.hmac_secret_key", "client.allow_anonymous_connect_without_token",
    "client.disallow_anonymous_connection_tokens", "client.ping_interval", "client.pong_timeout",
    "client.expired_close_delay", "client.expired_sub_close_delay", "client.stale_close_delay",
    "client.channel_limit", "client.queue_max_size", "client.presence_update_interval",
    "client.concurrency", "client.channel_position_check_delay", "client.channel_position_max_time_lag",
    "client.connection_limit", "client.user_connection_limit", "client.connection_rate_limit",
    "client.connect_include_server_time", "client.history_max_publication_limit",
    "client.recovery_max_publication_limit", "client.insecure_skip_token_signature_verify",
    "client.user_id_http_header", "client.insecure",
    "client.subscribe_to_user_personal_channel.enabled",
    "client.subscribe_to_user_personal_channel.personal_channel_namespace",
    "client.subscribe_to_user_personal_channel.single_connection",
    "client.connect_code_to_unidirectional_disconnect", "channel.proxy", "channel.namespaces",
    "channel.history_meta_ttl", "channel.max_length", "channel.private_prefix",
    "channel.namespace_boundary", "channel.user_boundary", "channel.user_separator", "rpc.proxy",
    "rpc.without_namespace", "rpc.namespaces", "rpc.ping.enabled", "rpc.ping.method",
    "rpc.namespace_boundary", "proxies", "http_api.disabled", "http_api.handler_prefix", "http_api.key",
    "http_api.error_mode", "http_api.external", "http_api.insecure", "grpc_api.enabled",
    "grpc_api.error_mode", "grpc_api.address", "grpc_api.port", "grpc_api.key", "grpc_api.tls.enabled",
    "grpc_api.reflection", "grpc_api.max_receive_message_size", "consumers", "websocket.disabled",
    "websocket.handler_prefix", "websocket.compression", "websocket.compression_min_size",
    "websocket.compression_level", "websocket.read_buffer_size", "websocket.use_write_buffer_pool",
    "websocket.write_buffer_size", "websocket.write_timeout", "websocket.message_size_limit",
    "sse.enabled", "sse.handler_prefix", "sse.max_request_body_size", "http_stream.enabled",
    "http_stream.handler_prefix", "http_stream.max_request_body_size", "webtransport",
    "uni_sse.enabled", "uni_sse.handler_prefix", "uni_sse.max_request_body_size",
    "uni_sse.connect_code_to_http_response", "uni_http_stream.enabled",
    "uni_http_stream.handler_prefix", "uni_http_stream.max_request_body_size",
    "uni_http_stream.connect_code_to_http_response", "uni_websocket.enabled",
    "uni_websocket.handler_prefix", "uni_websocket.compression", "uni_websocket.compression_min_size",
    "uni_websocket.compression_level", "uni_websocket.read_buffer_size",
    "uni_websocket.use_write_buffer_pool", "uni_websocket.write_buffer_size",
    "uni_websocket.write_timeout", "uni_websocket.message_size_limit",
    "uni_websocket.join_push_messages", "uni_grpc", "emulation.handler_prefix",
    "emulation.max_request_body_size", "admin", "prometheus.enabled", "prometheus.handler_prefix",
    "prometheus.instrument_http_handlers", "health.enabled", "health.handler_prefix", "swagger",
    "debug", "opentelemetry", "graphite", "usage_stats", "node.name",
    "node.info_metrics_aggregate_interval", "shutdown.timeout",
)  # fmt: skip
CENTRIFUGO_V6_CHANNEL_OPTIONS = (
    "presence", "join_leave", "force_push_join_leave", "history_size", "history_ttl",
    "history_meta_ttl", "force_positioning", "allow_positioning", "force_recovery", "allow_recovery",
    "force_recovery_mode", "allowed_delta_types", "delta_publish", "allow_subscribe_for_anonymous",
    "allow_subscribe_for_client", "allow_publish_for_anonymous", "allow_publish_for_subscriber",
    "allow_publish_for_client", "allow_presence_for_anonymous", "allow_presence_for_subscriber",
    "allow_presence_for_client", "allow_history_for_anonymous", "allow_history_for_subscriber",
    "allow_history_for_client", "allow_user_limited_channels", "channel_regex", "allow_tags_filter",
    "subscribe_proxy_enabled", "subscribe_proxy_name", "publish_proxy_enabled", "publish_proxy_name",
    "sub_refresh_proxy_enabled", "sub_refresh_proxy_name", "subscribe_stream_proxy_enabled",
    "subscribe_stream_proxy_name", "subscribe_stream_proxy_bidirectional",
)  # fmt: skip


def test_docs_table_is_generated_from_the_code() -> None:
    current = config_doc.DOC_PATH.read_text(encoding="utf-8")
    assert config_doc.render(current) == current, "run: python -m gateway.config.doc --write"
    migration = config_doc.MIGRATION_PATH.read_text(encoding="utf-8")
    assert config_doc.render(migration, config_doc.migration_markdown) == migration


def test_check_mode_reports_a_stale_document(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stale = tmp_path / "configuration.md"
    stale.write_text(f"x\n{config_doc.BEGIN}\nold\n{config_doc.END}\n")
    migration = tmp_path / "migrating-from-centrifugo.md"
    migration.write_text(f"y\n{config_doc.BEGIN}\n{config_doc.END}\n")
    monkeypatch.setattr(config_doc, "DOC_PATH", stale)
    monkeypatch.setattr(config_doc, "MIGRATION_PATH", migration)
    assert config_doc.main(["--check"]) == 1
    assert config_doc.main(["--write"]) == 0
    assert config_doc.main(["--check"]) == 0


@pytest.mark.parametrize("path", CENTRIFUGO_V6_OPTIONS)
def test_every_centrifugo_option_is_supported_or_says_what_to_do(path: str) -> None:
    assert config_doc.status(path) is not None, f"{path}: neither a field nor in config_unsupported"


@pytest.mark.parametrize("name", CENTRIFUGO_V6_CHANNEL_OPTIONS)
def test_every_centrifugo_channel_option_is_supported_or_says_what_to_do(name: str) -> None:
    assert config_doc.status(f"channel.namespaces[].{name}") is not None


def test_no_stale_unsupported_entries() -> None:
    """A field wins over an entry in config_unsupported: such an entry is dead and must go."""
    supported = {opt.path for opt in config_doc.options()}
    assert [path for path in UNSUPPORTED if path in supported] == []
    channel = {opt.path for opt in config_doc.channel_options()}
    assert [name for name in UNSUPPORTED_CHANNEL_OPTIONS if name in channel] == []


def test_wrong_bidirectional_name_is_unknown_and_the_real_one_supported() -> None:
    settings, warnings = load_settings(
        None,
        {
            "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_SUBSCRIBE_STREAM_PROXY_BIDIRECTIONAL": "true",
            "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_SUBSCRIBE_STREAM_BIDIRECTIONAL": "true",
        },
    )
    assert warnings == [
        'unknown environment variable "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_SUBSCRIBE_STREAM_BIDIRECTIONAL"'
    ]
    assert settings.channel.without_namespace.subscribe_stream_proxy_bidirectional


@pytest.mark.parametrize(
    "env",
    [
        "CENTRIFUGO_GRPC_API_ENABLED",
        "CENTRIFUGO_CLIENT_SUBSCRIBE_TO_USER_PERSONAL_CHANNEL_ENABLED",
        "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_ALLOWED_DELTA_TYPES",
        "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_DELTA_PUBLISH",
        "CENTRIFUGO_UNI_WEBSOCKET_ENABLED",
        "CENTRIFUGO_HTTP_SERVER_INTERNAL_PORT",
        "CENTRIFUGO_INIT_ENABLED",
    ],
)
def test_v6_env_vars_are_not_unknown(env: str) -> None:
    value = "fossil" if env.endswith("DELTA_TYPES") else "9001" if env.endswith("PORT") else "true"
    _, warnings = load_settings(None, {env: value})
    assert not any("unknown" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("env", "option"),
    [
        ("CENTRIFUGO_MAP_BROKER_TYPE", "map_broker"),
        ("CENTRIFUGO_CONTROLLER_TYPE", "controller"),
        ("CENTRIFUGO_PID_FILE", "pid_file"),
        ("CENTRIFUGO_ENGINE_REDIS_SENTINEL_TLS_ENABLED", "engine.redis.sentinel_tls"),
    ],
)
def test_v68_sections_and_env_vars_are_unsupported_with_advice(env: str, option: str) -> None:
    _, warnings = load_settings(None, {env: "true"})
    assert len(warnings) == 1
    assert warnings[0].startswith(f'unsupported environment variable "{env}" ({option}: a Centrifugo option')


def test_websocket_write_timeout_is_named_unsupported_not_silently_ignored() -> None:
    """It was a schema field that nothing enforced (accepted, then behaved differently)."""
    _, warnings = load_settings(None, {"CENTRIFUGO_WEBSOCKET_WRITE_TIMEOUT": "2s"})
    assert warnings and warnings[0].startswith(
        'unsupported environment variable "CENTRIFUGO_WEBSOCKET_WRITE_TIMEOUT"'
    )


@pytest.mark.parametrize("section", ["map_broker", "controller", "pid_file"])
def test_v68_sections_in_a_file_are_unsupported(section: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    path = tmp_path / "c.json"
    path.write_text(json.dumps({section: "/run/x.pid" if section == "pid_file" else {"enabled": True}}))
    _, warnings = load_settings(str(path), {})
    assert len(warnings) == 1 and warnings[0].startswith(f'unsupported option "{section}" (')
