"""The ``consumers`` options (gateway/config/sections/consumers.py, consumer_checks.py): Centrifugo's
names and defaults, the types and options Taskcast refuses with the reason, the environment
variable, secrets masked in the logged configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings


def load(
    tmp_path: Path, consumers: list[dict[str, Any]], env: dict[str, str] | None = None
) -> tuple[Settings, list[str]]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"consumers": consumers}))
    return load_settings(str(path), env or {})


def refused(tmp_path: Path, consumer: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, [consumer])
    return info.value


PG: dict[str, Any] = {
    "name": "pg",
    "enabled": True,
    "type": "postgresql",
    "postgresql": {"dsn": "postgresql://u:pw@h/db", "outbox_table_name": "centrifugo_outbox"},
}


def test_centrifugos_defaults(tmp_path: Path) -> None:
    settings, warnings = load(tmp_path, [PG, {"name": "rs", "type": "redis_stream"}])
    pg = settings.consumers[0].postgresql
    assert (pg.num_partitions, pg.partition_select_limit, pg.partition_poll_interval) == (1, 100, 0.3)
    assert settings.consumers[1].enabled is False  # Centrifugo's default: off
    rs = settings.consumers[1].redis_stream
    assert (rs.visibility_timeout, rs.num_workers, rs.payload_value, rs.method_value) == (
        30.0,
        1,
        "payload",
        "method",
    )
    assert settings.consumers[0].max_message_size == 10 * 1024 * 1024
    assert warnings == []


def test_zero_values_take_centrifugos_defaults(tmp_path: Path) -> None:
    consumer = {**PG, "postgresql": {**PG["postgresql"], "num_partitions": 0, "partition_select_limit": 0}}
    pg = load(tmp_path, [consumer])[0].consumers[0].postgresql
    assert (pg.num_partitions, pg.partition_select_limit) == (1, 100)


@pytest.mark.parametrize("kind", ["kafka", "google_pub_sub", "aws_sqs", "azure_service_bus"])
def test_types_no_test_can_run_are_refused_when_enabled_and_warned_when_not(
    tmp_path: Path, kind: str
) -> None:
    error = refused(tmp_path, {"name": "bus", "enabled": True, "type": kind})
    assert error.option == "consumers[bus].type"
    assert "not supported" in error.problem and "no test has run" in error.problem
    _, warnings = load(tmp_path, [{"name": "bus", "type": kind, kind: {"x": 1}}])
    assert any("consumers[bus]" in w and "not supported" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("consumer", "option"),
    [
        ({**PG, "name": "x"}, "consumers[x].name"),
        ({**PG, "type": "rabbitmq"}, "consumers[pg].type"),
        ({**PG, "postgresql": {"outbox_table_name": "t"}}, "consumers[pg].postgresql.dsn"),
        (
            {**PG, "postgresql": {"dsn": "mysql://h/db", "outbox_table_name": "t"}},
            "consumers[pg].postgresql.dsn",
        ),
        (
            {**PG, "postgresql": {**PG["postgresql"], "outbox_table_name": "t; DROP TABLE x"}},
            "consumers[pg].postgresql.outbox_table_name",
        ),
        (
            {**PG, "postgresql": {**PG["postgresql"], "tls": {"enabled": True}}},
            "consumers[pg].postgresql.tls.enabled",
        ),
        (
            {"name": "rs", "enabled": True, "type": "redis_stream", "redis_stream": {"consumer_group": "g"}},
            "consumers[rs].redis_stream.streams",
        ),
        (
            {"name": "rs", "enabled": True, "type": "redis_stream", "redis_stream": {"streams": ["s"]}},
            "consumers[rs].redis_stream.consumer_group",
        ),
        (
            {
                "name": "rs",
                "enabled": True,
                "type": "redis_stream",
                "redis_stream": {"address": ["redis+cluster://h:1"], "streams": ["s"], "consumer_group": "g"},
            },
            "consumers[rs].redis_stream.address",
        ),
        (
            {
                "name": "rs",
                "enabled": True,
                "type": "redis_stream",
                "redis_stream": {"address": ["rediss://h:1"], "streams": ["s"], "consumer_group": "g"},
            },
            "consumers[rs].redis_stream.tls.enabled",
        ),
        (
            {
                "name": "nj",
                "enabled": True,
                "type": "nats_jetstream",
                "nats_jetstream": {"durable_consumer_name": "d"},
            },
            "consumers[nj].nats_jetstream.stream_name",
        ),
        (
            {"name": "nj", "enabled": True, "type": "nats_jetstream", "nats_jetstream": {"stream_name": "s"}},
            "consumers[nj].nats_jetstream.durable_consumer_name",
        ),
        (
            {
                "name": "nj",
                "enabled": True,
                "type": "nats_jetstream",
                "nats_jetstream": {
                    "stream_name": "s",
                    "durable_consumer_name": "d",
                    "deliver_policy": "last",
                },
            },
            "consumers[nj].nats_jetstream.deliver_policy",
        ),
        ({**PG, "max_message_size": 0}, "consumers[pg].max_message_size"),
    ],
)
def test_bad_consumers_stop_startup_naming_the_option(
    tmp_path: Path, consumer: dict[str, Any], option: str
) -> None:
    assert refused(tmp_path, consumer).option == option


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="duplicate name"):
        load(tmp_path, [PG, PG])


def test_sentinel_options_of_a_redis_stream_are_warned_and_ignored(tmp_path: Path) -> None:
    consumer = {"name": "rs", "type": "redis_stream", "redis_stream": {"sentinel_address": ["h:26379"]}}
    _, warnings = load(tmp_path, [consumer])
    assert warnings == [
        'unsupported option "consumers[rs].redis_stream.sentinel_address" (a Centrifugo option Taskcast '
        "ignores: a redis_stream consumer reads one standalone Redis: set address)"
    ]


def test_the_list_comes_from_centrifugo_consumers_and_per_name_overrides_are_unknown(tmp_path: Path) -> None:
    env = {
        "CENTRIFUGO_CONSUMERS": json.dumps([PG]),
        "CENTRIFUGO_CONSUMERS_PG_POSTGRESQL_DSN": "postgresql://x/y",
    }
    settings, warnings = load_settings(None, env)
    assert settings.consumers[0].postgresql.dsn == "postgresql://u:pw@h/db"
    assert warnings == ['unknown environment variable "CENTRIFUGO_CONSUMERS_PG_POSTGRESQL_DSN"']


def test_secrets_are_masked_in_the_logged_configuration(tmp_path: Path) -> None:
    nats = {"name": "nj", "type": "nats_jetstream", "nats_jetstream": {"token": "s3cret", "password": "pw2"}}
    settings, _ = load(tmp_path, [PG, nats])
    text = json.dumps(settings.redacted())
    assert "s3cret" not in text and "pw2" not in text and ":pw@" not in text
    assert "postgresql://u:***@h/db" in text
