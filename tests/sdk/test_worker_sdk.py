"""The worker SDK (sdk/python/taskcast_worker) against real Status API processes on SQLite and
MariaDB: a Status API restart in the middle of a step, typed refusals, the sync API, the token
renewed by a heartbeat's answer; and its retry
policy (Retry-After, 5xx, non-idempotent calls) over an httpx transport that answers by script."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from taskcast_worker import AsyncTaskcast, RetryPolicy, StepError, StepSpec, Taskcast, TransportError, errors
from taskcast_worker.transport import Transport

from tests.helpers.mysql_db import schema_database
from tests.status_api.harness import COORDINATOR, TEST_CONFIG
from tests.support import ROOT, StatusApiProcess, merge, scaled, wait_until

STEPS = [
    StepSpec("01_prepare", "FILE.PREPARE", "file-worker"),
    StepSpec("02_parse", "DOCUMENT.PARSE", "document-parser"),
    StepSpec("03_store", "RESULT.PERSIST", "result-service"),
]
TASK = {
    "tenant_id": "t1",
    "owner_id": "u1",
    "product": "DOCUMENT",
    "task_type": "DOCUMENT_PROCESS",
    "title": "SDK",
    "status_definition_version": 1,
    "operation_definition_version": 1,
}


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)], scope="module")
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StatusApiProcess]:
    workdir = tmp_path_factory.mktemp(f"sdk-{request.param}")
    if request.param == "sqlite":
        url, ctx = f"sqlite+aiosqlite:///{workdir}/status.db", None
    else:
        ctx = schema_database(str(request.getfixturevalue("mysql_url")), "taskcast_sdk")
        url = ctx.__enter__()
    proc = StatusApiProcess(merge(TEST_CONFIG, {"database": {"url": url}}), workdir).start()
    try:
        yield proc
    finally:
        proc.terminate()
        if ctx is not None:
            ctx.__exit__(None, None, None)
    assert "Traceback" not in proc.log_text()


def client(api: StatusApiProcess, **kw: Any) -> AsyncTaskcast:
    return AsyncTaskcast(api.url, service_token=COORDINATOR, producer_id="task-coordinator", **kw)


async def test_a_status_api_restart_in_the_middle_of_a_step(api: StatusApiProcess) -> None:
    """The step's report made while the Status API is down is retried (same eventId) until it is
    back, and is applied exactly once; the heartbeat task survives the outage."""
    async with client(api, retry=RetryPolicy(max_delay_seconds=0.5, budget_seconds=scaled(90))) as tc:
        task = await tc.create_task(steps=STEPS, **TASK)
        async with tc.step(task.steps["02_parse"], heartbeat_interval_seconds=0.2) as step:
            await step.start("PARSING")
            api.terminate()
            sending = asyncio.create_task(step.complete("PARSE_COMPLETED"))
            await asyncio.sleep(0)  # the first try meets a closed port
            api.start()
            result = await asyncio.wait_for(sending, scaled(90))
            assert result.accepted and not result.duplicate and result.step_lifecycle_status == "SUCCEEDED"
            assert int(result.task_version) == 3  # created 1, started 2, completed 3: once
        done = await tc.complete_task(task.task_id, "COMPLETED")
        assert done.lifecycle_status == "SUCCEEDED"


async def test_every_coded_refusal_raises_its_own_exception(api: StatusApiProcess) -> None:
    async with client(api) as tc:
        task = await tc.create_task(steps=STEPS, **TASK)
        async with tc.step(task.steps["02_parse"]) as step:
            with pytest.raises(errors.UnknownBusinessStatus) as bad:
                await step.start("NOT_A_STATUS")
            assert bad.value.code == "UNKNOWN_BUSINESS_STATUS" and bad.value.status == 422
            with pytest.raises(errors.BusinessStatusLifecycleMismatch):
                await step.start("PARSE_COMPLETED")
            await step.start("PARSING")
            await step.fail("PARSE_FAILED", StepError("DEPENDENCY", "OCR_TIMEOUT", True, "OCR timed out"))
            with pytest.raises(errors.InvalidTransition) as info:
                await step.complete("PARSE_COMPLETED")
            assert isinstance(info.value, errors.Conflict)
        with pytest.raises(errors.AttemptInProgress):
            await tc.retry_step(task.task_id, "01_prepare")
        retry = await tc.retry_task(task.task_id)
        assert retry.task_attempt == 2 and retry.steps["02_parse"].step_attempt == 2
        with pytest.raises(errors.NoFailedStep):
            await tc.retry_task(task.task_id)
        with pytest.raises(errors.TaskNotFound):
            await tc.retry_task("no-such-task")
    async with AsyncTaskcast(api.url, service_token="not-a-jwt", producer_id="x") as other:
        with pytest.raises(errors.InvalidServiceCredential):
            await other.create_task(steps=STEPS, **TASK)


async def test_progress_is_coalesced_and_the_last_value_is_sent(api: StatusApiProcess) -> None:
    async with client(api) as tc:
        task = await tc.create_task(steps=STEPS, **TASK)
        async with tc.step(task.steps["02_parse"], progress_interval_seconds=3600) as step:
            await step.start("PARSING")
            sent = [await step.progress("PARSING", i, 10) for i in range(1, 11)]
            assert sent[0] is not None and sent[1:] == [None] * 9  # one per interval
            assert step.source_seq == 2
            await step.complete("PARSE_COMPLETED")  # sends the waiting progress (10/10) first
            assert step.source_seq == 4
    async with httpx.AsyncClient(base_url=api.url) as http:
        from tests.status_api.harness import auth, user_token

        detail = (await http.get(f"/api/tasks/{task.task_id}", headers=auth(user_token("t1", "u1")))).json()
    parse = next(s for s in detail["steps"] if s["id"] == "02_parse")
    assert parse["progress"] == {"current": 10, "total": 10}


def test_the_sync_api(api: StatusApiProcess) -> None:
    with Taskcast(api.url, service_token=COORDINATOR, producer_id="task-coordinator") as tc:
        task = tc.create_task(steps=STEPS, **TASK)
        with tc.step(task.steps["01_prepare"]) as step:
            assert step.start("PREPARING").accepted
            renewed = step.renew()
            assert (
                renewed.step_id == "01_prepare"
                and renewed.execution_token != task.steps["01_prepare"].execution_token
            )
            assert step.complete("PREPARED").step_lifecycle_status == "SUCCEEDED"
        with pytest.raises(errors.StepTerminal):
            tc.step(step.ctx).renew()


# --- token renewal on heartbeats ----------------------------------------------------------------

SHORT_TTL, WINDOW = 12, 8


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)], scope="module")
def short_api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StatusApiProcess]:
    """A Status API whose tokens live 12 s, renewed on a heartbeat once 8 s or less are left, and
    whose tasks have at most 2 attempts."""
    workdir = tmp_path_factory.mktemp(f"sdk-short-{request.param}")
    if request.param == "sqlite":
        url, ctx = f"sqlite+aiosqlite:///{workdir}/status.db", None
    else:
        ctx = schema_database(str(request.getfixturevalue("mysql_url")), "taskcast_sdk_short")
        url = ctx.__enter__()
    tokens = {"ttl_seconds": SHORT_TTL, "heartbeat_renewal_seconds": WINDOW}
    cfg = {"database": {"url": url}, "execution_token": tokens, "limits": {"max_task_attempts": 2}}
    proc = StatusApiProcess(merge(TEST_CONFIG, cfg), workdir).start()
    try:
        yield proc
    finally:
        proc.terminate()
        if ctx is not None:
            ctx.__exit__(None, None, None)
    assert "Traceback" not in proc.log_text()


async def test_the_step_takes_the_renewed_token_from_a_heartbeat_answer(short_api: StatusApiProcess) -> None:
    """Heartbeats renew the token (the server's window opens 4 s in, the SDK's own renewal through
    the endpoint would come at 8 s): the step adopts the token of the heartbeat's answer, and the
    renewal endpoint is never called."""
    async with client(short_api) as tc:
        task = await tc.create_task(steps=STEPS, **TASK)
        first = task.steps["02_parse"].execution_token
        async with tc.step(task.steps["02_parse"], heartbeat_interval_seconds=0.3) as step:
            await step.start("PARSING")
            await wait_until(lambda: step.renewals >= 1, 30, "a renewal by heartbeat")
            assert step.token != first and step.ctx.expires_in_seconds == SHORT_TTL
            done = await step.complete("PARSE_COMPLETED")
            assert done.accepted and done.step_lifecycle_status == "SUCCEEDED"
    log = short_api.log_text()
    assert "via=heartbeat" in log and "via=endpoint" not in log


async def test_a_task_retry_past_the_cap_raises_task_attempts_exhausted(short_api: StatusApiProcess) -> None:
    async with client(short_api) as tc:
        task = await tc.create_task(steps=STEPS, **TASK)
        for attempt in (1, 2):
            async with tc.step(task.steps["02_parse"]) as step:
                await step.start("PARSING")
                await step.fail("PARSE_FAILED", StepError("DEPENDENCY", "OCR_TIMEOUT", True))
            if attempt == 1:
                task = await tc.retry_task(task.task_id)
                assert task.task_attempt == 2
        with pytest.raises(errors.TaskAttemptsExhausted) as info:
            await tc.retry_task(task.task_id)
        assert isinstance(info.value, errors.Conflict) and info.value.status == 409
        assert info.value.details == {"limit": 2, "taskAttempt": 2}


# --- the retry policy, over a scripted transport -------------------------------------------------


def scripted(answers: list[httpx.Response | Exception]) -> tuple[httpx.AsyncClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://status"), seen


async def test_retries_honour_retry_after_and_resend_the_same_idempotency_key() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    busy = httpx.Response(503, json={"error": {"code": "STORAGE_BUSY", "message": "busy", "retryable": True}})
    limited = httpx.Response(
        429, headers={"Retry-After": "7"}, json={"error": {"code": "RATE_LIMITED", "message": "x"}}
    )
    http, seen = scripted(
        [httpx.ConnectError("refused"), busy, limited, httpx.Response(200, json={"ok": True})]
    )
    t = Transport(
        "http://status",
        RetryPolicy(base_delay_seconds=0.01, max_delay_seconds=0.02),
        client=http,
        sleep=sleep,
    )
    assert await t.post("/x", {"a": 1}, lambda: "tok", idempotency_key="evt-1") == {"ok": True}
    assert len(seen) == 4 and {r.headers["Idempotency-Key"] for r in seen} == {"evt-1"}
    assert {r.content for r in seen} == {seen[0].content}
    assert waits[2] >= 7 and all(w <= 0.02 for w in waits[:2])


async def test_a_refusal_is_not_retried_and_a_non_idempotent_call_is_not_resent_after_a_lost_answer() -> None:
    async def sleep(s: float) -> None:
        return None

    http, seen = scripted([httpx.Response(409, json={"error": {"code": "TASK_TERMINAL", "message": "done"}})])
    t = Transport("http://status", client=http, sleep=sleep)
    with pytest.raises(errors.TaskTerminal):
        await t.post("/x", None, lambda: "tok")
    assert len(seen) == 1
    http, seen = scripted([httpx.ReadTimeout("lost"), httpx.Response(201, json={})])
    t = Transport("http://status", client=http, sleep=sleep)
    with pytest.raises(TransportError):
        await t.post("/attempts", None, lambda: "tok", idempotent=False)
    assert len(seen) == 1
    clock = iter(range(0, 1000, 50))
    http, seen = scripted([httpx.ConnectError("down")] * 10)
    t = Transport(
        "http://status",
        RetryPolicy(budget_seconds=120),
        client=http,
        sleep=sleep,
        clock=lambda: float(next(clock)),
    )
    with pytest.raises(TransportError):
        await t.post("/x", None, lambda: "tok")
    assert 1 < len(seen) < 10  # gave up when the budget ran out


def test_the_sdk_knows_every_code_the_internal_routes_answer() -> None:
    """Each code raised by the domain, the service, tokens, auth and the HTTP edge has its class."""
    found: set[str] = set()
    makers = {"forbidden", "conflict", "invalid", "unauthenticated", "not_found"}
    for path in [
        *(ROOT / "status_api" / "domain").glob("*.py"),
        *(ROOT / "status_api" / "service").glob("*.py"),
        *(ROOT / "status_api" / n for n in ("tokens.py", "auth.py", "http.py", "json_input.py")),
    ]:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            args = node.args
            if name in makers and args and isinstance(args[0], ast.Constant):
                found.add(str(args[0].value))
            elif name in ("DomainError", "JsonInputError") and args:
                code = args[1] if name == "DomainError" and len(args) > 1 else args[0]
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    found.add(code.value)
    assert len(found) > 30
    assert found - set(errors.BY_CODE) == set()


async def test_waits_are_bounded(api: StatusApiProcess) -> None:
    """The fixture's process answers (guards the module's other tests against a dead server)."""
    async with httpx.AsyncClient() as http:
        assert await wait_until(lambda: http.get(f"{api.url}/readyz"), 30, "readyz")
