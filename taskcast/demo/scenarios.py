"""The demo's scenario scripts: pure data, built from the seed's examples (document processing,
video export; ``task-status-sync-design.zh.txt`` §3–4).

A scenario is a function ``taskId -> Plan``: the ``POST /internal/v1/tasks`` body (without
tenant/owner, which the runner adds) and a script of actions that ``taskcast.demo.runner.TaskRun``
interprets in order. Every code used here is registered in ``schema/registry`` and every data body
matches its ``schema/data`` schema (``tests/allinone/test_demo.py`` checks each script against the
registries). Pauses are in "demo seconds" (divided by the run's speed).

What the scenarios show between them: step progress (pages, frames), a retryable failure retried
as a new attempt (RETRY_THEN_FAIL_TASK), an optional step failing with a warning
(CONTINUE_WITH_WARNING → task health DEGRADED), WAIT_FOR_USER (businessStatus WAITING_USER_ACTION,
a NEEDS_ACTION notice), heartbeats that stop (→ STALE) and resume (→ HEALTHY), and the coordinator's
TASK_COMPLETED / TASK_FAILED.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Start:
    step: str
    status: str
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Work:
    """The worker is busy (heartbeating when its operation allows heartbeats)."""

    step: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Progress:
    step: str
    status: str
    current: int
    total: int
    unit: str
    data: Json | None = None


@dataclass(frozen=True, slots=True)
class GoSilent:
    """The worker stops heartbeating long enough for the reconciler to mark the step STALE, then
    heartbeats again until it is HEALTHY (real time, see ``taskcast.demo.runner.Pace``)."""

    step: str


@dataclass(frozen=True, slots=True)
class Complete:
    step: str
    status: str
    data: Json | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    step: str
    status: str
    category: str
    code: str
    retryable: bool
    message: str


@dataclass(frozen=True, slots=True)
class Retry:
    """The coordinator opens the next attempt of a failed step (new executionToken, sourceSeq from 1)."""

    step: str


@dataclass(frozen=True, slots=True)
class Pause:
    """The coordinator waits (e.g. for the user to act)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Finish:
    """TASK_COMPLETED (``code`` None) or TASK_FAILED with ``failed_step``, ``code`` and ``message``."""

    status: str
    message: str | None = None
    failed_step: str | None = None
    code: str | None = None


Action = Start | Work | Progress | GoSilent | Complete | Fail | Retry | Pause | Finish


@dataclass(frozen=True, slots=True)
class Plan:
    scenario: str
    task_id: str
    create_body: Json
    script: tuple[Action, ...]
    #: What the task ends as: (lifecycleStatus, health) after Finish.
    expect: tuple[str, str]
    shows: str


def data(schema: str, **value: Any) -> Json:
    return {"schema": schema, "value": value}


DOC_STEPS = (
    ("01_prepare", "FILE.PREPARE", "file-worker"),
    ("02_parse", "DOCUMENT.PARSE", "document-parser"),
    ("03_store", "RESULT.PERSIST", "result-service"),
)
REVIEW_STEP = ("04_review", "REVIEW.MANUAL", "review-service")
VIDEO_STEPS = (
    ("01_transcode", "VIDEO.TRANSCODE", "video-worker"),
    ("02_thumbnail", "VIDEO.THUMBNAIL", "thumbnail-worker"),
    ("03_publish", "VIDEO.PUBLISH", "publish-service"),
)


def _body(
    task_id: str,
    product: str,
    task_type: str,
    title: str,
    steps: tuple[tuple[str, str, str], ...],
    summary: Json,
    project: str | None = None,
) -> Json:
    body: Json = {
        "taskId": task_id,
        "product": product,
        "taskType": task_type,
        "title": title,
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": 1,
        "summaryData": summary,
        "steps": [{"stepId": s, "operationCode": op, "producerId": p} for s, op, p in steps],
    }
    if project:
        body["projectId"] = project
    return body


def prepare(file_name: str, size: int) -> Iterator[Action]:
    yield Start("01_prepare", "PREPARING", "Uploading and checking the file")
    yield Work("01_prepare", 1.5)
    yield Complete(
        "01_prepare", "PREPARED", data("file.prepare.completed.v1", fileName=file_name, sizeBytes=size)
    )


def parse_pages(task_id: str, pages: int, *, upto: int | None = None, step: int = 4) -> Iterator[Action]:
    """Parse ``pages`` pages with progress every ``step`` pages; stop (before completing) at ``upto``."""
    yield Start("02_parse", "PARSING", "Reading pages (OCR)")
    last = pages if upto is None else upto
    for page in [*range(step, last, step), last]:
        yield Work("02_parse", 0.8)
        progress = data("document.parse.progress.v1", currentPage=page, totalPages=pages)
        yield Progress("02_parse", "PARSING", page, pages, "page", progress)
    if upto is None:
        result = data(
            "document.parse.completed.v2",
            pageCount=pages,
            language="en",
            resultRef=f"result://document/{task_id}/parse-v2",
        )
        yield Complete("02_parse", "PARSE_COMPLETED", result)


def store(task_id: str) -> Iterator[Action]:
    yield Start("03_store", "PERSISTING", "Saving the summary and search index")
    yield Work("03_store", 1.0)
    yield Complete(
        "03_store", "PERSISTED", data("result.persist.completed.v1", resultRef=f"result://document/{task_id}")
    )


def transcode(total: int, chunks: int, *, silent_after: int | None = None) -> Iterator[Action]:
    yield Start("01_transcode", "TRANSCODING", "Transcoding to 1080p H.264")
    for i in range(1, chunks + 1):
        yield Work("01_transcode", 1.0)
        frame = total * i // chunks
        value = data(
            "video.transcode.progress.v1", frame=frame, totalFrames=total, fps=48.2, preset="1080p-h264"
        )
        yield Progress("01_transcode", "TRANSCODING", frame, total, "frame", value)
        if silent_after == i:
            yield GoSilent("01_transcode")
    yield Complete("01_transcode", "TRANSCODED")


def publish(task_id: str, seconds: float) -> Iterator[Action]:
    yield Start("03_publish", "PUBLISHING", "Uploading to the video library")
    yield Work("03_publish", 1.0)
    ref = f"result://video/{task_id}/1080p"
    yield Complete(
        "03_publish", "PUBLISHED", data("video.publish.completed.v1", resultRef=ref, durationSeconds=seconds)
    )


def document_ok(task_id: str) -> Plan:
    body = _body(
        task_id,
        "DOCUMENT",
        "DOCUMENT_PROCESS",
        "Quarterly report.pdf",
        DOC_STEPS,
        data("document.process.summary.v1", fileName="Quarterly report.pdf", pageCount=12),
    )
    script = [*prepare("Quarterly report.pdf", 2_480_113), *parse_pages(task_id, 12), *store(task_id)]
    script.append(Finish("COMPLETED", "Your document is ready"))
    return Plan(
        "document_ok", task_id, body, tuple(script), ("SUCCEEDED", "HEALTHY"), "progress, TASK_COMPLETED"
    )


def document_retry(task_id: str) -> Plan:
    body = _body(
        task_id,
        "DOCUMENT",
        "DOCUMENT_PROCESS",
        "Contract scan.pdf",
        DOC_STEPS,
        data("document.process.summary.v1", fileName="Contract scan.pdf", pageCount=24),
    )
    script = [*prepare("Contract scan.pdf", 9_112_004), *parse_pages(task_id, 24, upto=8)]
    script += [
        Fail(
            "02_parse",
            "PARSE_FAILED",
            "DEPENDENCY",
            "OCR_ENGINE_BUSY",
            True,
            "The text recognition service was busy. Retrying automatically.",
        ),
        Pause(1.0),
        Retry("02_parse"),
        *parse_pages(task_id, 24, step=8),
        *store(task_id),
        Finish("COMPLETED", "Your document is ready (second attempt)"),
    ]
    return Plan(
        "document_retry",
        task_id,
        body,
        tuple(script),
        ("SUCCEEDED", "HEALTHY"),
        "RETRY_THEN_FAIL_TASK: attempt 1 fails, attempt 2 succeeds",
    )


def document_degraded(task_id: str) -> Plan:
    body = _body(
        task_id,
        "DOCUMENT",
        "DOCUMENT_PROCESS",
        "Meeting notes.docx",
        DOC_STEPS,
        data("document.process.summary.v1", fileName="Meeting notes.docx", pageCount=8),
    )
    script = [*prepare("Meeting notes.docx", 312_556), *parse_pages(task_id, 8)]
    script += [
        Start("03_store", "PERSISTING", "Saving the summary and search index"),
        Work("03_store", 1.5),
        Fail(
            "03_store",
            "PERSIST_FAILED",
            "DEPENDENCY",
            "SEARCH_INDEX_UNAVAILABLE",
            False,
            "Your document was processed, but it could not be added to search yet.",
        ),
        Finish("COMPLETED", "Ready, without search indexing"),
    ]
    return Plan(
        "document_degraded",
        task_id,
        body,
        tuple(script),
        ("SUCCEEDED", "DEGRADED"),
        "CONTINUE_WITH_WARNING: optional step fails, task DEGRADED",
    )


def document_review(task_id: str) -> Plan:
    steps = (*DOC_STEPS[:2], REVIEW_STEP, DOC_STEPS[2])
    body = _body(
        task_id,
        "DOCUMENT",
        "DOCUMENT_PROCESS",
        "Handwritten invoice.png",
        steps,
        data("document.process.summary.v1", fileName="Handwritten invoice.png", pageCount=3),
    )
    script = [*prepare("Handwritten invoice.png", 1_204_332), *parse_pages(task_id, 3, step=1)]
    script += [
        Start("04_review", "WAITING_REVIEW", "Checking recognition confidence"),
        Pause(1.5),
        Fail(
            "04_review",
            "REVIEW_NEEDED",
            "BUSINESS_INPUT",
            "LOW_CONFIDENCE_FIELDS",
            False,
            "Two amounts could not be read reliably. Please confirm them.",
        ),
        Pause(8.0),  # the user confirms the fields
        *store(task_id),
        Finish("COMPLETED", "Confirmed by you and saved"),
    ]
    return Plan(
        "document_review",
        task_id,
        body,
        tuple(script),
        ("SUCCEEDED", "HEALTHY"),
        "WAIT_FOR_USER: NEEDS_ACTION, then the coordinator completes",
    )


def document_rejected(task_id: str) -> Plan:
    body = _body(
        task_id,
        "DOCUMENT",
        "DOCUMENT_PROCESS",
        "Archive.rar",
        DOC_STEPS,
        data("document.process.summary.v1", fileName="Archive.rar"),
    )
    message = "This file format is not supported. Convert it to PDF and try again."
    script = [
        *prepare("Archive.rar", 40_112_890),
        Start("02_parse", "PARSING", "Reading pages (OCR)"),
        Work("02_parse", 1.0),
        Fail("02_parse", "PARSE_FAILED", "BUSINESS_INPUT", "UNSUPPORTED_FILE_FORMAT", False, message),
        Finish("REJECTED", message, failed_step="02_parse", code="UNSUPPORTED_FILE_FORMAT"),
    ]
    return Plan(
        "document_rejected",
        task_id,
        body,
        tuple(script),
        ("FAILED", "HEALTHY"),
        "non-retryable failure, TASK_FAILED",
    )


def video_degraded(task_id: str) -> Plan:
    body = _body(
        task_id,
        "VIDEO",
        "VIDEO_EXPORT",
        "Product launch.mp4",
        VIDEO_STEPS,
        data("video.export.summary.v1", fileName="Product launch.mp4", preset="1080p-h264"),
        project="launch",
    )
    script = [
        *transcode(30_000, 6),
        Start("02_thumbnail", "RENDERING_THUMBNAIL"),
        Work("02_thumbnail", 1.0),
        Fail(
            "02_thumbnail",
            "THUMBNAIL_FAILED",
            "SYSTEM",
            "THUMBNAIL_RENDER_FAILED",
            False,
            "The preview image could not be rendered; the video itself is fine.",
        ),
        *publish(task_id, 1250.0),
        Finish("COMPLETED", "Exported without a thumbnail"),
    ]
    return Plan(
        "video_degraded",
        task_id,
        body,
        tuple(script),
        ("SUCCEEDED", "DEGRADED"),
        "frame progress, optional thumbnail fails (DEGRADED)",
    )


def video_stale(task_id: str) -> Plan:
    body = _body(
        task_id,
        "VIDEO",
        "VIDEO_EXPORT",
        "Team offsite recap.mov",
        VIDEO_STEPS,
        data("video.export.summary.v1", fileName="Team offsite recap.mov", preset="1080p-h264"),
        project="launch",
    )
    script = [
        *transcode(18_000, 6, silent_after=3),
        Start("02_thumbnail", "RENDERING_THUMBNAIL"),
        Work("02_thumbnail", 1.0),
        Complete("02_thumbnail", "THUMBNAIL_READY"),
        *publish(task_id, 750.0),
        Finish("COMPLETED", "Your video is published"),
    ]
    return Plan(
        "video_stale",
        task_id,
        body,
        tuple(script),
        ("SUCCEEDED", "HEALTHY"),
        "heartbeats stop (STALE) and resume (HEALTHY)",
    )


#: Scenario name → plan builder, in the order the demo starts them.
SCENARIOS: dict[str, Callable[[str], Plan]] = {
    "document_ok": document_ok,
    "video_degraded": video_degraded,
    "document_retry": document_retry,
    "document_review": document_review,
    "video_stale": video_stale,
    "document_degraded": document_degraded,
    "document_rejected": document_rejected,
}
