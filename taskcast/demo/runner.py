"""``taskcast demo``: a coordinator and its workers that drive realistic tasks through the Status API.

Everything goes through the Status API's internal endpoints exactly as a real coordinator and real
workers would (docs/status-api.md; the client and the event bodies are
taskcast/demo/status_client.py's): ``POST /internal/v1/tasks`` (service JWT, role ``coordinator``)
returns one execution context per step; each worker reports with its step's ``executionToken``;
retries open a new attempt (``POST …/steps/{stepId}/attempts``); only the coordinator reports
``TASK_COMPLETED`` / ``TASK_FAILED`` / ``TASK_CANCELLED``.

Contracts kept by the runner:

* **eventId**: one per business event, derived from (task, step, attempt, producer, sourceSeq), and
  the same id and body are re-sent when a request fails in transit (``Idempotency-Key`` = eventId).
* **sourceSeq**: per (task, step, attempt, producer), starting at 1 for every new attempt; the
  coordinator has its own counter per task. Heartbeats take a number too (they only move liveness).
* **durationMs**: measured with ``time.monotonic()`` by the process that did the work.
* Only registered operation codes, business statuses and ``data.schema`` names are used
  (``schema/registry``, ``schema/data``); ``tests/allinone/test_demo.py`` checks every script.

The scenario scripts (:data:`SCENARIOS`) are pure data built from the seed's examples (document
processing, video export); :class:`TaskRun` interprets one. Scripted pauses are divided by
``speed``; the silence that makes a step STALE is real time (it must outlast the Status API's
``reconciler.heartbeat_timeout_seconds``, given as ``stale_after``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

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
from taskcast.demo.status_client import DemoError, Json, StatusApi, step_event, task_event

log = logging.getLogger("taskcast.demo")

DEFAULT_USERS = ("demo/alice", "demo/bob", "demo/carol")
SERVICE_SECRET_ENV = "TASKCAST_DEMO_SERVICE_SECRET"
CANCEL_TIMEOUT_SECONDS = 3.0


@dataclass
class StepRun:
    """One step attempt as its worker sees it: the execution context, its sourceSeq, its monotonic start."""

    ctx: Json
    seq: int = 0
    started: float = field(default_factory=time.monotonic)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    @property
    def heartbeats(self) -> bool:
        return "STEP_HEARTBEAT" in self.ctx["allowedEventTypes"]


@dataclass(frozen=True, slots=True)
class Pace:
    """Timing of a run: scripted pauses are divided by ``speed``; STALE needs real silence."""

    speed: float = 1.0
    stale_after: float = 60.0
    reconcile_interval: float = 10.0

    @property
    def heartbeat_every(self) -> float:
        return max(0.05, min(2.0, self.stale_after / 3))

    @property
    def silence(self) -> float:
        """Long enough for the reconciler to see the missing heartbeats (timeout + one pass)."""
        return self.stale_after + self.reconcile_interval * 1.5 + 0.5

    @property
    def recovery(self) -> float:
        """Heartbeats only (no progress) long enough for the reconciler to mark the step HEALTHY again."""
        return self.reconcile_interval * 1.5 + 0.5


class TaskRun:
    """Runs one :class:`Plan`: create the task, then interpret its script step by step."""

    def __init__(self, api: StatusApi, plan: Plan, owner: str, pace: Pace) -> None:
        self.api = api
        self.plan = plan
        self.tenant, _, self.owner = owner.partition("/")
        self.pace = pace
        self.steps: dict[str, StepRun] = {}
        self.coordinator_seq = 0
        self.created = 0.0
        self.final: Json | None = None
        self.finished = False

    @property
    def task_id(self) -> str:
        return self.plan.task_id

    async def run(self) -> Json:
        """Returns the Status API's response to the coordinator's final event."""
        body = {**self.plan.create_body, "tenantId": self.tenant, "ownerId": self.owner}
        created = await self.api.create_task(body)
        self.created = time.monotonic()
        self.steps = {ctx["stepId"]: StepRun(ctx) for ctx in created["steps"]}
        log.info("task %s (%s) created for %s/%s", self.task_id, self.plan.scenario, self.tenant, self.owner)
        for action in self.plan.script:
            await self._do(action)
        assert self.final is not None, f"scenario {self.plan.scenario} has no Finish"
        return self.final

    async def _emit(self, step_id: str, event_type: str, **fields: Any) -> Json:
        run = self.steps[step_id]
        if event_type == "STEP_STARTED":
            run.started = time.monotonic()
        elif event_type in ("STEP_COMPLETED", "STEP_FAILED"):
            fields.update(durationMs=run.elapsed_ms(), durationSource="MONOTONIC")
        return await self.api.step(run.ctx, step_event(run.ctx, run.next_seq(), event_type, **fields))

    async def _work(self, step_id: str, seconds: float, *, scaled: bool = True) -> None:
        """Busy for ``seconds`` (divided by speed when ``scaled``), heartbeating while it lasts."""
        run = self.steps[step_id]
        deadline = time.monotonic() + (seconds / self.pace.speed if scaled else seconds)
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, self.pace.heartbeat_every))
            if run.heartbeats and deadline - time.monotonic() > 0:
                await self._emit(step_id, "STEP_HEARTBEAT")

    async def _do(self, a: object) -> None:
        if isinstance(a, Start):
            await self._emit(a.step, "STEP_STARTED", businessStatus=a.status, message=a.message)
        elif isinstance(a, Work):
            await self._work(a.step, a.seconds)
        elif isinstance(a, Progress):
            progress = {"current": a.current, "total": a.total, "unit": a.unit}
            await self._emit(a.step, "STEP_PROGRESS", businessStatus=a.status, progress=progress, data=a.data)
        elif isinstance(a, GoSilent):
            log.info(
                "task %s: %s goes silent for %.1fs (expect STALE)", self.task_id, a.step, self.pace.silence
            )
            await asyncio.sleep(self.pace.silence)
            await self._emit(a.step, "STEP_HEARTBEAT")
            await self._work(a.step, self.pace.recovery, scaled=False)
        elif isinstance(a, Complete):
            await self._emit(a.step, "STEP_COMPLETED", businessStatus=a.status, data=a.data)
        elif isinstance(a, Fail):
            error = {
                "category": a.category,
                "code": a.code,
                "retryable": a.retryable,
                "userMessage": a.message,
            }
            await self._emit(a.step, "STEP_FAILED", businessStatus=a.status, error=error)
        elif isinstance(a, Retry):
            ctx = await self.api.new_attempt(self.task_id, a.step)
            self.steps[a.step] = StepRun(ctx)
        elif isinstance(a, Pause):
            await asyncio.sleep(a.seconds / self.pace.speed)
        elif isinstance(a, Finish):
            await self._finish(a)
        else:  # pragma: no cover - the Action union is closed
            raise TypeError(f"unknown action {a!r}")

    async def _finish(self, a: Finish) -> None:
        self.coordinator_seq += 1
        duration = int((time.monotonic() - self.created) * 1000)
        timing = {"durationMs": duration, "durationSource": "MONOTONIC"}
        if a.code is None:
            body = task_event(
                self.task_id, self.coordinator_seq, "TASK_COMPLETED", a.status, message=a.message, **timing
            )
        else:
            error = {
                "category": "BUSINESS_INPUT",
                "code": a.code,
                "retryable": False,
                "userMessage": a.message,
            }
            body = task_event(
                self.task_id,
                self.coordinator_seq,
                "TASK_FAILED",
                a.status,
                failedStepId=a.failed_step,
                error=error,
                **timing,
            )
        self.final = await self.api.task(body)

    async def cancel(self) -> None:
        """The demo is stopping: the coordinator cancels this unfinished task (no orphans left RUNNING)."""
        self.coordinator_seq += 1
        await self.api.task(
            task_event(
                self.task_id, self.coordinator_seq, "TASK_CANCELLED", "CANCELLED", message="Demo stopped"
            )
        )


@dataclass
class DemoResult:
    """What happened to each task: ``(scenario, owner, taskId, lifecycle or error text)``."""

    outcomes: list[tuple[str, str, str, str]] = field(default_factory=list)

    @property
    def failures(self) -> list[tuple[str, str, str, str]]:
        return [o for o in self.outcomes if o[3] not in ("SUCCEEDED", "FAILED", "CANCELLED")]


def schedule(tasks: int, users: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(scenario name, owner) pairs: every scenario in turn, owners round-robin; ``tasks=0`` never ends."""
    pairs = zip(itertools.cycle(SCENARIOS), itertools.cycle(users), strict=False)
    return itertools.islice(pairs, tasks) if tasks > 0 else pairs


async def run_demo(
    api_url: str,
    service_secret: str,
    *,
    tasks: int = len(SCENARIOS),
    speed: float = 1.0,
    stale_after: float = 60.0,
    reconcile_interval: float = 10.0,
    users: Sequence[str] = DEFAULT_USERS,
    interval: float = 20.0,
    keep_running: int = 0,
    stop: asyncio.Event | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> DemoResult:
    """Start ``tasks`` tasks (0 = until ``stop``): the first round one second apart, later ones every
    ``interval`` seconds (both divided by ``speed``). With ``tasks=0`` and ``keep_running`` > 0, every
    owner instead always has ``keep_running`` unfinished tasks: when one ends the next scenario starts
    for that owner (one second apart, divided by ``speed``), so someone opening the board at any time
    sees tasks in progress. Returns when every started task finished, or when ``stop`` is set — then
    unfinished tasks are cancelled by the coordinator within a bound."""
    pace = Pace(speed, stale_after, reconcile_interval)
    stop = stop or asyncio.Event()
    result = DemoResult()
    running: dict[asyncio.Task[None], TaskRun] = {}
    async with httpx.AsyncClient(base_url=api_url, transport=transport, timeout=10.0) as client:
        api = StatusApi(client, service_secret)

        async def one(run: TaskRun) -> None:
            owner = f"{run.tenant}/{run.owner}"
            try:
                outcome = (await run.run())["lifecycleStatus"]
                run.finished = True
            except DemoError as exc:  # one refused task never stops the others
                log.warning("task %s (%s) stopped: %s", run.task_id, run.plan.scenario, exc)
                outcome = str(exc)
            except Exception as exc:  # a task boundary: log it, keep the demo (and `up`) running
                log.exception("task %s (%s) crashed", run.task_id, run.plan.scenario)
                outcome = f"crashed: {type(exc).__name__}"
            result.outcomes.append((run.plan.scenario, owner, run.task_id, outcome))

        def launch(name: str, owner: str) -> asyncio.Task[None]:
            run = TaskRun(api, SCENARIOS[name](f"{name.split('_')[0]}-{uuid.uuid4().hex[:12]}"), owner, pace)
            task = asyncio.create_task(one(run), name=f"demo-{run.task_id}")
            running[task] = run
            return task

        if tasks == 0 and keep_running > 0:
            await _keep_running(launch, running, users, keep_running, 1.0 / speed, stop)
        else:
            for n, (name, owner) in enumerate(schedule(tasks, users)):
                if n:
                    gap = (1.0 if n < len(SCENARIOS) else interval) / speed
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), gap)
                if stop.is_set():
                    break
                launch(name, owner)
        pending = set(running)
        waiter = asyncio.create_task(stop.wait())
        while pending and not stop.is_set():
            done, _ = await asyncio.wait(pending | {waiter}, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
        waiter.cancel()
        if stop.is_set():
            await _cancel_unfinished(running)
    return result


async def _keep_running(
    launch: Callable[[str, str], asyncio.Task[None]],
    running: dict[asyncio.Task[None], TaskRun],
    users: Sequence[str],
    keep: int,
    gap: float,
    stop: asyncio.Event,
) -> None:
    """Until ``stop``: top every owner up to ``keep`` unfinished tasks (scenarios in turn, ``gap``
    seconds between starts), then wait for one to end. Ended tasks leave ``running`` (bounded)."""
    names = itertools.cycle(SCENARIOS)
    live: dict[str, set[asyncio.Task[None]]] = {owner: set() for owner in users}
    while not stop.is_set():
        for owner in users:
            live[owner] = {t for t in live[owner] if not t.done()}
            while len(live[owner]) < keep and not stop.is_set():
                live[owner].add(launch(next(names), owner))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), gap)
        for task in [t for t in running if t.done()]:
            del running[task]
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, *running}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()


async def _cancel_unfinished(running: dict[asyncio.Task[None], TaskRun]) -> None:
    unfinished = [run for run in running.values() if run.created and not run.finished]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    if unfinished:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_TIMEOUT_SECONDS):
                await asyncio.gather(*(r.cancel() for r in unfinished), return_exceptions=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="taskcast demo", description="Drive demo tasks through a Status API.")
    p.add_argument("--api", required=True, help="Status API base URL, e.g. http://127.0.0.1:8100")
    p.add_argument(
        "--service-secret", help=f"the Status API's internal_auth.jwt_secret (or ${SERVICE_SECRET_ENV})"
    )
    p.add_argument("--tasks", type=int, default=len(SCENARIOS), help="tasks to run, 0 = until Ctrl-C")
    p.add_argument("--speed", type=float, default=1.0, help="divide scripted pauses by this factor")
    p.add_argument(
        "--stale-after", type=float, default=60.0, help="the API's reconciler.heartbeat_timeout_seconds"
    )
    p.add_argument(
        "--reconcile-interval", type=float, default=10.0, help="the API's reconciler.interval_seconds"
    )
    p.add_argument("--users", default=",".join(DEFAULT_USERS), help="comma-separated tenant/user owners")
    p.add_argument(
        "--keep-running",
        type=int,
        default=0,
        help="with --tasks 0: keep this many unfinished tasks per user (a new one starts when one ends)",
    )
    return p


def main(argv: list[str]) -> int:
    """Entry point: 0 when every task ended as scripted, 1 when one was refused, 2 on bad usage."""
    args = _parser().parse_args(argv)
    secret = args.service_secret or os.environ.get(SERVICE_SECRET_ENV, "")
    if not secret:
        print(f"taskcast demo: --service-secret or ${SERVICE_SECRET_ENV} is required", file=sys.stderr)
        return 2
    if args.speed <= 0 or args.tasks < 0 or args.keep_running < 0:
        print("taskcast demo: --speed must be > 0, --tasks and --keep-running >= 0", file=sys.stderr)
        return 2
    users = [u.strip() for u in args.users.split(",") if "/" in u]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    async def go() -> DemoResult:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await run_demo(
            args.api,
            secret,
            tasks=args.tasks,
            speed=args.speed,
            stale_after=args.stale_after,
            reconcile_interval=args.reconcile_interval,
            users=users or DEFAULT_USERS,
            keep_running=args.keep_running,
            stop=stop,
        )

    result = asyncio.run(go())
    for scenario, owner, task_id, outcome in result.outcomes:
        print(f"{scenario:22} {owner:14} {task_id:22} {outcome}")
    return 1 if result.failures else 0
