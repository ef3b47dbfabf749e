"""The demo's client of the Status API's internal endpoints (docs/status-api.md), as a coordinator
and its workers call them: ``POST /internal/v1/tasks`` and ``…/steps/{stepId}/attempts`` with
the coordinator's service JWT (minted here from the shared secret, role ``coordinator``), and
``POST /internal/v1/task-events`` with a step's ``executionToken`` or the service JWT; and the
event bodies (seed §3.5) with their stable eventIds.

A request that fails in transit, or is answered 429 or 5xx, is re-sent with the same body and
``Idempotency-Key`` (the eventId), ``HTTP_ATTEMPTS`` times at most with backoff; any other refusal
raises ``DemoError`` (its message carries the error code, never credentials).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt

__all__ = [
    "COORDINATOR",
    "HTTP_ATTEMPTS",
    "DemoError",
    "Json",
    "StatusApi",
    "event_id",
    "step_event",
    "task_event",
    "utc_iso",
]

COORDINATOR = "task-coordinator"


HTTP_ATTEMPTS = 5


Json = dict[str, Any]


class DemoError(RuntimeError):
    """The Status API refused a request (the message carries its error code, never credentials)."""


def utc_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event_id(*parts: object) -> str:
    """A stable eventId for one business event (pattern ``[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}``)."""
    return "ev-" + hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:40]


def step_event(ctx: Json, seq: int, event_type: str, **fields: Any) -> Json:
    """A step event body bound to an execution context (seed §3.5); ``None`` fields are omitted."""
    body: Json = {
        "eventId": event_id(ctx["taskId"], ctx["stepId"], ctx["stepAttempt"], ctx["producerId"], seq),
        "taskId": ctx["taskId"],
        "taskType": ctx["taskType"],
        "taskAttempt": ctx["taskAttempt"],
        "stepId": ctx["stepId"],
        "operationCode": ctx["operationCode"],
        "stepAttempt": ctx["stepAttempt"],
        "producerId": ctx["producerId"],
        "sourceSeq": seq,
        "eventType": event_type,
        "occurredAt": utc_iso(),
    }
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def task_event(task_id: str, seq: int, event_type: str, status: str, **fields: Any) -> Json:
    """A coordinator event (``TASK_*``) with the coordinator's own sourceSeq for this task."""
    body: Json = {
        "eventId": event_id(task_id, "task", 1, COORDINATOR, seq),
        "taskId": task_id,
        "taskAttempt": 1,
        "producerId": COORDINATOR,
        "sourceSeq": seq,
        "eventType": event_type,
        "businessStatus": status,
        "occurredAt": utc_iso(),
    }
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


class StatusApi:
    """The Status API's internal endpoints as the coordinator and its workers call them.

    Transport errors, 429 and 5xx are retried with the same body (and so the same eventId); other
    refusals raise :class:`DemoError`. The service JWT is minted locally from ``service_secret``.
    """

    def __init__(self, client: httpx.AsyncClient, service_secret: str) -> None:
        self.client = client
        self._secret = service_secret
        self._token = ""
        self._token_exp = 0.0

    def service_token(self) -> str:
        now = time.time()
        if now > self._token_exp - 60:
            self._token_exp = now + 600
            claims = {
                "sub": COORDINATOR,
                "roles": ["coordinator"],
                "iat": int(now),
                "exp": int(self._token_exp),
            }
            self._token = jwt.encode(claims, self._secret, algorithm="HS256")
        return self._token

    async def post(self, path: str, body: Json | None, token: str, key: str | None = None) -> Json:
        headers = {"Authorization": f"Bearer {token}"}
        if key:
            headers["Idempotency-Key"] = key
        for attempt in range(HTTP_ATTEMPTS):
            try:
                r = await self.client.post(path, json=body, headers=headers)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}"
            else:
                if r.status_code < 300:
                    out: Json = r.json()
                    return out
                if r.status_code != 429 and r.status_code < 500:
                    raise DemoError(f"{path}: HTTP {r.status_code} {r.text[:300]}")
                problem = f"HTTP {r.status_code}"
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        raise DemoError(f"{path}: gave up after {HTTP_ATTEMPTS} attempts ({problem})")

    async def create_task(self, body: Json) -> Json:
        return await self.post("/internal/v1/tasks", body, self.service_token(), f"create-{body['taskId']}")

    async def new_attempt(self, task_id: str, step_id: str) -> Json:
        return await self.post(
            f"/internal/v1/tasks/{task_id}/steps/{step_id}/attempts", None, self.service_token()
        )

    async def step(self, ctx: Json, body: Json) -> Json:
        return await self.post("/internal/v1/task-events", body, ctx["executionToken"], body["eventId"])

    async def task(self, body: Json) -> Json:
        return await self.post("/internal/v1/task-events", body, self.service_token(), body["eventId"])
