"""Task attempts and execution-token renewal (seed §3.3, §4.1): pure decisions over the locked
task and its current step attempts. No clock reads, no storage, no HTTP.

A retry never turns an attempt back from FAILED to RUNNING: the coordinator (or a registered
failure-policy executor) opens task attempt n+1, which opens a fresh attempt of every step; any
late event of attempt n is then ``stale`` (``ingest._attempt_check``). A renewal hands the step
attempt that is still running a new executionToken, bound to exactly the same task, step and
attempts, never past the token chain's maximum lifetime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from status_api.domain.errors import DomainError, ErrorKind, conflict, forbidden, not_found
from status_api.domain.ingest import task_health
from status_api.domain.model import TERMINAL, ExecutionGrant, Health, Lifecycle, StepState, TaskState
from status_api.domain.registry import TaskDefinitions


def new_task_attempt(
    task: TaskState,
    steps: Mapping[str, StepState],
    defs: TaskDefinitions,
    now: datetime,
    default_max_attempts: int,
) -> tuple[TaskState, dict[str, StepState]]:
    """Task attempt n+1 after a failed step: every step gets a new PENDING attempt row (its step
    attempt number keeps counting per step), the task a new version; lifecycle and business status
    stay (the task is still running: seed §4.4 "可重试步骤失败 … 任务可保持 RUNNING"). A task never
    goes past the ``maxTaskAttempts`` of its operation definitions, or ``default_max_attempts``
    when they set none (its first attempt counts).

    Raises:
        DomainError: CONFLICT ``TASK_TERMINAL`` (a terminal task never changes, seed §4.2),
            ``NO_FAILED_STEP`` (nothing failed in the current attempt),
            ``TASK_ATTEMPTS_EXHAUSTED`` (details ``{limit, taskAttempt}``).
    """
    if task.lifecycle in TERMINAL:
        raise conflict("TASK_TERMINAL", f"task is {task.lifecycle}; retry before TASK_FAILED")
    if not any(s.lifecycle is Lifecycle.FAILED for s in steps.values()):
        raise conflict("NO_FAILED_STEP", "a new task attempt needs a failed step in the current attempt")
    limit = defs.operations.max_task_attempts or default_max_attempts
    if task.attempt >= limit:
        raise conflict(
            "TASK_ATTEMPTS_EXHAUSTED",
            f"{task.task_type} allows {limit} task attempts; attempt {task.attempt} was the last",
            {"limit": limit, "taskAttempt": task.attempt},
        )
    initial = defs.statuses.initial_code()
    new_steps = {
        sid: StepState(
            task_id=task.id,
            step_id=sid,
            attempt=s.attempt + 1,
            operation_code=s.operation_code,
            producer_id=s.producer_id,
            source_seq=0,
            version=s.version + 1,
            lifecycle=Lifecycle.PENDING,
            business_status=initial,
            health=Health.HEALTHY,
            created_at=now,
            updated_at=now,
        )
        for sid, s in steps.items()
    }
    new_task = replace(
        task,
        attempt=task.attempt + 1,
        version=task.version + 1,
        coordinator_source_seq=0,
        health=task_health(new_steps, defs.operations),
        failure_code=None,
        failure_message=None,
        failed_step_id=None,
        updated_at=now,
    )
    return new_task, new_steps


def check_renewal(
    task: TaskState | None,
    steps: Mapping[str, StepState],
    grant: ExecutionGrant,
    chain_started: int,
    now_epoch: int,
    max_lifetime_seconds: int,
) -> StepState:
    """The step attempt a presented token may be renewed for, or why not.

    Raises:
        DomainError: NOT_FOUND (task or step gone); CONFLICT ``TASK_TERMINAL``,
            ``ATTEMPT_SUPERSEDED`` (a newer task or step attempt exists: the token's attempt is
            over), ``STEP_TERMINAL`` (the attempt already finished); FORBIDDEN
            ``EXECUTION_TOKEN_MAX_LIFETIME`` (the chain reached ``max_lifetime_seconds``).
    """
    if task is None:
        raise not_found()
    step = steps.get(grant.step_id)
    if step is None:
        raise DomainError(ErrorKind.NOT_FOUND, "STEP_NOT_FOUND", "step not found")
    if task.lifecycle in TERMINAL:
        raise conflict("TASK_TERMINAL", f"task is {task.lifecycle}")
    if grant.task_attempt != task.attempt or grant.step_attempt != step.attempt:
        raise conflict(
            "ATTEMPT_SUPERSEDED",
            f"the token's attempt {grant.task_attempt}/{grant.step_attempt} is not the current "
            f"{task.attempt}/{step.attempt}",
        )
    if step.lifecycle in TERMINAL:
        raise conflict("STEP_TERMINAL", f"step attempt {step.attempt} is {step.lifecycle}")
    if now_epoch >= chain_started + max_lifetime_seconds:
        raise forbidden(
            "EXECUTION_TOKEN_MAX_LIFETIME",
            f"this attempt's tokens reached execution_token.max_lifetime_seconds ({max_lifetime_seconds})",
        )
    return step
