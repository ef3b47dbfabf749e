"""A worked example of the Taskcast worker SDK (docs/quickstart-worker.md).

It registers a task type of its own (``EXAMPLE`` / ``REPORT_EXPORT``), creates a task of three
steps, runs them with progress, fails the render step once and retries it, runs the upload step
across an executionToken renewal (the example config sets ``execution_token.ttl_seconds: 4``; against
a Status API with a long ttl, e.g. ``make up``, it renews once explicitly), and completes the task.
Credentials come from the environment (mint them with ``taskcast token``):

    TASKCAST_ADMIN_TOKEN        role admin        (publishes the task type's definitions)
    TASKCAST_COORDINATOR_TOKEN  role coordinator  (creates the task, opens the retry, completes it)

    python examples/worker.py --url http://127.0.0.1:8100 [--owner u1] [--tenant t1]

Prints the task id on the last line. Exit code 0 when the task completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from taskcast_worker import AsyncTaskcast, StepError, StepSpec

PRODUCT, TASK_TYPE = "EXAMPLE", "REPORT_EXPORT"
#: Above this token ttl the upload step renews explicitly rather than outliving the token.
LONG_TTL_SECONDS = 30
COORDINATOR = "example-coordinator"

STATUSES: dict[str, Any] = {
    "tenantId": "*",
    "product": PRODUCT,
    "taskType": TASK_TYPE,
    "definitionVersion": 1,
    "statuses": [
        {"code": "QUEUED", "displayName": "Queued", "lifecycleStatus": "PENDING", "sortOrder": 0},
        {"code": "QUERYING", "displayName": "Querying data", "lifecycleStatus": "RUNNING", "sortOrder": 10},
        {"code": "QUERIED", "displayName": "Data ready", "lifecycleStatus": "SUCCEEDED", "terminal": True},
        {
            "code": "RENDERING",
            "displayName": "Rendering report",
            "lifecycleStatus": "RUNNING",
            "sortOrder": 20,
        },
        {
            "code": "RENDERED",
            "displayName": "Report rendered",
            "lifecycleStatus": "SUCCEEDED",
            "terminal": True,
        },
        {
            "code": "RENDER_FAILED",
            "displayName": "Rendering failed",
            "lifecycleStatus": "FAILED",
            "terminal": True,
            "severity": "ERROR",
        },
        {"code": "UPLOADING", "displayName": "Uploading", "lifecycleStatus": "RUNNING", "sortOrder": 30},
        {"code": "UPLOADED", "displayName": "Uploaded", "lifecycleStatus": "SUCCEEDED", "terminal": True},
        {
            "code": "EXPORTED",
            "displayName": "Report exported",
            "lifecycleStatus": "SUCCEEDED",
            "terminal": True,
        },
        {
            "code": "EXPORT_FAILED",
            "displayName": "Export failed",
            "lifecycleStatus": "FAILED",
            "terminal": True,
        },
    ],
}
ALL_EVENTS = ["STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED", "STEP_HEARTBEAT"]
OPERATIONS: dict[str, Any] = {
    "tenantId": "*",
    "product": PRODUCT,
    "taskType": TASK_TYPE,
    "definitionVersion": 1,
    "operations": [
        {
            "operationCode": "REPORT.QUERY",
            "displayName": "Query data",
            "producerPattern": "report-worker*",
            "allowedEventTypes": ALL_EVENTS,
            "failurePolicy": "FAIL_TASK",
        },
        {
            "operationCode": "REPORT.RENDER",
            "displayName": "Render report",
            "producerPattern": "report-worker*",
            "allowedEventTypes": ALL_EVENTS,
            "failurePolicy": "RETRY_THEN_FAIL_TASK",
            "maxAttempts": 3,
        },
        {
            "operationCode": "REPORT.UPLOAD",
            "displayName": "Upload report",
            "producerPattern": "report-worker*",
            "allowedEventTypes": ALL_EVENTS,
            "failurePolicy": "FAIL_TASK",
        },
    ],
}


def register(url: str, admin_token: str) -> None:
    """Publish the definitions (201 created, 200 already there: both fine)."""
    for kind, doc in (("status-definitions", STATUSES), ("operation-definitions", OPERATIONS)):
        req = urllib.request.Request(
            f"{url}/admin/v1/registry/{kind}",
            data=json.dumps(doc).encode(),
            headers={"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            print(f"registered {kind}: {json.loads(resp.read())}")


async def run(url: str, tenant: str, owner: str) -> str:
    coordinator_token = os.environ["TASKCAST_COORDINATOR_TOKEN"]
    async with AsyncTaskcast(url, service_token=coordinator_token, producer_id=COORDINATOR) as tc:
        task = await tc.create_task(
            tenant_id=tenant,
            owner_id=owner,
            product=PRODUCT,
            task_type=TASK_TYPE,
            title="Monthly report export",
            status_definition_version=1,
            operation_definition_version=1,
            steps=[
                StepSpec("01_query", "REPORT.QUERY", "report-worker"),
                StepSpec("02_render", "REPORT.RENDER", "report-worker"),
                StepSpec("03_upload", "REPORT.UPLOAD", "report-worker"),
            ],
        )
        print(f"created task {task.task_id} (version {task.task_version})")

        # Step 1: progress is coalesced to one report per 0.2 s; the last value always goes out.
        async with tc.step(task.steps["01_query"], progress_interval_seconds=0.2) as step:
            await step.start("QUERYING")
            for row in range(1, 51):
                await step.progress("QUERYING", row, 50, "rows")
            await step.complete("QUERIED")
        print("01_query done")

        # Step 2: the first attempt fails with a structured error; the coordinator opens attempt 2.
        async with tc.step(task.steps["02_render"]) as step:
            await step.start("RENDERING")
            await step.progress("RENDERING", 1, 4, "pages")
            error = StepError(
                "DEPENDENCY",
                "RENDERER_TIMEOUT",
                retryable=True,
                user_message="The renderer timed out; retrying.",
            )
            await step.fail("RENDER_FAILED", error)
        retry = await tc.retry_step(task.task_id, "02_render")
        print(f"02_render attempt 1 failed; attempt {retry.step_attempt} opened")
        async with tc.step(retry) as step:
            await step.start("RENDERING")
            for page in range(1, 5):
                await step.progress("RENDERING", page, 4, "pages")
            await step.complete("RENDERED")
        print("02_render attempt 2 done")

        # Step 3: longer than the token's ttl: a heartbeat's answer renews the executionToken in
        # the background (the SDK falls back to the renewal endpoint). Against a Status API with a
        # long ttl (make up: 3600 s) the step renews once on its own instead of waiting it out.
        ctx = task.steps["03_upload"]
        async with tc.step(ctx, heartbeat_interval_seconds=1.0, progress_interval_seconds=0.5) as step:
            await step.start("UPLOADING")
            loop = asyncio.get_running_loop()
            began, chunk = loop.time(), 0
            ttl = ctx.expires_in_seconds or 0.0
            long_ttl = ttl > LONG_TTL_SECONDS
            while step.renewals < 1 or (not long_ttl and loop.time() - began < ttl + 1):
                chunk += 1
                await step.progress("UPLOADING", chunk, unit="chunks")
                await asyncio.sleep(0.2)  # the "upload" of one chunk
                if long_ttl and chunk == 5:
                    await step.renew()
            await step.complete("UPLOADED")
            print(
                f"03_upload done after {loop.time() - began:.1f}s "
                f"(token ttl {ttl:.0f}s, {step.renewals} renewals)"
            )

        done = await tc.complete_task(task.task_id, "EXPORTED", task_attempt=task.task_attempt)
        print(f"task {done.lifecycle_status} at version {done.task_version}")
        return task.task_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8100")
    parser.add_argument("--tenant", default="t1")
    parser.add_argument("--owner", default="u1")
    args = parser.parse_args(argv)
    try:
        register(args.url, os.environ["TASKCAST_ADMIN_TOKEN"])
    except KeyError as exc:
        print(f"missing environment variable {exc}; mint it with `taskcast token`", file=sys.stderr)
        return 2
    except urllib.error.URLError as exc:
        print(f"cannot register the task type at {args.url}: {exc}", file=sys.stderr)
        return 1
    task_id = asyncio.run(run(args.url, args.tenant, args.owner))
    print(task_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
