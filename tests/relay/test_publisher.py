"""HttpGatewayPublisher against scripted gateway replies (httpx.MockTransport) and a closed port:
per-row results from /api/batch, whole-request failures, poison isolation, secrets in errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

import httpx
import orjson
import pytest

from relay.publisher import PUBLISHED, HttpGatewayPublisher, Outcome, PublishResult
from status_api.storage.outbox import OutboxRow
from tests.support import free_port

KEY = "publisher-test-key-0123456789"


def row(rid: int, channel: str = "task_user:t1/u1", payload: object = None) -> OutboxRow:
    return OutboxRow(
        id=rid,
        aggregate_type="task",
        aggregate_id=f"task-{rid}",
        aggregate_version=1,
        channel=channel,
        projection="USER_SUMMARY",
        payload=payload if payload is not None else {"n": rid},  # type: ignore[arg-type]
        priority=0,
        attempts=1,
        created_at=datetime(2026, 9, 21, 7, 10, 18),
    )


def publisher(
    handler: Callable[[httpx.Request], httpx.Response],
) -> tuple[HttpGatewayPublisher, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(record), headers={"X-API-Key": KEY})
    return HttpGatewayPublisher("http://gw/api", KEY, 1.0, client=client), seen


async def test_batch_replies_map_to_rows_in_order() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/batch"
        assert request.headers["X-API-Key"] == KEY
        body = json.loads(request.content)
        assert [c["publish"]["idempotency_key"] for c in body["commands"]] == [
            "task-1:1:task_user:t1/u1",
            "task-2:1:bad:chan",
            "task-3:1:task_user:t1/u1",
        ]
        return httpx.Response(
            200,
            json={
                "replies": [
                    {"publish": {"offset": 1, "epoch": "e"}},
                    {"error": {"code": 102, "message": "unknown channel"}},
                    {"error": {"code": 100, "message": "internal server error"}},
                ]
            },
        )

    pub, _ = publisher(handler)
    results = await pub.publish([row(1), row(2, "bad:chan"), row(3)])
    assert results[0] == PUBLISHED
    assert (results[1].outcome, results[1].failure_class, results[1].gateway_unavailable) == (
        Outcome.DEAD,
        "api_102",
        False,
    )
    assert (results[2].outcome, results[2].failure_class, results[2].gateway_unavailable) == (
        Outcome.RETRY,
        "api_100",
        False,
    )
    await pub.aclose()


@pytest.mark.parametrize(("status", "klass"), [(503, "http_5xx"), (429, "http_429"), (401, "http_auth")])
async def test_whole_request_failures_retry_every_row_as_unavailability(status: int, klass: str) -> None:
    pub, _ = publisher(lambda r: httpx.Response(status, text=f"nope {KEY}"))
    results = await pub.publish([row(1), row(2)])
    assert all(
        r.outcome is Outcome.RETRY and r.failure_class == klass and r.gateway_unavailable for r in results
    )
    assert all(KEY not in r.error for r in results)
    await pub.aclose()


async def test_batch_refused_as_a_whole_is_retried_row_by_row_to_isolate_the_poison() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/batch":
            return httpx.Response(413, text="request entity too large")
        body = json.loads(request.content)
        if body["channel"] == "huge:chan":
            return httpx.Response(413, text="request entity too large")
        return httpx.Response(200, json={"result": {}})

    pub, seen = publisher(handler)
    results = await pub.publish([row(1), row(2, "huge:chan"), row(3)])
    assert [r.outcome for r in results] == [Outcome.PUBLISHED, Outcome.DEAD, Outcome.PUBLISHED]
    assert [r.url.path for r in seen] == ["/api/batch"] + ["/api/publish"] * 3
    await pub.aclose()


async def test_unserializable_payload_is_dead_and_the_rest_still_publish() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["commands"])
        return httpx.Response(200, json={"replies": [{"publish": {}}] * n})

    pub, seen = publisher(handler)
    results = await pub.publish([row(1), row(2, payload={"bad": {1, 2}}), row(3)])
    assert [r.outcome for r in results] == [Outcome.PUBLISHED, Outcome.DEAD, Outcome.PUBLISHED]
    assert results[1].failure_class == "encode"
    assert len(seen) == 1 and len(json.loads(seen[0].content)["commands"]) == 2
    await pub.aclose()


async def test_timeout_and_malformed_replies_are_transient() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    pub, _ = publisher(slow)
    [res] = await pub.publish([row(1)])
    assert (res.outcome, res.failure_class, res.gateway_unavailable) == (Outcome.RETRY, "timeout", True)
    await pub.aclose()

    pub, _ = publisher(lambda r: httpx.Response(200, json={"replies": []}))
    results = await pub.publish([row(1), row(2)])
    assert {(r.outcome, r.failure_class) for r in results} == {(Outcome.RETRY, "bad_response")}
    await pub.aclose()


async def test_connection_refused_is_transient() -> None:
    pub = HttpGatewayPublisher(f"http://127.0.0.1:{free_port()}/api", KEY, 1.0)
    results = await pub.publish([row(1), row(2)])
    assert results == [PublishResult(Outcome.RETRY, "connect", results[0].error, True)] * 2
    assert KEY not in results[0].error
    await pub.aclose()


async def test_single_row_uses_publish_and_api_error_message_is_kept_sanitized() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/publish"
        return httpx.Response(200, json={"error": {"code": 107, "message": f"bad request api_key={KEY}"}})

    pub, _ = publisher(handler)
    [res] = await pub.publish([row(1)])
    assert res.outcome is Outcome.DEAD and res.failure_class == "api_107"
    assert "107" in res.error and KEY not in res.error
    await pub.aclose()


async def test_a_claimed_payload_is_spliced_into_the_request_as_stored() -> None:
    """``outbox_claims.claim`` hands payloads on as ``orjson.Fragment`` of the stored text: the batch
    request carries those bytes unchanged (no decode, no re-encode) next to the rows' tags."""

    stored = '{"kind":"task.summary", "n": 1.50, "s":"\\u00e9"}'  # spacing and escapes kept as stored

    def handler(request: httpx.Request) -> httpx.Response:
        assert b'"data":' + stored.encode() + b"," in request.content
        n = len(json.loads(request.content)["commands"])
        return httpx.Response(200, json={"replies": [{"publish": {}}] * n})

    pub, seen = publisher(handler)
    assert await pub.publish([row(1, payload=orjson.Fragment(stored)), row(2)]) == [PUBLISHED, PUBLISHED]
    assert len(seen) == 1
