"""Pure relay logic: backoff with full jitter, error classification, sanitizing, collapse of
superseded progress, configuration and the crash hook parser. No services needed."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.backoff import ceiling, full_jitter
from relay.cli import loop_factory
from relay.config import ConfigError, build_config, load_config
from relay.publisher import (
    Outcome,
    classify_api_error,
    classify_exception,
    classify_status,
    committed_at_ms,
    idempotency_key,
    publish_params,
    sanitize,
)
from relay.relay import Relay, split_superseded
from status_api.storage.outbox import OutboxRow
from tests.relay.crashing_relay import crash_hook

BASE = {"database_url": "sqlite+aiosqlite:///x.db", "gateway_api_url": "http://gw:8000/api"}


def row(
    rid: int, version: int, channel: str = "task_user:t1/u1", priority: int = 0, task: str = "a"
) -> OutboxRow:
    return OutboxRow(
        id=rid,
        aggregate_type="task",
        aggregate_id=task,
        aggregate_version=version,
        channel=channel,
        projection="USER_SUMMARY",
        payload={"v": version},
        priority=priority,
        attempts=1,
        created_at=datetime(2026, 9, 21, 7, 10, 18, 123000),
    )


# --- backoff -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(0, 0.5), (1, 0.5), (2, 1.0), (3, 2.0), (7, 32.0), (8, 60.0), (50, 60.0), (10_000, 60.0)],
)
def test_backoff_ceiling_doubles_then_caps(attempt: int, expected: float) -> None:
    assert ceiling(attempt, 0.5, 60.0) == expected


def test_full_jitter_spans_zero_to_the_ceiling() -> None:
    assert full_jitter(3, 0.5, 60.0, rand=lambda: 0.0) == 0.0
    assert full_jitter(3, 0.5, 60.0, rand=lambda: 0.5) == 1.0
    assert full_jitter(3, 0.5, 60.0, rand=lambda: 0.999999) == pytest.approx(2.0, abs=1e-5)


@given(
    attempt=st.integers(min_value=-5, max_value=10_000),
    base=st.floats(min_value=0.001, max_value=10),
    cap=st.floats(min_value=10, max_value=3600),
    r=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_full_jitter_is_bounded_for_any_attempt(attempt: int, base: float, cap: float, r: float) -> None:
    delay = full_jitter(attempt, base, cap, rand=lambda: r)
    assert 0.0 <= delay <= cap


# --- classification ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "outcome", "klass", "unavailable"),
    [
        (500, Outcome.RETRY, "http_5xx", True),
        (502, Outcome.RETRY, "http_5xx", True),
        (503, Outcome.RETRY, "http_5xx", True),
        (429, Outcome.RETRY, "http_429", True),
        (401, Outcome.RETRY, "http_auth", True),
        (403, Outcome.RETRY, "http_auth", True),
        (400, Outcome.DEAD, "http_4xx", False),
        (404, Outcome.DEAD, "http_4xx", False),
        (413, Outcome.DEAD, "http_4xx", False),
        (422, Outcome.DEAD, "http_4xx", False),
    ],
)
def test_http_status_classification(status: int, outcome: Outcome, klass: str, unavailable: bool) -> None:
    assert classify_status(status) == (outcome, klass, unavailable)


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (100, Outcome.RETRY),  # internal (temporary engine error)
        (111, Outcome.RETRY),  # too many requests
        (102, Outcome.DEAD),  # unknown channel
        (107, Outcome.DEAD),  # bad request
        (108, Outcome.DEAD),  # not available
        (104, Outcome.DEAD),
        (112, Outcome.DEAD),
    ],
)
def test_api_error_classification(code: int, outcome: Outcome) -> None:
    assert classify_api_error(code) == (outcome, f"api_{code}")


def test_transport_exceptions_are_transient() -> None:
    from relay.http_client import ProtocolError

    assert classify_exception(TimeoutError()) == ("timeout", True)
    assert classify_exception(ConnectionRefusedError("refused")) == ("connect", True)
    assert classify_exception(ProtocolError("not HTTP")) == ("connect", True)
    assert classify_exception(OSError("reset")) == ("connect", True)


def test_sanitize_masks_secrets_and_bounds_length() -> None:
    text = "boom X-API-Key: s3cr3t-key token=abc.def.ghi\nsecond line with s3cr3t-key"
    out = sanitize(text, ["s3cr3t-key"])
    assert "s3cr3t-key" not in out and "abc.def.ghi" not in out
    assert "\n" not in out
    assert len(sanitize("x" * 5000)) == 512


# --- publication shape -------------------------------------------------------------------------


def test_publish_params_carry_idempotency_key_and_commit_time_tag() -> None:
    r = row(1, 12)
    params = publish_params(r)
    assert params["idempotency_key"] == idempotency_key(r) == "a:12:task_user:t1/u1"
    assert params["tags"] == {"task": "a", "committed_at_ms": str(committed_at_ms(r.created_at))}
    assert committed_at_ms(datetime(1970, 1, 1, 0, 0, 1, 500000)) == 1500
    assert params["data"] == {"v": 12} and params["channel"] == "task_user:t1/u1"
    assert publish_params(r, 1234)["tags"]["published_at_ms"] == "1234"  # the relay's send time


def test_publications_are_tagged_with_their_task_and_never_conflate_unless_supersedable() -> None:
    # seed §13.3: the gateway keeps only a task's newest progress, never a notice/terminal/new task.
    assert publish_params(row(1, 3))["tags"]["task"] == "a"
    assert "conflate" not in publish_params(row(1, 3))["tags"]
    for priority in (5, 10):  # NEW_AGGREGATE (a task's first version), NOTICE (notice, terminal, attempt)
        tags = publish_params(row(1, 3, priority=priority))["tags"]
        assert tags["task"] == "a" and tags["conflate"] == "never"


def test_split_superseded_keeps_newest_and_every_priority_row() -> None:
    rows = [
        row(1, 2),
        row(2, 3),
        row(3, 4, priority=10),  # a notice: never collapsed
        row(4, 5),
        row(5, 3, channel="task_detail:t1/a"),  # other channel: its own newest
        row(6, 1, task="b"),
    ]
    keep, drop = split_superseded(rows)
    assert [r.id for r in keep] == [3, 4, 5, 6]
    assert [r.id for r in drop] == [1, 2]


# --- configuration -----------------------------------------------------------------------------


def test_config_defaults_and_env_overrides() -> None:
    cfg = load_config(
        None,
        {
            "TASKCAST_RELAY_DATABASE_URL": "mysql+asyncmy://u:p@db/x",
            "TASKCAST_RELAY_GATEWAY_API_URL": "http://gw:8000/api",
            "TASKCAST_RELAY_GATEWAY_API_KEY": "12345",
            "TASKCAST_RELAY_BATCH_SIZE": "250",
            "TASKCAST_RELAY_METRICS_PORT": "9108",
        },
    )
    assert cfg.batch_size == 250 and cfg.metrics_port == 9108
    assert cfg.gateway_api_key == "12345"  # a numeric-looking secret stays a string
    assert "12345" not in repr(cfg)
    assert cfg.relay_id  # hostname-pid by default


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"batch_sise": 10}, "batch_sise: unknown option"),
        ({"batch_size": "ten"}, "batch_size: expected int"),
        ({"batch_size": 0}, "batch_size: must be > 0"),
        ({"wake_poll_interval_seconds": 0}, "wake_poll_interval_seconds: must be > 0"),
        ({"claim_spacing_ms": 101}, "claim_spacing_ms: must be 0..100"),
        ({"claim_spacing_ms": -1}, "claim_spacing_ms: must be 0..100"),
        ({"poll_interval_seconds": -1}, "poll_interval_seconds"),
        ({"lease_seconds": 1.0, "publish_timeout_seconds": 1.0}, "lease_seconds"),
        ({"backoff_base_seconds": 10, "backoff_max_seconds": 1}, "backoff_max_seconds"),
        ({"gateway_api_url": "gw:8000"}, "gateway_api_url"),
        ({"database_url": ""}, "database_url: required"),
        ({"metrics_port": 70000}, "metrics_port"),
        ({"relay_id": "x" * 200}, "relay_id"),
        ({"collapse_superseded_progress": "yes"}, "collapse_superseded_progress"),
        ({"linger_ms": -1}, "linger_ms: must be 0..1000"),
        ({"linger_ms": 5000}, "linger_ms: must be 0..1000"),
        ({"mark_defer_ms": -1}, "mark_defer_ms: must be 0..5000"),
        ({"mark_defer_ms": 6000}, "mark_defer_ms: must be 0..5000"),
        ({"event_loop": "trio"}, "event_loop: must be auto, uvloop or asyncio"),
    ],
)
def test_bad_options_refuse_to_start_naming_the_option(raw: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        build_config({**BASE, **raw})


def test_relay_run_picks_uvloop_unless_told_asyncio() -> None:
    """``event_loop``: ``auto`` (the default) and ``uvloop`` run ``relay run`` on uvloop (installed
    with the package); ``asyncio`` on the standard library's loop."""
    import uvloop

    assert build_config(BASE).event_loop == "auto"
    assert loop_factory(build_config(BASE)) is uvloop.new_event_loop
    assert loop_factory(build_config({**BASE, "event_loop": "uvloop"})) is uvloop.new_event_loop
    assert loop_factory(build_config({**BASE, "event_loop": "asyncio"})) is None


def test_the_deferred_mark_bound_stays_a_quarter_of_the_lease() -> None:
    """A published row waits for its deferred mark under its lease: the bound in force is
    ``mark_defer_ms``, at most ``lease_seconds / 4``; 0 marks at once."""
    assert build_config(BASE).mark_defer_seconds == 0.5
    short_lease = {"lease_seconds": 10, "publish_timeout_seconds": 2}
    assert build_config({**BASE, **short_lease, "mark_defer_ms": 5000}).mark_defer_seconds == 2.5
    assert build_config({**BASE, "mark_defer_ms": 0}).mark_defer_seconds == 0


def test_wrong_type_for_the_api_key_is_reported_without_its_value() -> None:
    with pytest.raises(ConfigError) as exc:
        build_config({**BASE, "gateway_api_key": 123456789})
    assert "123456789" not in str(exc.value) and "gateway_api_key" in str(exc.value)


def test_yaml_file_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "relay.yaml"
    f.write_text("database_url: sqlite+aiosqlite:///r.db\ngateway_api_url: http://gw/api\nbatch_size: 7\n")
    assert load_config(f, {}).batch_size == 7
    with pytest.raises(ConfigError, match="config file"):
        load_config(tmp_path / "nope.json", {})


def test_crash_hook_parser() -> None:
    hook = crash_hook("after_mark:3")
    hook("after_mark")
    hook("before_publish")  # other points do not count
    hook("after_mark")
    with pytest.raises(ValueError):
        crash_hook("somewhere:1")


def test_production_code_reads_no_test_switch() -> None:
    """The crash points are armed by a test-only entry point, never by the environment: only
    config.py reads the environment, and nothing reads a TASKCAST_TEST_* variable."""
    for path in (Path(__file__).resolve().parents[2] / "relay").glob("*.py"):
        text = path.read_text()
        assert "TASKCAST_TEST" not in text, path.name
        if path.name != "config.py":
            assert "os.environ" not in text and "getenv" not in text, path.name


def test_a_returning_gateway_is_probed_within_a_second_whatever_the_outage_length() -> None:
    """Issue 16: a 30 s outage's backlog drains within 2 s of the gateway's return, so the pause
    between probes is capped at ``gateway_probe_max_seconds`` (1 s), not the 5 s database backoff."""
    cfg = build_config({"database_url": "sqlite+aiosqlite:///x.db", "gateway_api_url": "http://g/api"})
    relay = Relay(None, None, cfg, rand=lambda: 0.999999)  # type: ignore[arg-type]
    assert max(relay.probe_pause(n) for n in range(1, 40)) <= 1.0
    assert relay._pause(30) > 4.0  # database errors keep their longer backoff
