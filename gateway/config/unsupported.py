"""The Centrifugo v6 options Taskcast does not implement, each with one line saying what to do
instead (docs/configuration.md's table is generated from this and ``schema``).

An option that is a field of ``schema.Settings`` is supported, and a field always wins
over an entry here: adding support for an option means adding its field (then delete the entry;
``tests/gateway/test_config_doc.py`` lists stale ones). A path names an option or a whole
section (everything under it). Pure data and lookups: imports nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

_PROXY = "use client.proxy.connect / client.proxy.refresh (Centrifugo v6 names) or connection JWTs"
_BUFFERS = "buffers are managed by the server; drop the option"
_WRITES = "writes never block; a client behind by client.queue_max_size bytes is disconnected (3008)"

_CONSUMER_TYPE = (
    "not supported (no such broker runs in Taskcast's tests): use a postgresql, redis_stream or "
    "nats_jetstream consumer, or the server API"
)
_CONSUMER_REDIS = "a redis_stream consumer reads one standalone Redis: set address"
_CONSUMER_REDIS_OPTIONS = (
    "cluster_address",
    "sentinel_address",
    "sentinel_user",
    "sentinel_password",
    "sentinel_master_name",
    "sentinel_client_name",
    "sentinel_tls",
    "force_resp2",
    "replica_client",
)

V6_9_UNSUPPORTED: Mapping[str, str] = MappingProxyType(
    {
        "channel.publication_data_format": (
            "publication data is not validated by format: validate it before publishing"
        ),
        "client.token.insecure_skip_jwks_endpoint_safety_check": (
            "client.token.jwks_public_endpoint is a fixed URL (no templates filled from token "
            "claims), so there is no check to skip: drop the option"
        ),
        "client.subscription_token.insecure_skip_jwks_endpoint_safety_check": (
            "client.subscription_token.jwks_public_endpoint is a fixed URL (no templates filled "
            "from token claims), so there is no check to skip: drop the option"
        ),
        "engine.redis.replica_client": "reads go to the Redis primary; replicas serve Sentinel failover",
        "http_server.h2c_external": "HTTP/2 is not served (HTTP/1.1 only, WebSocket too): drop the option",
        "http_server.external_http2_extended_connect": (
            "HTTP/2 is not served, so there is no extended CONNECT (RFC 8441); Centrifugo v6.9 "
            "itself only declares this option in a comment"
        ),
        "prometheus.native_histograms": "histograms are exported in the classic form (with buckets) only",
        "prometheus.recovered_publications_histogram": (
            "recoveries are counted by centrifugo_client_recover (recovered, "
            "has_recovered_publications) without a histogram of how many were recovered"
        ),
    }
)
"""The options Centrifugo v6.8 and v6.9 added that Taskcast does not implement."""

UNSUPPORTED: Mapping[str, str] = MappingProxyType(
    {
        # sections (v6.0 - v6.8)
        "admin.web_path": "the admin UI's files are part of the gateway (gateway/admin/static/)",
        "admin.web_proxy_address": "the admin UI's files are part of the gateway (gateway/admin/static/)",
        "broker": "use engine.type (memory or redis); NATS and Redis+NATS brokers are not available",
        "presence_manager": "use engine.type: presence always lives in the engine",
        "map_broker": (
            "maps live in the engine (engine.type memory or redis, beside history); the "
            "postgresql map broker is not available"
        ),
        "controller": "nodes talk over the engine's Redis (cluster control channel); nothing to set",
        "pid_file": "run under a supervisor (systemd, Docker) that tracks the process",
        "enable_unreleased_features": "there are no unreleased features: drop the option",
        # consumers: the types and options no test of Taskcast runs (docs/consumers.md)
        "consumers[].kafka": _CONSUMER_TYPE,
        "consumers[].google_pub_sub": _CONSUMER_TYPE,
        "consumers[].aws_sqs": _CONSUMER_TYPE,
        "consumers[].azure_service_bus": _CONSUMER_TYPE,
        **{f"consumers[].redis_stream.{option}": _CONSUMER_REDIS for option in _CONSUMER_REDIS_OPTIONS},
        "uni_grpc": "use uni_websocket, uni_sse or uni_http_stream",
        "webtransport": "use websocket",
        "opentelemetry.google_cloud_adc_auth": (
            "export to a collector (OTEL_EXPORTER_OTLP_ENDPOINT) that authenticates to Google Cloud"
        ),
        "graphite": "scrape the Prometheus endpoint (prometheus.enabled) instead",
        "debug": "profile with py-spy; health and metrics are in health and prometheus",
        "usage_stats": "Taskcast sends no usage statistics: nothing to disable",
        "swagger": "the server API is described in docs/gateway.md",
        "tls": "Centrifugo v5 name: use http_server.tls",
        "tls_autocert": "Centrifugo v5 name: see http_server.tls_autocert",
        # http_server
        "http_server.tls_autocert": "get certificates with an ACME client (certbot) and set http_server.tls",
        "http_server.tls_external": "http_server.tls covers both listeners; keep internal_port private",
        "http_server.internal_tls": "the internal listener uses http_server.tls",
        "http_server.http3": "use WebSocket over HTTP/1.1",
        "http_api.external": "with http_server.internal_port set, the API is on the internal listener only",
        "grpc_api.reflection": "no server reflection: give clients gateway/api/grpc/api.proto",
        # client
        "client.connect_proxy_name": _PROXY,
        "client.refresh_proxy_name": _PROXY,
        "client.user_id_http_header": "authenticate with a connection JWT (the proxy in front can mint one)",
        "client.concurrency": "one connection's commands run in order; nothing to tune",
        "client.channel_position_max_time_lag": "see client.channel_position_check_delay",
        "client.connect_code_to_unidirectional_disconnect": (
            "unidirectional transports close with the connect error's disconnect code"
        ),
        # engine
        "engine.redis.history_use_lists": "history always uses Redis Streams: drop the option",
        "engine.redis.force_resp2": "Taskcast always speaks RESP2 to Redis: drop the option",
        "engine.redis.sentinel_tls": "Sentinel links are plain TCP; TLS covers the Redis nodes",
        "engine.redis.presence_hash_field_ttl": "presence entries expire by engine.redis.presence_ttl",
        "engine.redis.presence_user_mapping": "presence entries expire by engine.redis.presence_ttl",
        # transports, metrics, node
        "websocket.write_timeout": _WRITES,
        "uni_websocket.write_timeout": _WRITES,
        "websocket.read_buffer_size": _BUFFERS,
        "websocket.write_buffer_size": _BUFFERS,
        "websocket.use_write_buffer_pool": _BUFFERS,
        "uni_websocket.read_buffer_size": _BUFFERS,
        "uni_websocket.write_buffer_size": _BUFFERS,
        "uni_websocket.use_write_buffer_pool": _BUFFERS,
        "uni_sse.connect_code_to_http_response": "a refused connect ends with a disconnect push",
        "uni_http_stream.connect_code_to_http_response": "a refused connect ends with a disconnect push",
        "prometheus.instrument_http_handlers": "per-handler HTTP metrics are not exported",
        "node.info_metrics_aggregate_interval": "node gauges are computed on each scrape",
        **V6_9_UNSUPPORTED,
    }
)
"""Option path (or section) -> what to do instead."""

UNSUPPORTED_CHANNEL_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "auto_cache_recover": "use force_recovery with force_recovery_mode",
        "publication_data_format": "publication data is JSON; send binary as base64 inside JSON",
    }
)
"""Namespace option name (``channel.without_namespace.<name>``, ``channel.namespaces[].<name>``)
-> what to do instead."""

_ENV = "CENTRIFUGO_"
_NAMESPACES_ENV = _ENV + "CHANNEL_NAMESPACES_"
_WITHOUT_NAMESPACE_ENV = _ENV + "CHANNEL_WITHOUT_NAMESPACE_"


def env_name(path: str) -> str:
    """Centrifugo's environment variable of an option path (``a.b_c`` -> ``CENTRIFUGO_A_B_C``)."""
    return _ENV + path.upper().replace(".", "_")


def advice_for(path: str, *, namespace_option: str | None = None) -> str | None:
    """What to do instead of the unsupported option at ``path`` (or of the namespace option
    named ``namespace_option``), or None when it is not a known unsupported option."""
    if namespace_option is not None and namespace_option in UNSUPPORTED_CHANNEL_OPTIONS:
        return UNSUPPORTED_CHANNEL_OPTIONS[namespace_option]
    parts = re.sub(r"\[[^\]]*\]", "[]", path).split(".")  # proxies[name].x -> proxies[].x
    for end in range(len(parts), 0, -1):
        found = UNSUPPORTED.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def env_advice(name: str, supported: Mapping[str, object] | None = None) -> tuple[str, str] | None:
    """(option path, advice) for a ``CENTRIFUGO_`` variable of an unsupported option, else None.

    ``supported`` holds the env names the schema supports: a supported name never matches a
    section prefix here (``CENTRIFUGO_GRPC_API_PORT`` stays supported even while a sibling is
    listed)."""
    if supported is not None and name in supported:
        return None
    for option, advice in UNSUPPORTED_CHANNEL_OPTIONS.items():
        # An option that is a section (map, shared_poll) covers its sub-options' variables.
        suffix = "_" + option.upper()
        without = _WITHOUT_NAMESPACE_ENV + option.upper()
        if name == without or name.startswith(without + "_"):
            return f"channel.without_namespace.{option}", advice
        rest = name[len(_NAMESPACES_ENV) :]
        if name.startswith(_NAMESPACES_ENV) and (
            (rest.endswith(suffix) and len(rest) > len(suffix)) or suffix + "_" in rest[1:]
        ):
            return f"channel.namespaces[].{option}", advice
    best: tuple[str, str] | None = None
    for path, advice in UNSUPPORTED.items():
        prefix = env_name(path)
        if (name == prefix or name.startswith(prefix + "_")) and (best is None or len(path) > len(best[0])):
            best = (path, advice)
    return best
