"""The demo's scenario scripts: pure checks against the registries and schemas, then every scenario
end to end against a real Status API app (in-process ASGI, SQLite, reconciler running)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

import taskcast.demo.runner as demo
from status_api.app import create_app
from status_api.config import (
    Config,
    DatabaseConfig,
    ExecutionTokenConfig,
    InternalAuthConfig,
    RealtimeConfig,
    ReconcilerConfig,
    UserAuthConfig,
)
from status_api.domain.model import FailurePolicy
from status_api.domain.registry import operation_set_from_json, status_set_from_json
from status_api.schemas import DEFAULT_SCHEMA_DIR, SchemaStore
from taskcast.demo.scenarios import (
    SCENARIOS,
    Complete,
    Fail,
    Finish,
    GoSilent,
    Pause,
    Plan,
    Progress,
    Retry,
    Start,
    Work,
)
from taskcast.demo.status_client import COORDINATOR, step_event, task_event
from tests.support import scaled, wait_until

STORE = SchemaStore(DEFAULT_SCHEMA_DIR)
STATUSES = {
    (d["taskType"], d["definitionVersion"]): status_set_from_json(d)
    for d in STORE.load_registry_file("status-definitions")
}
OPERATIONS = {
    (d["taskType"], d["definitionVersion"]): operation_set_from_json(d)
    for d in STORE.load_registry_file("operation-definitions")
}
SERVICE_SECRET = "s" * 40
EVENT_OF = {Start: "STEP_STARTED", Progress: "STEP_PROGRESS", Complete: "STEP_COMPLETED", Fail: "STEP_FAILED"}
LIFECYCLE_OF = {
    "STEP_STARTED": "RUNNING",
    "STEP_PROGRESS": "RUNNING",
    "STEP_COMPLETED": "SUCCEEDED",
    "STEP_FAILED": "FAILED",
}


def _plans() -> list[Plan]:
    return [build(f"t-{name.replace('_', '-')}") for name, build in SCENARIOS.items()]


@pytest.mark.parametrize("plan", _plans(), ids=lambda p: p.scenario)
def test_scenario_uses_only_registered_codes_and_valid_data(plan: Plan) -> None:
    body = {**plan.create_body, "tenantId": "demo", "ownerId": "alice"}
    assert STORE.errors("task-create", body) == []
    key = (body["taskType"], body["statusDefinitionVersion"])
    statuses, ops = STATUSES[key], OPERATIONS[(body["taskType"], body["operationDefinitionVersion"])]
    steps = {s["stepId"]: s for s in body["steps"]}
    for s in steps.values():
        op = ops.operations[s["operationCode"]]
        assert op.producer_allowed(s["producerId"]), s
    if "summaryData" in body:
        assert STORE.validate_data(body["summaryData"]["schema"], body["summaryData"]["value"]) == []
    attempts = dict.fromkeys(steps, 1)
    for action in plan.script:
        if isinstance(action, Finish | Pause):
            continue
        op = ops.operations[steps[action.step]["operationCode"]]
        if isinstance(action, Work | GoSilent):
            continue  # heartbeats are sent only when the operation allows them
        if isinstance(action, Retry):
            assert op.failure_policy is FailurePolicy.RETRY_THEN_FAIL_TASK
            attempts[action.step] += 1
            assert attempts[action.step] <= op.max_attempts
            continue
        event_type = EVENT_OF[type(action)]
        assert event_type in op.allowed_event_types, (action, op.operation_code)
        status = statuses.statuses[action.status]
        assert status.enabled and status.lifecycle.value == LIFECYCLE_OF[event_type], action
        data = getattr(action, "data", None)
        if data is not None:
            assert data["schema"] in op.allowed_data_schemas.get(event_type, ()), action
            assert STORE.validate_data(data["schema"], data["value"]) == []
        if isinstance(action, Fail):
            assert action.category in (
                "BUSINESS_INPUT",
                "DEPENDENCY",
                "SYSTEM",
                "TIMEOUT",
                "PERMISSION",
                "UNKNOWN",
            )
    final = plan.script[-1]
    assert isinstance(final, Finish)
    assert statuses.statuses[final.status].lifecycle.value == plan.expect[0]
    assert sum(isinstance(a, Finish) for a in plan.script) == 1


def test_scenarios_cover_what_the_demo_promises() -> None:
    shown = {type(a) for p in _plans() for a in p.script}
    assert {Progress, Retry, GoSilent, Fail, Finish} <= shown
    policies = set()
    for p in _plans():
        ops = OPERATIONS[(p.create_body["taskType"], 1)]
        steps = {s["stepId"]: s["operationCode"] for s in p.create_body["steps"]}
        policies |= {ops.operations[steps[a.step]].failure_policy for a in p.script if isinstance(a, Fail)}
    assert policies >= {
        FailurePolicy.RETRY_THEN_FAIL_TASK,
        FailurePolicy.CONTINUE_WITH_WARNING,
        FailurePolicy.WAIT_FOR_USER,
    }
    assert {p.expect for p in _plans()} >= {
        ("SUCCEEDED", "HEALTHY"),
        ("SUCCEEDED", "DEGRADED"),
        ("FAILED", "HEALTHY"),
    }


def test_event_bodies_match_the_event_schema_and_ids_are_stable() -> None:
    ctx = {
        "taskId": "t-1",
        "taskType": "DOCUMENT_PROCESS",
        "taskAttempt": 1,
        "stepId": "02_parse",
        "operationCode": "DOCUMENT.PARSE",
        "stepAttempt": 2,
        "producerId": "document-parser",
    }
    a = step_event(ctx, 1, "STEP_STARTED", businessStatus="PARSING", message=None)
    b = step_event(ctx, 2, "STEP_HEARTBEAT")
    assert STORE.errors("task-event", a) == [] and STORE.errors("task-event", b) == []
    assert "message" not in a
    assert a["eventId"] == step_event(ctx, 1, "STEP_STARTED", businessStatus="PARSING")["eventId"]
    assert a["eventId"] != b["eventId"]
    other_attempt = step_event({**ctx, "stepAttempt": 1}, 1, "STEP_STARTED", businessStatus="PARSING")
    assert other_attempt["eventId"] != a["eventId"]
    done = task_event("t-1", 1, "TASK_COMPLETED", "COMPLETED", durationMs=10, durationSource="MONOTONIC")
    failed = task_event(
        "t-1",
        2,
        "TASK_FAILED",
        "REJECTED",
        failedStepId="02_parse",
        error={"category": "BUSINESS_INPUT", "code": "X", "retryable": False, "userMessage": "no"},
    )
    assert STORE.errors("task-event", done) == [] and STORE.errors("task-event", failed) == []
    assert done["producerId"] == COORDINATOR and done["eventId"] != failed["eventId"]


def test_schedule_cycles_scenarios_and_owners() -> None:
    pairs = list(demo.schedule(len(SCENARIOS) + 1, ["demo/a", "demo/b"]))
    assert [p[0] for p in pairs] == [*SCENARIOS, next(iter(SCENARIOS))]
    assert [p[1] for p in pairs[:3]] == ["demo/a", "demo/b", "demo/a"]


# --- end to end against the real Status API --------------------------------------------------

HEARTBEAT_TIMEOUT = 0.6
RECONCILE_INTERVAL = 0.1
# The demo's silence and recovery are real time, sized from the reconcile interval it is told. Telling
# it a much longer one than the API's gives the reconciler many passes (not 1.5) in each window, so a
# loaded machine still sees STALE then HEALTHY; scaled like every other bound of the suites.
DEMO_RECONCILE_INTERVAL = scaled(2.0)


def _config(db: Path) -> Config:
    return Config(
        database=DatabaseConfig(url=f"sqlite+aiosqlite:///{db}"),
        internal_auth=InternalAuthConfig(jwt_secret=SERVICE_SECRET, rate_per_second=0),
        execution_token=ExecutionTokenConfig(secret="e" * 40),
        user_auth=UserAuthConfig(mode="dev"),
        realtime=RealtimeConfig(secret="r" * 40),
        reconciler=ReconcilerConfig(
            interval_seconds=RECONCILE_INTERVAL, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT
        ),
    )


@contextlib.asynccontextmanager
async def _status_api(tmp_path: Path) -> AsyncIterator[tuple[httpx.ASGITransport, Any]]:
    app = create_app(_config(tmp_path / "demo.db"))
    async with app.router.lifespan_context(app):
        yield httpx.ASGITransport(app=app), app


async def _user_get(transport: httpx.ASGITransport, owner: str, path: str) -> Any:
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as c:
        r = await c.get(path, headers={"X-Taskcast-Dev-User": owner})
        assert r.status_code == 200, r.text
        return r.json()


async def test_every_scenario_runs_end_to_end_against_the_status_api(tmp_path: Path) -> None:
    async with _status_api(tmp_path) as (transport, app):
        async with asyncio.timeout(scaled(60)):
            result = await demo.run_demo(
                "http://api",
                SERVICE_SECRET,
                tasks=len(SCENARIOS),
                speed=50.0,
                stale_after=HEARTBEAT_TIMEOUT,
                reconcile_interval=DEMO_RECONCILE_INTERVAL,
                users=["demo/alice", "demo/bob"],
                transport=transport,
            )
        assert result.failures == []
        assert len(result.outcomes) == len(SCENARIOS)
        for scenario, owner, task_id, lifecycle in result.outcomes:
            expect = SCENARIOS[scenario](task_id).expect
            snap = await _user_get(transport, owner, f"/api/tasks/{task_id}")
            task = snap.get("state", snap)
            assert (lifecycle, task["lifecycleStatus"], task["health"]) == (expect[0], *expect), scenario
            timeline = await _user_get(transport, owner, f"/api/tasks/{task_id}/events?limit=200")
            events = timeline["events"]
            kinds = [(e["eventType"], e.get("health")) for e in events]
            if scenario == "video_stale":
                health = [h for k, h in kinds if k == "STEP_HEALTH_CHANGED"]
                assert health[:2] == ["STALE", "HEALTHY"], kinds
            if scenario == "document_retry":
                assert ("STEP_ATTEMPT_CREATED", "HEALTHY") in kinds
        engine = app.state.components.engine
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT payload FROM task_outbox"))).all()
        payloads = [str(r[0]) for r in rows]
        assert any("WAITING_USER_ACTION" in p and "NEEDS_ACTION" in p for p in payloads)
        assert any("STEP_RETRYING" in p for p in payloads)


async def test_stopping_the_demo_cancels_unfinished_tasks(tmp_path: Path) -> None:
    async with _status_api(tmp_path) as (transport, _app):
        stop = asyncio.Event()
        run = asyncio.create_task(
            demo.run_demo(
                "http://api",
                SERVICE_SECRET,
                tasks=0,
                speed=1.0,
                stale_after=HEARTBEAT_TIMEOUT,
                reconcile_interval=RECONCILE_INTERVAL,
                users=["demo/carol"],
                stop=stop,
                transport=transport,
            )
        )

        async def first_task() -> bool:
            return bool((await _user_get(transport, "demo/carol", "/api/tasks"))["items"])

        await wait_until(first_task, 20, "the first demo task", every=0.05)
        stop.set()
        async with asyncio.timeout(scaled(20)):
            await run
        listing = await _user_get(transport, "demo/carol", "/api/tasks")
        tasks = listing["items"]
        assert tasks and {t["lifecycleStatus"] for t in tasks} <= {"CANCELLED", "SUCCEEDED", "FAILED"}
        assert "CANCELLED" in {t["lifecycleStatus"] for t in tasks}


async def test_keep_running_tops_every_owner_up_to_n_unfinished_tasks(tmp_path: Path) -> None:
    """``taskcast up``'s demo: someone opening the board at any time sees tasks in progress, and
    never more than ``keep_running`` unfinished ones per user (a new one starts when one ends)."""
    owners = ["demo/kim", "demo/lee"]
    async with _status_api(tmp_path) as (transport, _app):
        stop = asyncio.Event()
        run = asyncio.create_task(
            demo.run_demo(
                "http://api",
                SERVICE_SECRET,
                tasks=0,
                keep_running=2,
                speed=50.0,
                stale_after=HEARTBEAT_TIMEOUT,
                reconcile_interval=RECONCILE_INTERVAL,
                users=owners,
                stop=stop,
                transport=transport,
            )
        )
        seen_unfinished: dict[str, int] = dict.fromkeys(owners, 0)
        async with asyncio.timeout(scaled(60)):
            while True:
                listings = {
                    o: (await _user_get(transport, o, "/api/tasks?limit=100"))["items"] for o in owners
                }
                for owner, items in listings.items():
                    unfinished = [t for t in items if t["lifecycleStatus"] in ("PENDING", "RUNNING")]
                    assert len(unfinished) <= 2, (owner, unfinished)
                    seen_unfinished[owner] = max(seen_unfinished[owner], len(unfinished))
                done = [
                    [t for t in items if t["lifecycleStatus"] in ("SUCCEEDED", "FAILED")]
                    for items in listings.values()
                ]
                if all(len(d) >= 3 for d in done):  # finished ones were replaced by new ones
                    break
                await asyncio.sleep(0.05)
            stop.set()
            result = await run
        assert seen_unfinished == dict.fromkeys(owners, 2)
        assert {o for _, o, _, _ in result.outcomes} == set(owners)
