"""Publishing claimed outbox rows to the gateway server API, and classifying what went wrong.

Owns the :class:`Publisher` seam, its HTTP implementation and the pure error classification
(seed §10: timeouts, connection errors, 5xx, 429 and temporary API errors are retried with backoff;
an invalid channel or any payload the gateway refuses is permanent → DEAD). Imports no database
code: rows arrive as :class:`~status_api.storage.outbox.OutboxRow` values.

Wire contract (docs/gateway.md "Server API", Centrifugo-compatible): ``POST {api}/publish`` with
``{channel, data, idempotency_key, tags}``, or ``POST {api}/batch`` with ``{"commands": [{"publish":
{…}}, …]}`` whose ``replies`` come back in order, one ``{"publish": {…}}`` or ``{"error": {code,
message}}`` each. ``idempotency_key = {aggregateId}:{aggregateVersion}:{channel}`` so a re-publish
after a crash (or by a second replica) inside the gateway's idempotency window is answered with the
first result and not delivered twice. ``tags.committed_at_ms`` carries the row's commit time (and
``tags.published_at_ms`` the relay's send time) to clients (the task.summary/detail schemas forbid
extra envelope fields); ``tags.task`` and ``tags.conflate`` (``publication_tags``) let a backed-up
connection keep only each task's newest state and never drop a notice or terminal state (seed §13.3).

Tracing (``opentelemetry_enabled``, httpwire/tracing.py): a publish is one ``relay.publish``
producer span per distinct trace context among its rows (a child of the context the Status API
stored on the row; a root for rows without one), and the request to the gateway carries the
span of the first row that has a stored context (of the first row when none has) as its
``traceparent`` header: the gateway's spans join that trace. Rows of other traces in the same batch
keep their own ``relay.publish`` span (with its ``taskcast.outbox.ids``) but not the gateway's.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import httpx
import orjson

from httpwire.tracing import CHANNEL, OFF, OUTBOX_IDS, TASK_ID, TRACEPARENT, VERSION, Tracing
from status_api.storage.outbox import OutboxRow, publication_tags

log = logging.getLogger("taskcast.relay.publisher")

#: Centrifugo API error codes that mean "try again later": internal (100), too many requests (111).
TEMPORARY_API_CODES = frozenset({100, 111})
ERROR_TEXT_LIMIT = 512
COMMITTED_AT_TAG = "committed_at_ms"
#: When the relay sent the publish (epoch ms, its clock): splits commit→visible into commit→publish
#: (queueing, claim) and publish→visible (gateway, fan-out, client). Informational, like the other.
PUBLISHED_AT_TAG = "published_at_ms"


class Outcome(StrEnum):
    PUBLISHED = "published"
    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class PublishResult:
    """The fate of one row.

    ``failure_class`` is a bounded metric label (``timeout``, ``connect``, ``http_5xx``,
    ``http_429``, ``http_auth``, ``http_4xx``, ``bad_response``, ``api_<code>``, ``encode``).
    ``gateway_unavailable`` marks failures of the gateway as a whole rather than of this row; they
    never count toward ``max_attempts``, so an outage of any length does not dead-letter rows.
    """

    outcome: Outcome
    failure_class: str = ""
    error: str = ""
    gateway_unavailable: bool = False


PUBLISHED = PublishResult(Outcome.PUBLISHED)


class Publisher(Protocol):
    """Publishes rows; never raises for a publish failure.

    ``publish(rows)`` returns exactly one :class:`PublishResult` per row, in order. Failures of the
    transport or of single rows are results, not exceptions, so one bad row never blocks the rest
    of its batch. Cancellation propagates (the caller releases the leases).
    """

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]: ...

    async def aclose(self) -> None: ...


def idempotency_key(row: OutboxRow) -> str:
    return f"{row.aggregate_id}:{row.aggregate_version}:{row.channel}"


def committed_at_ms(created_at: datetime) -> int:
    """Epoch milliseconds of a naive-UTC ``created_at`` (how the Status API stores timestamps)."""
    return int(created_at.replace(tzinfo=UTC).timestamp() * 1000)


def publish_params(row: OutboxRow, sent_ms: int | None = None) -> dict[str, Any]:
    """The publish command of ``row``; ``sent_ms`` (epoch ms) adds the ``published_at_ms`` tag."""
    tags = {**publication_tags(row), COMMITTED_AT_TAG: str(committed_at_ms(row.created_at))}
    if sent_ms is not None:
        tags[PUBLISHED_AT_TAG] = str(sent_ms)
    return {
        "channel": row.channel,
        "data": row.payload,
        "idempotency_key": idempotency_key(row),
        "tags": tags,
    }


_SECRETISH = re.compile(r"(?i)\b(api[_-]?key|authorization|x-api-key|token|secret|password)\b\s*[=:]\s*\S+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def sanitize(text: str, secrets: Sequence[str] = (), limit: int = ERROR_TEXT_LIMIT) -> str:
    """One line, secrets replaced by ``***``, ``key=value``-shaped credentials masked, bounded."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _SECRETISH.sub(lambda m: f"{m.group(1)}=***", text)
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify_status(status: int) -> tuple[Outcome, str, bool]:
    """Outcome for a non-200 HTTP status of a whole request: ``(outcome, class, gateway_unavailable)``.

    429 and 5xx are the gateway's temporary trouble. 401/403 mean the relay's API key is wrong:
    retried (and logged as an error), never blamed on the rows. Other 4xx: the gateway refused the
    request as such — permanent for a single publish.
    """
    if status == 429:
        return Outcome.RETRY, "http_429", True
    if status >= 500:
        return Outcome.RETRY, "http_5xx", True
    if status in (401, 403):
        return Outcome.RETRY, "http_auth", True
    return Outcome.DEAD, "http_4xx", False


def classify_api_error(code: int) -> tuple[Outcome, str]:
    """Outcome for a per-row ``{"error": {"code"}}`` reply: temporary codes retry, all others DEAD
    (102 unknown channel, 107 bad request, 108 not available, …)."""
    return (Outcome.RETRY if code in TEMPORARY_API_CODES else Outcome.DEAD), f"api_{code}"


def classify_exception(exc: BaseException) -> tuple[str, bool]:
    """``(class, gateway_unavailable)`` for a transport exception; every such failure is retried."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "timeout", True
    return "connect", True


def _api_error_result(error: Any, secrets: Sequence[str]) -> PublishResult:
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, int):
        return PublishResult(Outcome.RETRY, "bad_response", "malformed error reply", True)
    outcome, klass = classify_api_error(code)
    message = sanitize(f"gateway error {code}: {error.get('message', '')}", secrets)
    return PublishResult(outcome, klass, message)


class HttpGatewayPublisher:
    """:class:`Publisher` over the gateway server API (``X-API-Key``), one request per batch.

    A batch refused as a whole with a 4xx (or a top-level API error) is re-sent row by row, so a
    single poison row ends DEAD alone. Each request is bounded by ``timeout_seconds``.
    """

    def __init__(
        self,
        api_url: str,
        api_key: str,
        timeout_seconds: float,
        *,
        client: httpx.AsyncClient | None = None,
        tracing: Tracing = OFF,
    ) -> None:
        self._tracing = tracing
        self._api_url = api_url.rstrip("/")
        self._secrets = (api_key,) if api_key else ()
        self._timeout = timeout_seconds
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds, connect=min(timeout_seconds, 2.0)),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
            headers={"X-API-Key": api_key, "Content-Type": "application/json"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        if self._tracing.enabled:
            results = await self._traced_publish(rows)
        else:
            results = await self._publish(rows)
        if log.isEnabledFor(logging.DEBUG):
            for row, res in zip(rows, results, strict=True):
                log.debug(
                    "outbox row %d channel=%s task=%s version=%d trace_id=%s: %s",
                    row.id,
                    row.channel,
                    row.aggregate_id,
                    row.aggregate_version,
                    (row.traceparent or "")[3:35] or "-",
                    res.outcome.value,
                )
        return results

    async def _traced_publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        tracing = self._tracing
        groups: dict[str, list[OutboxRow]] = {}
        for row in rows:
            groups.setdefault(row.traceparent or "", []).append(row)
        untraced = groups.pop("", None)
        if untraced is not None:
            groups[""] = untraced  # last: a traced row's span is the request's parent if any
        with ExitStack() as stack:
            spans = []
            # Entered last to first: the first group's span is current while the request is sent.
            for traceparent, members in reversed(groups.items()):
                first = members[0]
                attributes = {
                    OUTBOX_IDS: [r.id for r in members],
                    CHANNEL: first.channel,
                    TASK_ID: first.aggregate_id,
                    VERSION: first.aggregate_version,
                    "taskcast.batch_size": len(rows),
                }
                span = stack.enter_context(
                    tracing.span("relay.publish", parent=traceparent, kind="producer", attributes=attributes)
                )
                spans.append((span, members))
            results = await self._publish(rows)
            outcome = {row.id: res for row, res in zip(rows, results, strict=True)}
            for span, members in spans:
                failed = [outcome[r.id] for r in members if outcome[r.id].outcome is not Outcome.PUBLISHED]
                if failed:
                    tracing.mark_error(span, failed[0].failure_class)
        return results

    async def _publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        results: list[PublishResult | None] = [None] * len(rows)
        bodies: list[tuple[int, bytes]] = []
        sent_ms = int(time.time() * 1000)
        for i, row in enumerate(rows):
            try:
                bodies.append((i, orjson.dumps(publish_params(row, sent_ms))))
            except (TypeError, orjson.JSONEncodeError) as exc:
                results[i] = PublishResult(Outcome.DEAD, "encode", sanitize(f"payload not JSON: {exc}"))
        if len(bodies) == 1:
            i, body = bodies[0]
            results[i] = await self._single(body)
        elif bodies:
            for (i, _), res in zip(bodies, await self._batch([b for _, b in bodies]), strict=True):
                results[i] = res
        return [r if r is not None else PUBLISHED for r in results]

    async def _post(self, method: str, body: bytes) -> httpx.Response | PublishResult:
        try:
            headers = None
            if self._tracing.enabled:
                traceparent = self._tracing.traceparent()
                headers = {TRACEPARENT: traceparent} if traceparent else None
            async with asyncio.timeout(self._timeout + 1.0):
                return await self._client.post(f"{self._api_url}/{method}", content=body, headers=headers)
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            klass, unavailable = classify_exception(exc)
            text = sanitize(f"{klass}: {type(exc).__name__}: {exc}", self._secrets)
            return PublishResult(Outcome.RETRY, klass, text, unavailable)

    def _status_result(self, resp: httpx.Response) -> PublishResult:
        outcome, klass, unavailable = classify_status(resp.status_code)
        if klass == "http_auth":
            log.error(
                "gateway refused the relay's API key (HTTP %s); check gateway_api_key", resp.status_code
            )
        text = sanitize(f"HTTP {resp.status_code}: {resp.text[:200]}", self._secrets)
        return PublishResult(outcome, klass, text, unavailable)

    async def _single(self, body: bytes) -> PublishResult:
        resp = await self._post("publish", body)
        if isinstance(resp, PublishResult):
            return resp
        if resp.status_code != 200:
            return self._status_result(resp)
        try:
            reply = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            return PublishResult(Outcome.RETRY, "bad_response", "reply is not JSON", True)
        if isinstance(reply, dict) and "error" in reply:
            return _api_error_result(reply["error"], self._secrets)
        if isinstance(reply, dict) and "result" in reply:
            return PUBLISHED
        return PublishResult(Outcome.RETRY, "bad_response", "reply has neither result nor error", True)

    async def _one_by_one(self, bodies: Sequence[bytes]) -> list[PublishResult]:
        return [await self._single(b) for b in bodies]

    async def _batch(self, bodies: Sequence[bytes]) -> list[PublishResult]:
        payload = b'{"commands":[' + b",".join(b'{"publish":' + b + b"}" for b in bodies) + b"]}"
        resp = await self._post("batch", payload)
        if isinstance(resp, PublishResult):
            return [resp] * len(bodies)
        if resp.status_code != 200:
            res = self._status_result(resp)
            return await self._one_by_one(bodies) if res.outcome is Outcome.DEAD else [res] * len(bodies)
        try:
            reply = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            reply = None
        if isinstance(reply, dict) and "error" in reply:
            return await self._one_by_one(bodies)  # the batch as such was refused: isolate the culprit
        replies = reply.get("replies") if isinstance(reply, dict) else None
        if not isinstance(replies, list) or len(replies) != len(bodies):
            bad = PublishResult(Outcome.RETRY, "bad_response", "batch reply does not match the request", True)
            return [bad] * len(bodies)
        out: list[PublishResult] = []
        for item in replies:
            if isinstance(item, dict) and "publish" in item:
                out.append(PUBLISHED)
            elif isinstance(item, dict) and "error" in item:
                out.append(_api_error_result(item["error"], self._secrets))
            else:
                out.append(PublishResult(Outcome.RETRY, "bad_response", "malformed batch reply", True))
        return out
