"""Read side for end users (seed §3.8, §6.5, §7, §13.2): snapshots, timelines, batch checks and the
gateway tokens. Every method takes a verified :class:`UserIdentity`; a task the user may not see is
reported exactly like a missing one (404), so ids of other tenants or users never leak.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping

from status_api.domain.broadcasts import Scope, subscribe_channel
from status_api.domain.errors import DomainError, ErrorKind, invalid, not_found
from status_api.domain.model import JSON, TaskState, UserIdentity
from status_api.domain.projections import detail_channel, detail_message, iso, summary_task, user_channel
from status_api.service import StatusService, parse_time
from status_api.storage import repository as repo
from status_api.storage import sessions

MAX_PAGE = 100
MAX_EVENTS = 200


@dataclass(frozen=True, slots=True)
class RealtimeQuota:
    max_detail_subscriptions_per_session: int = 20
    max_sessions_per_user: int = 20
    #: Distinct tasks with a live detail lease over ALL of a user's sessions (tabs, devices, the
    #: new session of every token refresh): seed §6.5's per-user limit.
    max_detail_subscriptions_per_user: int = 20


def _encode_cursor(t: TaskState) -> str:
    raw = json.dumps([iso(t.updated_at), t.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        ts, tid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return parse_time(ts), str(tid)
    except (ValueError, TypeError) as exc:
        raise invalid("INVALID_CURSOR", "cursor is not valid") from exc


def _timeline_event(r: RowMapping) -> dict[str, JSON]:
    """Whitelisted timeline entry: never diagnosticsRef, operator identities or raw request bodies."""
    payload: Mapping[str, Any] = r["payload"] or {}
    err = payload.get("error")
    return {
        "eventId": r["event_id"],
        "taskVersion": str(r["task_version"]),
        "eventType": r["event_type"],
        "stepId": r["step_id"],
        "operationCode": r["operation_code"],
        "taskAttempt": r["task_attempt"],
        "stepAttempt": r["step_attempt"],
        "stepVersion": str(r["step_version"]) if r["step_version"] is not None else None,
        "lifecycleStatus": r["lifecycle_status"],
        "businessStatus": r["business_status"],
        "health": r["health"],
        "occurredAt": iso(r["occurred_at"]),
        "committedAt": iso(r["committed_at"]),
        "durationMs": r["duration_ms"],
        "progress": payload.get("progress"),
        "data": payload.get("data"),
        "error": {k: err[k] for k in ("category", "code", "retryable", "userMessage")} if err else None,
    }


class TaskQueries:
    def __init__(self, service: StatusService, quota: RealtimeQuota | None = None) -> None:
        self.service = service
        self.engine = service.engine
        self.tokens = service.tokens
        self.quota = quota or RealtimeQuota()

    async def _visible(self, user: UserIdentity, task_id: str) -> TaskState:
        async with self.engine.connect() as conn:
            task = (await repo.get_tasks(conn, [task_id])).get(task_id)
        if task is None or not user.can_view(task):
            raise not_found()
        return task

    async def list_tasks(self, user: UserIdentity, limit: int, cursor: str | None) -> dict[str, JSON]:
        """``GET /api/tasks``: the user's own tasks, newest update first, keyset-paged."""
        limit = max(1, min(limit, MAX_PAGE))
        after = _decode_cursor(cursor) if cursor else None
        async with self.engine.connect() as conn:
            tasks = await repo.list_user_tasks(conn, user.tenant_id, user.user_id, limit + 1, after)
            page = tasks[:limit]
            steps = await repo.current_steps(conn, [t.id for t in page])
            now = self.service.clock()
            items = []
            for t in page:
                defs = await self.service.task_definitions(conn, t)
                items.append(summary_task(t, steps[t.id], defs.operations, now, defs.statuses))
        return {"items": items, "nextCursor": _encode_cursor(page[-1]) if len(tasks) > limit else None}

    async def get_task(self, user: UserIdentity, task_id: str) -> dict[str, JSON]:
        """``GET /api/tasks/{id}``: the authoritative snapshot (TASK_DETAIL shape, triggerEvent null)."""
        async with self.engine.connect() as conn:
            task = (await repo.get_tasks(conn, [task_id])).get(task_id)
            if task is None or not user.can_view(task):
                raise not_found()
            steps = (await repo.current_steps(conn, [task_id]))[task_id]
            defs = await self.service.task_definitions(conn, task)
        return detail_message(task, steps, self.service.clock(), None, defs.operations, defs.statuses)

    async def events(self, user: UserIdentity, task_id: str, after: int, limit: int) -> dict[str, JSON]:
        """``GET /api/tasks/{id}/events``: committed events after a version; ``purged`` when the
        requested window starts before the oldest retained entry (seed §3.8, §17)."""
        limit = max(1, min(limit, MAX_EVENTS))
        task = await self._visible(user, task_id)
        async with self.engine.connect() as conn:
            rows = await repo.timeline(conn, task_id, after, limit)
            oldest = await repo.oldest_retained_version(conn, task_id)
        purged = after < task.version and (oldest is None or oldest > after + 1)
        events = [_timeline_event(r) for r in rows]
        last = int(events[-1]["taskVersion"]) if events else after
        return {
            "taskId": task_id,
            "taskVersion": str(task.version),
            "afterTaskVersion": str(after),
            "events": events,
            "nextAfterTaskVersion": str(last),
            "hasMore": last < task.version and bool(events),
            "purged": purged,
            "oldestAvailableTaskVersion": str(oldest) if oldest is not None else None,
        }

    async def batch_get(self, user: UserIdentity, body: Mapping[str, JSON]) -> dict[str, JSON]:
        """``POST /api/tasks/status:batchGet``: summaries only for tasks newer than ``knownVersions``."""
        self.service.schemas.require("batch-get", body)
        known: Mapping[str, str] = body.get("knownVersions") or {}
        ids = list(dict.fromkeys([*(body.get("taskIds") or []), *known]))
        if len(ids) > MAX_PAGE:
            raise invalid("TOO_MANY_TASKS", f"at most {MAX_PAGE} tasks per call")
        async with self.engine.connect() as conn:
            found = {k: t for k, t in (await repo.get_tasks(conn, ids)).items() if user.can_view(t)}
            changed = [t for t in found.values() if t.id not in known or t.version > int(known[t.id])]
            steps = await repo.current_steps(conn, [t.id for t in changed])
            now = self.service.clock()
            tasks = []
            for t in changed:
                defs = await self.service.task_definitions(conn, t)
                tasks.append(summary_task(t, steps[t.id], defs.operations, now, defs.statuses))
        return {
            "tasks": tasks,
            "unchanged": [i for i in ids if i in found and found[i] not in changed],
            "notFound": [i for i in ids if i not in found],
            "asOf": iso(now),
        }

    # --- realtime tokens (seed §6.5, §7) -------------------------------------------------------

    async def realtime_session(self, user: UserIdentity) -> dict[str, JSON]:
        """``GET /api/realtime/session``: a connection JWT whose only channel is the user's own."""
        now = self.service.clock()
        session_id = uuid.uuid4().hex
        expires = now + timedelta(
            seconds=max(self.tokens.s.connection_ttl_seconds, self.tokens.s.subscription_ttl_seconds) * 4
        )
        async with self.engine.begin() as conn:
            await sessions.insert_session(conn, session_id, user.tenant_id, user.user_id, now, expires)
        channel = user_channel(user.tenant_id, user.user_id)
        token, exp = self.tokens.connection_token(user, [channel], now, session_id)
        return {
            "token": token,
            "expiresAt": exp,
            "sessionId": session_id,
            "channels": [channel],
            "maxDetailSubscriptions": min(
                self.quota.max_detail_subscriptions_per_session, self.quota.max_detail_subscriptions_per_user
            ),
        }

    async def subscription_token(self, user: UserIdentity, body: Mapping[str, JSON]) -> dict[str, JSON]:
        """``POST /api/realtime/subscription-token``: re-check the ACL, enforce the detail quota
        atomically under the user's quota lock (storage/sessions.py, shared with the subscribe
        proxy): at most ``max_detail_subscriptions_per_user`` distinct tasks leased over all the
        user's sessions and proxy connections — a token refresh (a new session) neither resets it
        nor double-counts a task the old session still holds — and
        ``max_detail_subscriptions_per_session`` in this session. Returns ``{token, channel,
        expiresAt}`` for the task's detail channel.

        Raises:
            DomainError: NOT_FOUND (task not visible), UNAUTHENTICATED ``SESSION_INVALID``, LIMIT
                ``DETAIL_SUBSCRIPTION_LIMIT``.
        """
        self.service.schemas.require("subscription-token", body)
        task = await self._visible(user, body["taskId"])
        now = self.service.clock()
        async with self.engine.begin() as conn:
            await sessions.lock_user(conn, user.tenant_id, user.user_id, now)
            sess = await sessions.get_session(conn, body["sessionId"])
            if (
                sess is None
                or (sess["tenant_id"], sess["user_id"]) != (user.tenant_id, user.user_id)
                or (sess["expires_at"] <= now)
            ):
                raise DomainError(
                    ErrorKind.UNAUTHENTICATED, "SESSION_INVALID", "unknown or expired realtime session"
                )
            lease = now + timedelta(seconds=self.tokens.s.subscription_ttl_seconds)
            granted = await sessions.grant_detail(
                conn,
                body["sessionId"],
                user.tenant_id,
                user.user_id,
                task.id,
                now,
                lease,
                per_holder=self.quota.max_detail_subscriptions_per_session,
                per_user=self.quota.max_detail_subscriptions_per_user,
            )
        if granted is not sessions.Grant.GRANTED:
            limit = (
                self.quota.max_detail_subscriptions_per_user
                if granted is sessions.Grant.USER_LIMIT
                else self.quota.max_detail_subscriptions_per_session
            )
            raise DomainError(
                ErrorKind.LIMIT,
                "DETAIL_SUBSCRIPTION_LIMIT",
                f"at most {limit} task detail subscriptions per {granted.value}",
                details={"limit": limit, "scope": granted.value},
            )
        channel = detail_channel(task.tenant_id, task.id)
        token, exp = self.tokens.subscription_token(user, channel, now)
        return {"token": token, "channel": channel, "expiresAt": exp}

    async def broadcast_token(self, user: UserIdentity, body: Mapping[str, JSON]) -> dict[str, JSON]:
        """``POST /api/realtime/broadcast-token``: a subscription JWT for a broadcast channel (seed
        §6.6) — ``task_project:{tenant}/{projectId}`` for a project in the user's projects claim,
        ``task_tenant:{tenant}`` of the user's own tenant, or ``task_system:public``. The channel is
        built from the verified identity, never taken from the request.

        Raises:
            DomainError: INVALID ``INVALID_REQUEST``, ``PROJECT_REQUIRED``;
                FORBIDDEN ``NOT_A_PROJECT_MEMBER``.
        """
        self.service.schemas.require("broadcast-token", body)
        channel = subscribe_channel(user, Scope(body["scope"]), body.get("projectId"))
        token, exp = self.tokens.subscription_token(user, channel, self.service.clock())
        return {"token": token, "channel": channel, "expiresAt": exp}

    async def release_subscription(self, user: UserIdentity, body: Mapping[str, JSON]) -> dict[str, JSON]:
        """``POST /api/realtime/subscription-release``: free a quota slot after unsubscribing: the
        task's lease in every holder of the user (token sessions and subscribe-proxy connections)."""
        self.service.schemas.require("subscription-token", body)
        async with self.engine.begin() as conn:
            await sessions.lock_user(conn, user.tenant_id, user.user_id, self.service.clock())
            mine = await sessions.user_sessions(conn, user.tenant_id, user.user_id)
            if body["sessionId"] not in mine:
                raise DomainError(ErrorKind.UNAUTHENTICATED, "SESSION_INVALID", "unknown realtime session")
            await sessions.delete_user_subscription(conn, mine, body["taskId"])
        return {"released": True}
