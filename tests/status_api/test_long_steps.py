"""Steps longer than ``execution_token.ttl_seconds``: the executionToken renewal endpoint and the
renewal answered to a heartbeat in its window, both bound to the task, step and attempts, capped by
``max_lifetime_seconds``, audited in ``execution_token_renewal``; and the retry of an event with the
same eventId across a renewal. On SQLite and MariaDB, with the service clock advanced by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from status_api.storage.tables import execution_token_renewal
from tests.status_api.harness import COORDINATOR, EXEC_SECRET, FakeClock, Harness, Task, auth, build

TTL, MAX_LIFETIME, GRACE = 60, 300, 30


@pytest.fixture
async def h(engine: AsyncEngine, clock: FakeClock) -> AsyncIterator[Harness]:
    overrides = {
        "execution_token": {
            "ttl_seconds": TTL,
            "max_lifetime_seconds": MAX_LIFETIME,
            "renew_grace_seconds": GRACE,
            "heartbeat_renewal_seconds": 0,  # the endpoint alone; heartbeats: the `hb` fixture
        }
    }
    harness = Harness(build(engine, clock, overrides), clock)
    await harness.service.load_registry_files()
    yield harness
    await harness.http.aclose()
    await harness.check_outbox_messages()


async def renew(h: Harness, token: str, expect: int = 200) -> dict[str, Any]:
    r = await h.http.post("/internal/v1/execution-tokens/renew", headers=auth(token))
    assert r.status_code == expect, r.text
    return dict(r.json())


def _code(r: httpx.Response | dict[str, Any]) -> str:
    body = r.json() if isinstance(r, httpx.Response) else r
    return str(body["error"]["code"])


async def test_a_step_longer_than_the_token_ttl_completes(h: Harness) -> None:
    t = await h.create_task()
    step = t.steps["02_parse"]
    assert step.ctx["expiresInSeconds"] == TTL
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    first = step.token
    h.clock.advance(TTL - 10)
    renewed = await renew(h, first)
    assert renewed["expiresInSeconds"] == TTL and renewed["executionToken"] != first
    for key in ("taskId", "stepId", "operationCode", "taskAttempt", "stepAttempt", "producerId"):
        assert renewed[key] == step.ctx[key]
    step.ctx = renewed
    h.clock.advance(TTL - 10)  # past the first token's exp, within the renewed one's
    r = await h.report(t, "02_parse", "STEP_HEARTBEAT", None, expect=200)
    assert r["accepted"]
    old = h.step_event(t, "02_parse", "STEP_PROGRESS", "PARSING", progress={"current": 1})
    assert _code(await h.send(old, first, expect=401)) == "EXECUTION_TOKEN_EXPIRED"
    done = await h.report(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED", durationMs=110_000)
    assert done["accepted"] and done["stepLifecycleStatus"] == "SUCCEEDED"
    async with h.comp.engine.connect() as conn:
        rows = (await conn.execute(sa.select(execution_token_renewal))).mappings().all()
    assert [
        (r["task_id"], r["step_id"], r["task_attempt"], r["step_attempt"], r["producer_id"]) for r in rows
    ] == [(t.id, "02_parse", 1, 1, "document-parser")]
    # The finished attempt's token is not renewed again.
    assert _code(await renew(h, step.token, expect=409)) == "STEP_TERMINAL"


async def test_same_event_id_retried_after_a_renewal_is_applied_once(h: Harness) -> None:
    """A completion refused for an expired token is renewed (within the grace) and resent with the
    same eventId and body: accepted once; a second resend answers the first result."""
    t = await h.create_task()
    step = t.steps["02_parse"]
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    h.clock.advance(TTL + GRACE // 2)
    body = h.step_event(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED", durationMs=75_000)
    assert _code(await h.send(body, step.token, expect=401)) == "EXECUTION_TOKEN_EXPIRED"
    step.ctx = await renew(h, step.token)
    first = await h.send(body, step.token)
    again = await h.send(body, step.token)
    assert first["accepted"] and not first["duplicate"]
    assert again["duplicate"] and again["taskVersion"] == first["taskVersion"]


async def test_renewal_refusals(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    token = t.steps["02_parse"].token
    # Not an execution token: a service credential, garbage.
    assert _code(await renew(h, COORDINATOR, expect=401)) == "INVALID_EXECUTION_TOKEN"
    assert _code(await renew(h, "x.y.z", expect=401)) == "INVALID_EXECUTION_TOKEN"
    r = await h.http.post("/internal/v1/execution-tokens/renew")
    assert r.status_code == 401 and _code(r) == "UNAUTHENTICATED"
    # Expired past the grace.
    h.clock.advance(TTL + GRACE + 1)
    assert _code(await renew(h, token, expect=401)) == "EXECUTION_TOKEN_EXPIRED"


async def test_renewals_stop_at_the_maximum_lifetime(h: Harness) -> None:
    t = await h.create_task()
    step = t.steps["02_parse"]
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    exp_ins = []
    for _ in range(MAX_LIFETIME // (TTL - 10) - 1):
        h.clock.advance(TTL - 10)
        step.ctx = await renew(h, step.token)
        exp_ins.append(step.ctx["expiresInSeconds"])
    # The chain started at creation: the last renewals are cut to its end, never past it.
    assert (
        exp_ins[0] == TTL
        and exp_ins[-1] < TTL
        and sum(TTL - 10 for _ in exp_ins) + exp_ins[-1] == MAX_LIFETIME
    )
    h.clock.advance(exp_ins[-1])
    assert _code(await renew(h, step.token, expect=403)) == "EXECUTION_TOKEN_MAX_LIFETIME"


async def test_a_superseded_attempt_is_not_renewed(h: Harness) -> None:
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    old = t.steps["02_parse"].token
    error = {"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True}
    await h.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=error)
    r = await h.http.post(f"/internal/v1/tasks/{t.id}/steps/02_parse/attempts", headers=auth(COORDINATOR))
    assert r.status_code == 201, r.text
    assert _code(await renew(h, old, expect=409)) == "ATTEMPT_SUPERSEDED"
    new = r.json()["executionToken"]
    assert (await renew(h, new))["stepAttempt"] == 2


async def test_occurred_at_is_optional(h: Harness) -> None:
    """docs/task-protocol.md calls occurredAt informational: a first event without it is accepted
    (issue 30), and the timeline shows the receive time."""
    t: Task = await h.create_task()
    body = h.step_event(t, "02_parse", "STEP_STARTED", "PARSING")
    del body["occurredAt"]
    assert (await h.send(body, t.steps["02_parse"].token))["accepted"]
    events = (await h.user_get(f"/api/tasks/{t.id}/events"))["events"]
    assert events[-1]["eventType"] == "STEP_STARTED" and events[-1]["occurredAt"] == events[-1]["committedAt"]


# --- renewal on heartbeat ---------------------------------------------------------------------

WINDOW = 20


@pytest.fixture
async def hb(engine: AsyncEngine, clock: FakeClock) -> AsyncIterator[Harness]:
    overrides = {
        "execution_token": {
            "ttl_seconds": TTL,
            "max_lifetime_seconds": MAX_LIFETIME,
            "renew_grace_seconds": GRACE,
            "heartbeat_renewal_seconds": WINDOW,
        }
    }
    harness = Harness(build(engine, clock, overrides), clock)
    await harness.service.load_registry_files()
    yield harness
    await harness.http.aclose()
    await harness.check_outbox_messages()


async def _renewal_rows(h: Harness) -> list[tuple[Any, ...]]:
    async with h.comp.engine.connect() as conn:
        rows = (await conn.execute(sa.select(execution_token_renewal).order_by("id"))).mappings().all()
    return [
        (r["task_id"], r["step_id"], r["task_attempt"], r["step_attempt"], r["producer_id"]) for r in rows
    ]


async def test_a_heartbeat_in_the_renewal_window_is_answered_a_renewed_token(hb: Harness) -> None:
    h = hb
    t = await h.create_task()
    step = t.steps["02_parse"]
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    h.clock.advance(TTL - WINDOW - 5)  # 25 s left: not due
    beat = await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert beat["accepted"] and "executionToken" not in beat and await _renewal_rows(h) == []
    h.clock.advance(10)  # 15 s left: within the window
    first = step.token
    beat = await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert beat["accepted"] and beat["executionToken"] != first and beat["expiresInSeconds"] == TTL
    old, new = (
        jwt.decode(x, EXEC_SECRET, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False})
        for x in (first, beat["executionToken"])
    )
    for claim in (
        "taskId",
        "stepId",
        "operationCode",
        "taskAttempt",
        "stepAttempt",
        "producerId",
        "eventTypes",
        "chainIat",
    ):
        assert new[claim] == old[claim], claim
    assert await _renewal_rows(h) == [(t.id, "02_parse", 1, 1, "document-parser")]
    step.ctx = {**step.ctx, "executionToken": beat["executionToken"]}
    # The renewed token carries the step past the first one's exp; the old one is refused.
    h.clock.advance(30)
    late = h.step_event(t, "02_parse", "STEP_PROGRESS", "PARSING", progress={"current": 1})
    assert _code(await h.send(late, first, expect=401)) == "EXECUTION_TOKEN_EXPIRED"
    done = await h.report(t, "02_parse", "STEP_COMPLETED", "PARSE_COMPLETED")
    assert done["accepted"] and done["stepLifecycleStatus"] == "SUCCEEDED"
    # A heartbeat of the finished attempt is stale and renews nothing.
    h.clock.advance(TTL - 35)
    stale = await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert stale["stale"] and "executionToken" not in stale and len(await _renewal_rows(h)) == 1


async def test_heartbeat_renewals_stop_at_the_maximum_lifetime(hb: Harness) -> None:
    """Renewed on heartbeats alone, the chain ends at ``max_lifetime_seconds`` after the first
    token, exactly as through the endpoint: the last token is cut to it, later heartbeats carry
    none, and the endpoint refuses 403 ``EXECUTION_TOKEN_MAX_LIFETIME`` once it is reached."""
    h = hb
    t = await h.create_task()
    step = t.steps["02_parse"]
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    elapsed, renewals = 0, 0
    while elapsed + 10 < MAX_LIFETIME:
        h.clock.advance(10)
        elapsed += 10
        beat = await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
        assert beat["accepted"], beat
        if "executionToken" in beat:
            renewals += 1
            step.ctx = {**step.ctx, "executionToken": beat["executionToken"]}
            assert elapsed + beat["expiresInSeconds"] <= MAX_LIFETIME
    claims = jwt.decode(
        step.token, EXEC_SECRET, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False}
    )
    assert claims["exp"] == claims["chainIat"] + MAX_LIFETIME
    assert renewals == len(await _renewal_rows(h)) and renewals >= MAX_LIFETIME // TTL
    h.clock.advance(MAX_LIFETIME - elapsed)
    assert _code(await renew(h, step.token, expect=403)) == "EXECUTION_TOKEN_MAX_LIFETIME"
    assert len(await _renewal_rows(h)) == renewals


async def test_heartbeat_renewal_off_and_a_superseded_attempt(hb: Harness, h: Harness) -> None:
    """``heartbeat_renewal_seconds: 0`` (the ``h`` fixture) never renews on heartbeat; a heartbeat
    of an attempt a retry superseded is stale and renews nothing."""
    t = await h.create_task()
    await h.report(t, "02_parse", "STEP_STARTED", "PARSING")
    h.clock.advance(TTL - 5)
    assert "executionToken" not in await h.report(t, "02_parse", "STEP_HEARTBEAT", None)
    t = await hb.create_task()
    await hb.report(t, "02_parse", "STEP_STARTED", "PARSING")
    error = {"category": "DEPENDENCY", "code": "OCR_TIMEOUT", "retryable": True}
    await hb.report(t, "02_parse", "STEP_FAILED", "PARSE_FAILED", error=error)
    r = await hb.http.post(f"/internal/v1/tasks/{t.id}/steps/02_parse/attempts", headers=auth(COORDINATOR))
    assert r.status_code == 201, r.text
    hb.clock.advance(TTL - 5)
    beat = await hb.report(t, "02_parse", "STEP_HEARTBEAT", None)
    assert beat["stale"] and "executionToken" not in beat
