"""Starlette routes of the Status API: authenticate, parse, call the service, map errors.

Domain errors become HTTP statuses here and only here (``STATUS_BY_KIND``). Error bodies are
``{"error": {"code", "message", "retryable", "details"?}}``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc as sa_exc
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from httpwire.tracing import OFF, Tracing
from status_api import correlation
from status_api.auth import ServiceAuthenticator, UserAuthenticator, bearer
from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import ExecutionGrant, ServiceIdentity
from status_api.json_input import DEFAULT_MAX_DEPTH, MAX_SAFE_INTEGER, JsonInputError
from status_api.json_input import parse as parse_json
from status_api.json_response import dumps
from status_api.queries import TaskQueries
from status_api.ratelimit import RateLimiter
from status_api.service import StatusService
from status_api.storage import outbox_admin, registries

if TYPE_CHECKING:
    from status_api.metrics import StatusMetrics

log = logging.getLogger("status_api.http")
audit = logging.getLogger("status_api.audit")

STATUS_BY_KIND: dict[ErrorKind, int] = {
    ErrorKind.INVALID: 422,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 409,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.LIMIT: 429,
    ErrorKind.UNAVAILABLE: 503,
}


def error_response(err: DomainError) -> JSONResponse:
    body: dict[str, Any] = {"code": err.code, "message": err.message, "retryable": err.retryable}
    if err.details is not None:
        body["details"] = err.details
    return JSONResponse({"error": body}, status_code=STATUS_BY_KIND[err.kind])


@dataclass
class Api:
    service: StatusService
    queries: TaskQueries
    service_auth: ServiceAuthenticator
    user_auth: UserAuthenticator
    limiter: RateLimiter
    openapi: dict[str, Any]
    max_json_depth: int = DEFAULT_MAX_DEPTH
    #: The process's tracer (OFF: the event route checks one attribute and traces nothing).
    tracing: Tracing = OFF


Handler = Callable[[Request], Awaitable[Response]]


#: The database is down, unreachable or the pool is exhausted: the request may be retried as is.
_STORAGE_UNREACHABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError, OSError)


def storage_unavailable() -> DomainError:
    """A fresh error per answer (an exception instance is never shared: its traceback would grow)."""
    return DomainError(ErrorKind.UNAVAILABLE, "STORAGE_UNAVAILABLE", "storage unavailable; retry")


def _guard(fn: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except DomainError as err:
            return error_response(err)
        except ClientDisconnect:
            # Gone mid-body, or cut by the request deadline (status_api/server.py): nobody reads this.
            return Response(status_code=400)
        except _STORAGE_UNREACHABLE as exc:
            # A coded 503, not a 500. Even if a commit landed before the link broke, a retry with the
            # same eventId is answered from the dedup row (seed §10): retrying is always safe.
            log.warning("storage unavailable: %s", type(exc.__cause__ or exc).__name__)
            return error_response(storage_unavailable())

    return wrapped


def _api(request: Request) -> Api:
    api: Api = request.app.state.api
    return api


async def _json(request: Request) -> Any:
    """The body as JSON under ``status_api.json_input``'s rules. The bytes are bounded before they
    get here (``BodyLimitMiddleware`` raises ``BODY_TOO_LARGE`` out of the read)."""
    return _parse(_api(request), await request.body())


#: The edge helpers, public for the route modules outside this one (status_api/telemetry.py,
#: status_api/subscribe_proxy.py): one error mapping, one JSON reader, for every route.
guard = _guard
read_json = _json
api_of = _api


def _service(request: Request) -> ServiceIdentity:
    api = _api(request)
    ident = api.service_auth.service(bearer(request.headers))
    _limit(api, ident.producer_id)
    return ident


def _limit(api: Api, key: str) -> None:
    if not api.limiter.allow(key):
        raise DomainError(ErrorKind.LIMIT, "RATE_LIMITED", "too many requests for this producer")


def _int(request: Request, name: str, default: int) -> int:
    """A non-negative query integer: ASCII digits only (``int()`` would take ``1_0``, ``+1``, ``٣``
    and a 4,000-digit string) and at most ``2^53-1`` like any number of a body."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    if not (value.isascii() and value.isdigit()):
        raise invalid("INVALID_QUERY", f"{name} must be a non-negative integer")
    if len(value) > 16 or int(value) > MAX_SAFE_INTEGER:
        raise invalid("NUMBER_OUT_OF_RANGE", f"{name} must be at most 2^53-1")
    return int(value)


# --- coordinator / service side ---------------------------------------------------------------


@_guard
async def create_task(request: Request) -> Response:
    caller = _service(request)
    body = await _json(request)
    out = await _api(request).service.create_task(body, caller, request.headers.get("idempotency-key"))
    audit.info(
        "task created producer=%s task=%s duplicate=%s", caller.producer_id, out["taskId"], out["duplicate"]
    )
    return JSONResponse(out, status_code=200 if out["duplicate"] else 201)


@_guard
async def create_attempt(request: Request) -> Response:
    caller = _service(request)
    p = request.path_params
    out = await _api(request).service.create_step_attempt(p["task_id"], p["step_id"], caller)
    audit.info("attempt created producer=%s task=%s step=%s", caller.producer_id, p["task_id"], p["step_id"])
    return JSONResponse(out, status_code=201)


@_guard
async def create_task_attempt(request: Request) -> Response:
    caller = _service(request)
    task_id = request.path_params["task_id"]
    out = await _api(request).service.create_task_attempt(task_id, caller)
    audit.info(
        "task attempt created producer=%s task=%s attempt=%s", caller.producer_id, task_id, out["taskAttempt"]
    )
    return JSONResponse(out, status_code=201)


@_guard
async def renew_execution_token(request: Request) -> Response:
    api = _api(request)
    token = bearer(request.headers)
    grant, _ = api.service.tokens.verify_for_renewal(token, api.service.clock())
    _limit(api, grant.producer_id)
    out = await api.service.renew_execution_token(token)
    _audit_renewal(grant, out, "endpoint")
    return JSONResponse(out)


def _audit_renewal(grant: ExecutionGrant, out: Mapping[str, Any], via: str) -> None:
    """The audit line of one execution-token renewal (its row is in ``execution_token_renewal``)."""
    audit.info(
        "execution token renewed producer=%s task=%s step=%s attempt=%s/%s expires=%s via=%s",
        grant.producer_id,
        grant.task_id,
        grant.step_id,
        grant.task_attempt,
        grant.step_attempt,
        out["expiresAt"],
        via,
    )


#: Reads a request body (bounded by the caller); raises ``ClientDisconnect`` if the client left.
BodyReader = Callable[[], Awaitable[bytes]]


async def event_answer(
    api: Api, headers: Mapping[str, str], read_body: BodyReader, metrics: StatusMetrics | None
) -> tuple[int, bytes]:
    """``POST /internal/v1/task-events`` without a framework: (status, JSON body) for the headers
    and the body ``read_body`` gives. The one implementation behind the Starlette route and the
    ASGI fast path (``status_api/event_route.py``); errors are mapped as ``guard`` maps them.
    Untraced: a caller picks :func:`traced_event_answer` when ``api.tracing`` is on."""
    try:
        return 200, dumps(await _task_event(api, headers, read_body, metrics))
    except DomainError as err:
        return STATUS_BY_KIND[err.kind], error_body(err)
    except ClientDisconnect:
        return 400, b""
    except _STORAGE_UNREACHABLE as exc:
        log.warning("storage unavailable: %s", type(exc.__cause__ or exc).__name__)
        return 503, error_body(storage_unavailable())


async def traced_event_answer(
    api: Api, headers: Mapping[str, str], read_body: BodyReader, metrics: StatusMetrics | None
) -> tuple[int, bytes]:
    """:func:`event_answer` as its server span (``opentelemetry.enabled``; status_api/correlation.py)."""
    return await correlation.event_span(api.tracing, headers, event_answer(api, headers, read_body, metrics))


def error_body(err: DomainError) -> bytes:
    """The bytes of :func:`error_response`'s body."""
    body: dict[str, Any] = {"code": err.code, "message": err.message, "retryable": err.retryable}
    if err.details is not None:
        body["details"] = err.details
    return dumps({"error": body})


async def task_events(request: Request) -> Response:
    api = _api(request)
    answer = traced_event_answer if api.tracing.enabled else event_answer
    status, body = await answer(
        api, request.headers, request.body, getattr(request.app.state, "metrics", None)
    )
    return Response(body, status_code=status, media_type=None if status == 400 and not body else JSON_TYPE)


JSON_TYPE = "application/json"


def _parse(api: Api, raw: bytes) -> Any:
    try:
        return parse_json(raw, api.max_json_depth)
    except JsonInputError as exc:
        raise invalid(exc.code, exc.message) from exc


async def _task_event(
    api: Api, headers: Mapping[str, str], read_body: BodyReader, metrics: StatusMetrics | None
) -> dict[str, Any]:
    token = bearer(headers)
    try:
        caller = api.service_auth.event_caller(token)
    except DomainError as err:
        if err.kind is not ErrorKind.UNAUTHENTICATED:
            raise
        return await _replay_or_refuse(api, headers, read_body, metrics, token, err)
    _limit(api, caller.producer_id)
    body = _parse(api, await read_body())
    if not isinstance(body, dict):
        raise invalid("INVALID_EVENT", "body must be an object")
    # The operation label comes from the verified execution token, never from the body: a body's
    # operationCode as a label would let any client grow the metric without bound.
    label = caller.operation_code if isinstance(caller, ExecutionGrant) else ""
    try:
        traceparent = api.tracing.traceparent() if api.tracing.enabled else None
        out = await api.service.ingest_event(body, caller, headers.get("idempotency-key"), token, traceparent)
    except DomainError as err:
        if metrics is not None:
            metrics.event(label, "rejected", err.code)
        raise
    if metrics is not None:
        outcome = "duplicate" if out["duplicate"] else "stale" if out["stale"] else "accepted"
        metrics.event(label, outcome, str(out.get("staleReason") or ""))
    if api.tracing.enabled:
        correlation.annotate_event(api.tracing, out)
    correlation.log_event(caller.producer_id, body, out)  # seed §14.2
    if "executionToken" in out and isinstance(caller, ExecutionGrant):
        _audit_renewal(caller, out, "heartbeat")
    return out


async def _replay_or_refuse(
    api: Api,
    headers: Mapping[str, str],
    read_body: BodyReader,
    metrics: StatusMetrics | None,
    token: str,
    err: DomainError,
) -> dict[str, Any]:
    """Seed §3.2, idempotency first: an exact duplicate of an event its producer already got
    accepted is answered its first result even when the credential expired since (correctly signed,
    same producer, same eventId and body); anything else gets the credential's refusal."""
    producer = api.service_auth.replay_producer(token)
    if producer is None:
        raise err
    _limit(api, producer)
    body = _parse(api, await read_body())
    out = None
    if isinstance(body, dict):
        out = await api.service.replay_duplicate(body, producer, headers.get("idempotency-key"))
    if out is None:
        raise err
    if metrics is not None:
        metrics.event("", "duplicate", "")
    audit.info(
        "event producer=%s event=%s task=%s duplicate=True expired_credential=True version=%s",
        producer,
        out["eventId"],
        out["taskId"],
        out["taskVersion"],
    )
    return out


@_guard
async def admin_correction(request: Request) -> Response:
    caller = _service(request)
    body = await _json(request)
    out = await _api(request).service.admin_correct(request.path_params["task_id"], body, caller)
    audit.info(
        "admin correction operator=%s task=%s reason=%r",
        caller.producer_id,
        request.path_params["task_id"],
        out["reason"],
    )
    return JSONResponse(out, status_code=201)


def _require_admin(caller: ServiceIdentity) -> None:
    if "admin" not in caller.roles:
        raise DomainError(ErrorKind.FORBIDDEN, "ROLE_REQUIRED", "needs the admin role")


@_guard
async def registry_list(request: Request) -> Response:
    _require_admin(_service(request))
    async with _api(request).service.engine.connect() as conn:
        return JSONResponse(await registries.list_definition_keys(conn))


@_guard
async def registry_publish(request: Request) -> Response:
    caller = _service(request)
    _require_admin(caller)
    kind = request.path_params["kind"]
    if kind not in ("status-definitions", "operation-definitions"):
        raise DomainError(ErrorKind.NOT_FOUND, "NOT_FOUND", "unknown registry")
    created = await _api(request).service.publish_definitions(kind, await _json(request))
    audit.info("registry publish operator=%s kind=%s created=%s", caller.producer_id, kind, created)
    return JSONResponse({"created": created}, status_code=201 if created else 200)


@_guard
async def outbox_stats(request: Request) -> Response:
    _require_admin(_service(request))
    api = _api(request)
    async with api.service.engine.connect() as conn:
        return JSONResponse(await outbox_admin.stats(conn, api.service.clock()))


# --- user side ----------------------------------------------------------------------------------


@_guard
async def list_tasks(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    out = await api.queries.list_tasks(user, _int(request, "limit", 20), request.query_params.get("cursor"))
    return JSONResponse(out)


@_guard
async def get_task(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    return JSONResponse(await api.queries.get_task(user, request.path_params["task_id"]))


@_guard
async def task_timeline(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    out = await api.queries.events(
        user,
        request.path_params["task_id"],
        _int(request, "afterTaskVersion", 0),
        _int(request, "limit", 100),
    )
    return JSONResponse(out)


@_guard
async def batch_get(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    return JSONResponse(await api.queries.batch_get(user, await _json(request)))


@_guard
async def realtime_session(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    return JSONResponse(await api.queries.realtime_session(user))


@_guard
async def subscription_token(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    return JSONResponse(await api.queries.subscription_token(user, await _json(request)))


@_guard
async def broadcast_token(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    return JSONResponse(await api.queries.broadcast_token(user, await _json(request)))


@_guard
async def broadcast_publish(request: Request) -> Response:
    caller = _service(request)
    _require_admin(caller)
    out = await _api(request).service.publish_broadcast(await _json(request), caller)
    audit.info(
        "broadcast operator=%s id=%s channel=%s message=%r",
        caller.producer_id,
        out["broadcastId"],
        out["channel"],
        out["message"],
    )
    return JSONResponse(out, status_code=201)


@_guard
async def subscription_release(request: Request) -> Response:
    api = _api(request)
    user = await api.user_auth.authenticate(request.headers)
    return JSONResponse(await api.queries.release_subscription(user, await _json(request)))


# --- operations ---------------------------------------------------------------------------------


async def openapi(request: Request) -> Response:
    return JSONResponse(_api(request).openapi)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    try:
        async with _api(request).service.engine.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")
    except Exception:  # readiness reports, it does not raise
        log.warning("readiness check failed", exc_info=True)
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return JSONResponse({"status": "ready"})


routes = [
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/internal/v1/tasks", create_task, methods=["POST"]),
    Route("/internal/v1/tasks/{task_id}/steps/{step_id}/attempts", create_attempt, methods=["POST"]),
    Route("/internal/v1/tasks/{task_id}/attempts", create_task_attempt, methods=["POST"]),
    Route("/internal/v1/execution-tokens/renew", renew_execution_token, methods=["POST"]),
    Route("/internal/v1/task-events", task_events, methods=["POST"]),
    Route("/admin/v1/tasks/{task_id}/corrections", admin_correction, methods=["POST"]),
    Route("/admin/v1/registry", registry_list, methods=["GET"]),
    Route("/admin/v1/registry/{kind}", registry_publish, methods=["POST"]),
    Route("/admin/v1/outbox/stats", outbox_stats, methods=["GET"]),
    Route("/admin/v1/broadcasts", broadcast_publish, methods=["POST"]),
    Route("/api/tasks", list_tasks, methods=["GET"]),
    Route("/api/tasks/status:batchGet", batch_get, methods=["POST"]),
    Route("/api/tasks/{task_id}", get_task, methods=["GET"]),
    Route("/api/tasks/{task_id}/events", task_timeline, methods=["GET"]),
    Route("/api/realtime/session", realtime_session, methods=["GET"]),
    Route("/api/realtime/subscription-token", subscription_token, methods=["POST"]),
    Route("/api/realtime/subscription-release", subscription_release, methods=["POST"]),
    Route("/api/realtime/broadcast-token", broadcast_token, methods=["POST"]),
]
