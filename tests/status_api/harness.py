"""Test harness for the Status API: a configured app over a real database, a hand-driven clock,
helpers that speak the HTTP API like a coordinator, a worker and a browser would."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
import jwt
import sqlalchemy as sa

from status_api.app import Components, build_components, create_app
from status_api.service import utc_now
from status_api.storage.outbox import OutboxRow, publications
from status_api.storage.tables import task_outbox
from tests.status_api.listener_transport import ListenerTransport
from tests.status_api.listener_transport import wanted as listener_wanted

SERVICE_SECRET = "service-secret-for-tests-0123456789"
USER_SECRET = "user-secret-for-tests-0123456789ab"
REALTIME_SECRET = "realtime-secret-for-tests-0123456789"
EXEC_SECRET = "exec-secret-for-tests-0123456789abc"

TEST_CONFIG: dict[str, Any] = {
    "internal_auth": {"mode": "jwt", "jwt_secret": SERVICE_SECRET, "rate_per_second": 0},
    "execution_token": {"secret": EXEC_SECRET},
    "user_auth": {"mode": "hs", "secret": USER_SECRET},
    "realtime": {"secret": REALTIME_SECRET, "max_detail_subscriptions_per_session": 3},
    "reconciler": {"enabled": False, "heartbeat_timeout_seconds": 60},
}


class FakeClock:
    """Naive-UTC millisecond clock the test advances by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def service_token(producer: str, roles: list[str]) -> str:
    """A service JWT; minted at import time for the whole session, so valid for a day (a slow,
    loaded full run must not outlive it)."""
    return jwt.encode(
        {"sub": producer, "roles": roles, "exp": int(time.time()) + 86400}, SERVICE_SECRET, "HS256"
    )


def user_token(tenant: str, user: str, projects: list[str] | None = None) -> str:
    claims = {"sub": user, "tenant": tenant, "projects": projects or [], "exp": int(time.time()) + 600}
    return jwt.encode(claims, USER_SECRET, "HS256")


COORDINATOR = service_token("task-coordinator", ["coordinator"])
POLICY = service_token("policy-executor", ["policy-executor"])
ADMIN = service_token("ops-alice", ["admin"])

DEFAULT_STEPS = [
    {"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"},
    {"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE", "producerId": "document-parser"},
    {"stepId": "03_store", "operationCode": "RESULT.PERSIST", "producerId": "result-service"},
]


@dataclass
class Step:
    """One step's execution context plus the worker's own sourceSeq counter."""

    ctx: dict[str, Any]
    seq: int = 0

    @property
    def token(self) -> str:
        return str(self.ctx["executionToken"])


@dataclass
class Task:
    id: str
    tenant: str
    owner: str
    steps: dict[str, Step] = field(default_factory=dict)
    coordinator_seq: int = 0


class Harness:
    def __init__(self, comp: Components, clock: FakeClock) -> None:
        self.comp = comp
        self.clock = clock
        self.service = comp.service
        self.schemas = comp.service.schemas
        self.app = create_app(load_config_dict(TEST_CONFIG), components=comp)
        transport: httpx.AsyncBaseTransport = (
            ListenerTransport(self.app) if listener_wanted() else httpx.ASGITransport(app=self.app)
        )
        self.http = httpx.AsyncClient(transport=transport, base_url="http://status")
        self._validators = {
            "USER_SUMMARY": "task-summary",
            "TASK_DETAIL": "task-detail",
            "PROJECT_BROADCAST": "task-project",
            "TENANT_BROADCAST": "broadcast",
            "SYSTEM_BROADCAST": "broadcast",
        }

    # --- coordinator -------------------------------------------------------------------------

    async def create_task(
        self,
        tenant: str = "t1",
        owner: str = "u1",
        project: str | None = None,
        steps: list[dict[str, str]] | None = None,
        expect: int = 201,
        **extra: Any,
    ) -> Task:
        body: dict[str, Any] = {
            "tenantId": tenant,
            "ownerId": owner,
            "product": "DOCUMENT",
            "taskType": "DOCUMENT_PROCESS",
            "title": "Contract parsing",
            "statusDefinitionVersion": 1,
            "operationDefinitionVersion": 1,
            "steps": steps or DEFAULT_STEPS,
            **extra,
        }
        if project:
            body["projectId"] = project
        r = await self.http.post("/internal/v1/tasks", json=body, headers=auth(COORDINATOR))
        assert r.status_code == expect, r.text
        out = r.json()
        t = Task(out["taskId"], tenant, owner)
        for ctx in out["steps"]:
            t.steps[ctx["stepId"]] = Step(ctx)
        return t

    def step_event(
        self,
        task: Task,
        step_id: str,
        event_type: str,
        business: str | None,
        *,
        seq: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        st = task.steps[step_id]
        if seq is None:
            st.seq += 1
            seq = st.seq
        body = {
            "eventId": f"evt-{uuid.uuid4().hex}",
            "taskId": task.id,
            "taskType": "DOCUMENT_PROCESS",
            "taskAttempt": st.ctx["taskAttempt"],
            "stepId": step_id,
            "operationCode": st.ctx["operationCode"],
            "stepAttempt": st.ctx["stepAttempt"],
            "producerId": st.ctx["producerId"],
            "sourceSeq": seq,
            "eventType": event_type,
            "occurredAt": "2026-09-21T07:10:18.120Z",
            **extra,
        }
        if business is not None:
            body["businessStatus"] = business
        return body

    async def send(self, body: dict[str, Any], token: str, expect: int = 200) -> dict[str, Any]:
        r = await self.http.post(
            "/internal/v1/task-events", json=body, headers={**auth(token), "Idempotency-Key": body["eventId"]}
        )
        assert r.status_code == expect, r.text
        return dict(r.json())

    async def report(
        self, task: Task, step_id: str, event_type: str, business: str | None, expect: int = 200, **extra: Any
    ) -> dict[str, Any]:
        body = self.step_event(task, step_id, event_type, business, **extra)
        return await self.send(body, task.steps[step_id].token, expect)

    async def task_event(
        self,
        task: Task,
        event_type: str,
        business: str,
        token: str = COORDINATOR,
        expect: int = 200,
        producer: str = "task-coordinator",
        **extra: Any,
    ) -> dict[str, Any]:
        task.coordinator_seq += 1
        body = {
            "eventId": f"evt-{uuid.uuid4().hex}",
            "taskId": task.id,
            "taskAttempt": 1,
            "producerId": producer,
            "sourceSeq": task.coordinator_seq,
            "eventType": event_type,
            "businessStatus": business,
            "occurredAt": "2026-09-21T07:11:00Z",
            **extra,
        }
        return await self.send(body, token, expect)

    # --- user ---------------------------------------------------------------------------------

    async def user_get(
        self,
        path: str,
        tenant: str = "t1",
        user: str = "u1",
        projects: list[str] | None = None,
        expect: int = 200,
    ) -> Any:
        r = await self.http.get(path, headers=auth(user_token(tenant, user, projects)))
        assert r.status_code == expect, r.text
        return r.json()

    async def user_post(
        self,
        path: str,
        body: Any,
        tenant: str = "t1",
        user: str = "u1",
        projects: list[str] | None = None,
        expect: int = 200,
    ) -> Any:
        r = await self.http.post(path, json=body, headers=auth(user_token(tenant, user, projects)))
        assert r.status_code == expect, r.text
        return r.json()

    # --- inspection -----------------------------------------------------------------------------

    async def outbox_rows(self, task_id: str | None = None) -> list[dict[str, Any]]:
        q = sa.select(task_outbox).order_by(task_outbox.c.id)
        if task_id:
            q = q.where(task_outbox.c.aggregate_id == task_id)
        async with self.comp.engine.connect() as conn:
            return [dict(r) for r in (await conn.execute(q)).mappings()]

    async def outbox_publications(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """One dict per publication of the outbox rows (``outbox.publications``): the row's columns
        with ``channel``, ``projection`` and ``payload`` those of the publication (a VERSION row
        gives one per projection, in order), ``row_id`` the row's id."""
        out = []
        for r in await self.outbox_rows(task_id):
            row = OutboxRow(
                r["id"], r["aggregate_type"], r["aggregate_id"], r["aggregate_version"], r["channel"],
                r["projection"], r["payload"], r["priority"], r["attempts"], r["created_at"],
            )  # fmt: skip
            for p in publications(row):
                out.append(
                    {
                        **r,
                        "row_id": r["id"],
                        "channel": p.channel,
                        "projection": p.projection,
                        "payload": p.data,
                    }
                )
        return out

    async def check_outbox_messages(self) -> int:
        """Every produced publication validates against its JSON Schema in schema/json; returns
        the number of publications."""
        rows = await self.outbox_publications()
        for r in rows:
            errs = self.schemas.errors(self._validators[r["projection"]], r["payload"])
            assert not errs, (r["projection"], errs[:3], r["payload"])
        return len(rows)

    async def scalar(self, q: Any) -> Any:
        async with self.comp.engine.connect() as conn:
            return await conn.scalar(q)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def load_config_dict(raw: dict[str, Any]) -> Any:
    from status_api.config import Config, _build, _validate

    cfg: Config = _build("", raw, Config)
    _validate(cfg)
    return cfg


def build(engine: Any, clock: FakeClock, overrides: dict[str, Any] | None = None) -> Components:
    raw = {k: dict(v) for k, v in TEST_CONFIG.items()}
    for section, values in (overrides or {}).items():
        raw.setdefault(section, {}).update(values)
    return build_components(load_config_dict(raw), engine=engine, clock=clock)
