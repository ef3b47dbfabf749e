"""The consumers' dispatch (gateway/consumers/dispatch.py): Centrifugo's verdict on each consumed
message, in process against a recording executor. Bad input (bad JSON, unknown method, oversized
payload, a command the API refuses) is skipped, counted per reason and logged once per interval
with the count held back; error 100 is the one failure that keeps the message."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.api.requests import ApiError
from gateway.consumers.dispatch import (
    ConsumerMetrics,
    Dispatcher,
    RetryLater,
    SkipReason,
    Verdict,
    backoff,
    parse_flag,
)
from gateway.log_limit import LogLimiter
from gateway.protocol import codes


class Recorder:
    """An executor that records calls; ``fail`` maps a method to the ApiError it raises."""

    def __init__(
        self, fail: dict[str, codes.Error] | None = None, result: dict[str, Any] | None = None
    ) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail = fail or {}
        self.result = result or {}

    async def __call__(self, method: str, params: object) -> dict[str, Any]:
        self.calls.append((method, params))
        if method in self.fail:
            raise ApiError(self.fail[method], "test")
        return self.result


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(
    execute: Recorder, *, max_size: int = 1024, clock: Clock | None = None
) -> tuple[Dispatcher, CollectorRegistry]:
    registry = CollectorRegistry()
    limiter = LogLimiter(logging.getLogger("taskcast.gateway.consumers"), 10.0, clock or Clock())
    metrics = ConsumerMetrics(registry)
    metrics.init("c1")
    return Dispatcher("c1", execute, metrics, max_size, limiter), registry


def skipped(registry: CollectorRegistry, reason: SkipReason) -> float:
    value = registry.get_sample_value(
        "taskcast_gateway_consumer_messages_skipped_total", {"consumer_name": "c1", "reason": reason.value}
    )
    return value or 0.0


PUBLISH = json.dumps({"channel": "news", "data": {"n": 1}, "idempotency_key": "k1"})


async def test_a_method_and_its_request_run_through_the_executor() -> None:
    execute = Recorder()
    dispatcher, _ = make(execute)
    assert await dispatcher.command("publish", PUBLISH) == Verdict.DONE
    assert execute.calls == [("publish", {"channel": "news", "data": {"n": 1}, "idempotency_key": "k1"})]


@pytest.mark.parametrize(
    "document",
    [
        {"method": "publish", "payload": {"channel": "news", "data": 1}},
        {"method": "publish", "payload": json.dumps({"channel": "news", "data": 1})},  # CDC: JSONB as text
    ],
)
async def test_a_document_carries_its_method(document: dict[str, object]) -> None:
    execute = Recorder()
    dispatcher, _ = make(execute)
    assert await dispatcher.command("", json.dumps(document).encode()) == Verdict.DONE
    assert execute.calls == [("publish", {"channel": "news", "data": 1})]


@pytest.mark.parametrize(
    ("method", "payload", "reason"),
    [
        ("publish", b"{not json", SkipReason.MALFORMED),
        ("", b"[1, 2]", SkipReason.MALFORMED),
        ("", json.dumps({"method": "publish", "payload": "{not json"}).encode(), SkipReason.MALFORMED),
        ("", json.dumps({"method": 5}).encode(), SkipReason.MALFORMED),
        ("presence", PUBLISH.encode(), SkipReason.UNKNOWN_METHOD),  # reads are not consumed
        ("batch", b"{}", SkipReason.UNKNOWN_METHOD),
        ("no_such_method", b"{}", SkipReason.UNKNOWN_METHOD),
        ("publish", json.dumps({"channel": "x", "data": "a" * 2000}).encode(), SkipReason.OVERSIZED),
        ("publish", None, SkipReason.NO_PAYLOAD),
    ],
)
async def test_bad_input_is_skipped_and_counted_never_executed(
    method: str, payload: bytes | None, reason: SkipReason
) -> None:
    execute = Recorder()
    dispatcher, registry = make(execute)
    assert await dispatcher.command(method, payload) == Verdict.SKIPPED
    assert execute.calls == []
    assert skipped(registry, reason) == 1


@pytest.mark.parametrize(
    "error", [codes.ERROR_BAD_REQUEST, codes.ERROR_UNKNOWN_CHANNEL, codes.ERROR_NOT_AVAILABLE]
)
async def test_an_api_refusal_other_than_100_is_skipped(error: codes.Error) -> None:
    dispatcher, registry = make(Recorder(fail={"publish": error}))
    assert await dispatcher.command("publish", PUBLISH) == Verdict.SKIPPED
    assert skipped(registry, SkipReason.REJECTED) == 1


async def test_error_100_keeps_the_message() -> None:
    dispatcher, registry = make(Recorder(fail={"publish": codes.ERROR_INTERNAL}))
    with pytest.raises(RetryLater):
        await dispatcher.command("publish", PUBLISH)
    assert skipped(registry, SkipReason.REJECTED) == 0


async def test_a_broadcast_with_one_channel_failing_100_is_retried_whole() -> None:
    result = {"responses": [{"result": {}}, {"error": {"code": 100, "message": "internal server error"}}]}
    dispatcher, _ = make(Recorder(result=result))
    with pytest.raises(RetryLater):
        await dispatcher.command("broadcast", json.dumps({"channels": ["a", "b"], "data": 1}))
    refused = {"responses": [{"result": {}}, {"error": {"code": 102, "message": "unknown channel"}}]}
    dispatcher, _ = make(Recorder(result=refused))
    assert (
        await dispatcher.command("broadcast", json.dumps({"channels": ["a", "b"], "data": 1})) == Verdict.DONE
    )


async def test_an_executor_fault_keeps_the_message() -> None:
    async def broken(method: str, params: object) -> dict[str, Any]:
        raise RuntimeError("bug")

    dispatcher, _ = make(Recorder())
    dispatcher.execute = broken
    with pytest.raises(RetryLater):
        await dispatcher.command("publish", PUBLISH)


async def test_skips_are_logged_once_per_reason_with_the_count_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    dispatcher, registry = make(Recorder(), clock=clock)
    caplog.set_level(logging.ERROR, "taskcast.gateway.consumers")
    for _ in range(5):
        await dispatcher.command("publish", b"{bad")
    for _ in range(3):
        await dispatcher.command("nope", b"{}")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "malformed" in lines[0] and "unknown_method" in lines[1]
    clock.now = 11.0
    await dispatcher.command("publish", b"{bad")
    assert "(4 more like this in the last 10 s)" in caplog.records[-1].getMessage()
    assert skipped(registry, SkipReason.MALFORMED) == 6
    assert skipped(registry, SkipReason.UNKNOWN_METHOD) == 3
    assert all("{bad" not in line for line in lines)  # payloads are not logged


async def test_publication_data_mode_publishes_the_bytes_as_they_are() -> None:
    execute = Recorder()
    dispatcher, _ = make(execute)
    raw = b"\x00binary\xff"
    verdict = await dispatcher.publication(
        ["a"], raw, idempotency_key="k", delta=True, tags={"t": "v"}, version=3
    )
    assert verdict == Verdict.DONE
    method, params = execute.calls[0]
    assert method == "publish"
    assert params == {
        "channel": "a",
        "b64data": base64.b64encode(raw).decode(),
        "idempotency_key": "k",
        "delta": True,
        "tags": {"t": "v"},
        "version": 3,
    }
    await dispatcher.publication(["a", "b", ""], b"{}")
    assert execute.calls[1][0] == "broadcast"
    assert execute.calls[1][1] == {"channels": ["a", "b"], "b64data": base64.b64encode(b"{}").decode()}
    assert await dispatcher.publication([""], b"{}") == Verdict.SKIPPED


def test_counters_carry_centrifugos_names_from_zero() -> None:
    _, registry = make(Recorder())
    assert (
        registry.get_sample_value("centrifugo_consumers_messages_processed_total", {"consumer_name": "c1"})
        == 0
    )
    assert registry.get_sample_value("centrifugo_consumers_errors_total", {"consumer_name": "c1"}) == 0


def test_backoff_doubles_from_10_ms_and_stops_at_5_s() -> None:
    assert 0.02 <= backoff(1, lambda: 0.0) < backoff(2, lambda: 0.0) < backoff(3, lambda: 0.0)
    assert backoff(50, lambda: 0.99) == 5.0
    assert backoff(1, lambda: 0.99) <= 0.04


@pytest.mark.parametrize(("text", "value"), [("", False), ("true", True), ("1", True), ("F", False)])
def test_flags_read_as_go_does(text: str, value: bool) -> None:
    assert parse_flag(text) is value


def test_a_flag_go_refuses_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_flag("yes")
