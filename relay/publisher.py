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

A row carries one publication or several (a task version's VERSION row, ``outbox.publications``):
each publication is one publish command, exactly as a row of one projection was (its channel,
its data, ``idempotency_key`` with its channel, the row's tags). A row's result merges its
publications' (:func:`merged`): any retry → the row is retried (re-publishing the ones that got
through is harmless: complete state, the same idempotency key); else the first refusal → DEAD;
else PUBLISHED. A VERSION payload that is not an array of publications is DEAD alone.
One claim is one ``/batch`` request while its commands fit :data:`MAX_BATCH_COMMANDS`.

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
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import orjson

from httpwire.tracing import CHANNEL, OFF, OUTBOX_IDS, TASK_ID, TRACEPARENT, VERSION, Tracing
from relay.http_client import HttpReply, KeepAliveClient
from status_api.storage.outbox import (
    VERSION_PROJECTION,
    MalformedRow,
    OutboxRow,
    publication_tags,
    publications,
)

log = logging.getLogger("taskcast.relay.publisher")

#: Centrifugo API error codes that mean "try again later": internal (100), too many requests (111).
TEMPORARY_API_CODES = frozenset({100, 111})
ERROR_TEXT_LIMIT = 512
COMMITTED_AT_TAG = "committed_at_ms"
#: When the relay sent the publish (epoch ms, its clock): splits commit→visible into commit→publish
#: (queueing, claim) and publish→visible (gateway, fan-out, client). Informational, like the other.
PUBLISHED_AT_TAG = "published_at_ms"
#: The most publish commands one ``/batch`` request carries (the gateway's default
#: ``http_api.max_batch_commands``); a claim with more is split into several requests.
MAX_BATCH_COMMANDS = 1000


class Outcome(StrEnum):
    PUBLISHED = "published"
    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class PublishResult:
    """The fate of one row.

    ``failure_class`` is a bounded metric label (``timeout``, ``connect``, ``http_5xx``,
    ``http_429``, ``http_auth``, ``http_4xx``, ``bad_response``, ``api_<code>``, ``encode``,
    ``malformed``: a VERSION row whose payload is not an array of publications).
    ``gateway_unavailable`` marks failures of the gateway as a whole rather than of this row; they
    never count toward ``max_attempts``, so an outage of any length does not dead-letter rows.
    """

    outcome: Outcome
    failure_class: str = ""
    error: str = ""
    gateway_unavailable: bool = False


PUBLISHED = PublishResult(Outcome.PUBLISHED)


def merged(results: Sequence[PublishResult]) -> PublishResult:
    """One row's result from its publications' results: the first retry (a gateway-wide one
    first) if any, else the first DEAD, else PUBLISHED."""
    retries = [r for r in results if r.outcome is Outcome.RETRY]
    if retries:
        return next((r for r in retries if r.gateway_unavailable), retries[0])
    return next((r for r in results if r.outcome is Outcome.DEAD), PUBLISHED)


def expand(rows: Sequence[OutboxRow]) -> tuple[list[OutboxRow], list[int], dict[int, PublishResult]]:
    """``(units, owner, dead)``: one row-shaped unit per publication (a VERSION row's publications
    as rows of their channel, projection and data), ``owner[k]`` the index in ``rows`` of unit
    ``k``, ``dead`` the results of rows whose VERSION payload is malformed (no unit)."""
    units: list[OutboxRow] = []
    owner: list[int] = []
    dead: dict[int, PublishResult] = {}
    for i, row in enumerate(rows):
        if row.projection != VERSION_PROJECTION:
            units.append(row)
            owner.append(i)
            continue
        try:
            pubs = publications(row)
        except MalformedRow as exc:
            dead[i] = PublishResult(Outcome.DEAD, "malformed", sanitize(str(exc)))
            continue
        for p in pubs:  # positional: dataclasses.replace costs ~3 µs a unit
            units.append(
                OutboxRow(
                    row.id, row.aggregate_type, row.aggregate_id, row.aggregate_version, p.channel,
                    p.projection, p.data, row.priority, row.attempts, row.created_at, row.taken_over,
                    row.traceparent,
                )
            )  # fmt: skip
            owner.append(i)
    return units, owner, dead


def row_channels(row: OutboxRow) -> str:
    """The channels a row publishes to, joined by ``,`` (logs and spans)."""
    if row.projection != VERSION_PROJECTION:
        return row.channel
    try:
        return ",".join(p.channel for p in publications(row))
    except MalformedRow:
        return row.channel


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
    if isinstance(exc, TimeoutError):
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
    single poison row ends DEAD alone. Each request is bounded by ``timeout_seconds`` (connecting
    by min(``timeout_seconds``, 2 s)); connections are kept alive (``relay/http_client.py``).
    The batch body is encoded in one ``orjson.dumps`` (payloads are spliced in as stored); only a
    batch holding a payload that cannot be encoded is encoded row by row, to dead-letter that row.
    """

    def __init__(self, api_url: str, api_key: str, timeout_seconds: float, *, tracing: Tracing = OFF) -> None:
        self._tracing = tracing
        self._secrets = (api_key,) if api_key else ()
        self._timeout = timeout_seconds
        self._client = KeepAliveClient(
            api_url,
            {"X-API-Key": api_key, "Content-Type": "application/json"},
            timeout=timeout_seconds,
            connect_timeout=min(timeout_seconds, 2.0),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        if self._tracing.enabled:
            results = await self._traced_publish(rows)
        else:
            results = await self._publish_rows(rows)
        if log.isEnabledFor(logging.DEBUG):
            for row, res in zip(rows, results, strict=True):
                log.debug(
                    "outbox row %d channel=%s task=%s version=%d trace_id=%s: %s",
                    row.id,
                    row_channels(row),
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
                    CHANNEL: row_channels(first),
                    TASK_ID: first.aggregate_id,
                    VERSION: first.aggregate_version,
                    "taskcast.batch_size": len(rows),
                }
                span = stack.enter_context(
                    tracing.span("relay.publish", parent=traceparent, kind="producer", attributes=attributes)
                )
                spans.append((span, members))
            results = await self._publish_rows(rows)
            outcome = {row.id: res for row, res in zip(rows, results, strict=True)}
            for span, members in spans:
                failed = [outcome[r.id] for r in members if outcome[r.id].outcome is not Outcome.PUBLISHED]
                if failed:
                    tracing.mark_error(span, failed[0].failure_class)
        return results

    async def _publish_rows(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        """One result per row: its publications published (:func:`expand`), merged per row."""
        if all(r.projection != VERSION_PROJECTION for r in rows):
            return await self._publish(rows)
        units, owner, dead = expand(rows)
        per_row: list[list[PublishResult]] = [[] for _ in rows]
        for start in range(0, len(units), MAX_BATCH_COMMANDS):
            chunk = units[start : start + MAX_BATCH_COMMANDS]
            for k, res in enumerate(await self._publish(chunk), start):
                per_row[owner[k]].append(res)
        return [dead[i] if i in dead else merged(per_row[i]) for i in range(len(rows))]

    async def _publish(self, rows: Sequence[OutboxRow]) -> list[PublishResult]:
        if not rows:
            return []
        sent_ms = int(time.time() * 1000)
        if len(rows) == 1:
            try:
                body = orjson.dumps(publish_params(rows[0], sent_ms))
            except (TypeError, orjson.JSONEncodeError) as exc:
                return [PublishResult(Outcome.DEAD, "encode", sanitize(f"payload not JSON: {exc}"))]
            return [await self._single(body)]
        try:
            payload = orjson.dumps({"commands": [{"publish": publish_params(r, sent_ms)} for r in rows]})
        except (TypeError, orjson.JSONEncodeError):
            return await self._publish_encodable(rows, sent_ms)
        return await self._batch(
            payload, len(rows), lambda: [orjson.dumps(publish_params(r, sent_ms)) for r in rows]
        )

    async def _publish_encodable(self, rows: Sequence[OutboxRow], sent_ms: int) -> list[PublishResult]:
        """Encode row by row: a row that cannot be encoded is DEAD, the others are published."""
        results: list[PublishResult | None] = [None] * len(rows)
        bodies: list[tuple[int, bytes]] = []
        for i, row in enumerate(rows):
            try:
                bodies.append((i, orjson.dumps(publish_params(row, sent_ms))))
            except (TypeError, orjson.JSONEncodeError) as exc:
                results[i] = PublishResult(Outcome.DEAD, "encode", sanitize(f"payload not JSON: {exc}"))
        if len(bodies) == 1:
            i, body = bodies[0]
            results[i] = await self._single(body)
        elif bodies:
            each = [b for _, b in bodies]
            payload = b'{"commands":[' + b",".join(b'{"publish":' + b + b"}" for b in each) + b"]}"
            for (i, _), res in zip(bodies, await self._batch(payload, len(each), lambda: each), strict=True):
                results[i] = res
        return [r if r is not None else PUBLISHED for r in results]

    async def _post(self, method: str, body: bytes) -> HttpReply | PublishResult:
        try:
            headers = None
            if self._tracing.enabled:
                traceparent = self._tracing.traceparent()
                headers = {TRACEPARENT: traceparent} if traceparent else None
            async with asyncio.timeout(self._timeout + 1.0):
                return await self._client.post(method, body, headers=headers)
        except (TimeoutError, OSError) as exc:
            klass, unavailable = classify_exception(exc)
            text = sanitize(f"{klass}: {type(exc).__name__}: {exc}", self._secrets)
            return PublishResult(Outcome.RETRY, klass, text, unavailable)

    def _status_result(self, resp: HttpReply) -> PublishResult:
        outcome, klass, unavailable = classify_status(resp.status)
        if klass == "http_auth":
            log.error("gateway refused the relay's API key (HTTP %s); check gateway_api_key", resp.status)
        text = sanitize(f"HTTP {resp.status}: {resp.text[:200]}", self._secrets)
        return PublishResult(outcome, klass, text, unavailable)

    async def _single(self, body: bytes) -> PublishResult:
        resp = await self._post("publish", body)
        if isinstance(resp, PublishResult):
            return resp
        if resp.status != 200:
            return self._status_result(resp)
        try:
            reply = orjson.loads(resp.body)
        except orjson.JSONDecodeError:
            return PublishResult(Outcome.RETRY, "bad_response", "reply is not JSON", True)
        if isinstance(reply, dict) and "error" in reply:
            return _api_error_result(reply["error"], self._secrets)
        if isinstance(reply, dict) and "result" in reply:
            return PUBLISHED
        return PublishResult(Outcome.RETRY, "bad_response", "reply has neither result nor error", True)

    async def _one_by_one(self, bodies: Sequence[bytes]) -> list[PublishResult]:
        return [await self._single(b) for b in bodies]

    async def _batch(
        self, payload: bytes, n: int, singles: Callable[[], Sequence[bytes]]
    ) -> list[PublishResult]:
        """Publish ``n`` commands in one ``/batch`` request; ``singles()`` gives each command's
        ``/publish`` body when the batch must be re-sent row by row to isolate a poison row."""
        resp = await self._post("batch", payload)
        if isinstance(resp, PublishResult):
            return [resp] * n
        if resp.status != 200:
            res = self._status_result(resp)
            return await self._one_by_one(singles()) if res.outcome is Outcome.DEAD else [res] * n
        try:
            reply = orjson.loads(resp.body)
        except orjson.JSONDecodeError:
            reply = None
        if isinstance(reply, dict) and "error" in reply:
            return await self._one_by_one(singles())  # the batch as such was refused: isolate the culprit
        replies = reply.get("replies") if isinstance(reply, dict) else None
        if not isinstance(replies, list) or len(replies) != n:
            bad = PublishResult(Outcome.RETRY, "bad_response", "batch reply does not match the request", True)
            return [bad] * n
        out: list[PublishResult] = []
        for item in replies:
            if isinstance(item, dict) and "publish" in item:
                out.append(PUBLISHED)
            elif isinstance(item, dict) and "error" in item:
                out.append(_api_error_result(item["error"], self._secrets))
            else:
                out.append(PublishResult(Outcome.RETRY, "bad_response", "malformed batch reply", True))
        return out
