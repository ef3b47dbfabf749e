"""The pipeline's operator UI (docs/admin.md): the page at ``/admin/ui/`` (static HTML, one
script, one stylesheet: it holds no data) and the JSON it reads under ``/admin/v1/``, each
authorised as every operator endpoint of the Status API is (a service credential with the
``admin`` role, rate-limited per producer):

* ``GET /admin/v1/tasks?state=&q=&limit=``: tasks by lifecycle status and search, with counts;
* ``GET /admin/v1/tasks/{task_id}/timeline``: one task, its events and its outbox rows;
* ``GET /admin/v1/outbox/backlog``: unpublished rows by status, priority and age;
* ``GET /admin/v1/outbox/dead``: DEAD rows (no payloads);
* ``POST /admin/v1/outbox/dead/requeue`` and ``/delete`` with ``{"ids": [...]}``: the action and
  its audit row (``operator_action``: who, what, when) in one transaction;
* ``GET /admin/v1/relays``: relay instances by the leases they hold, and the publish lag;
* ``GET /admin/v1/audit``: the newest audit rows.

The registries are ``GET /admin/v1/registry`` (status_api/http.py). Imports the edge helpers of
status_api/http.py and the storage queries; nothing imports this but app.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from status_api.auth import bearer
from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import ServiceIdentity
from status_api.http import api_of, guard, read_json
from status_api.storage import operator_views, outbox_admin

audit_log = logging.getLogger("status_api.audit")

STATIC = Path(__file__).resolve().parent / "operator_static"
FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "operator.js": ("operator.js", "text/javascript; charset=utf-8"),
    "operator.css": ("operator.css", "text/css; charset=utf-8"),
}
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
MAX_IDS = 1000
"""The most DEAD row ids one requeue or delete takes."""
DEAD_LIST_LIMIT = 500


def operator(request: Request) -> ServiceIdentity:
    """The calling operator: a valid service credential with the ``admin`` role (the rule of
    every ``/admin/v1`` endpoint), within the producer's rate limit.

    Raises:
        DomainError: UNAUTHENTICATED, FORBIDDEN ``ROLE_REQUIRED`` or LIMIT ``RATE_LIMITED``.
    """
    api = api_of(request)
    caller = api.service_auth.service(bearer(request.headers))
    if not api.limiter.allow(caller.producer_id):
        raise DomainError(ErrorKind.LIMIT, "RATE_LIMITED", "too many requests for this producer")
    if "admin" not in caller.roles:
        raise DomainError(ErrorKind.FORBIDDEN, "ROLE_REQUIRED", "needs the admin role")
    return caller


def _json(body: object) -> Response:
    return JSONResponse(body, headers=SECURITY_HEADERS)


async def page(request: Request) -> Response:
    name, media = FILES.get(request.path_params.get("name", ""), (None, ""))
    if name is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response((STATIC / name).read_bytes(), media_type=media, headers=SECURITY_HEADERS)


def _limit(request: Request) -> int:
    value = request.query_params.get("limit", "50")
    if not (value.isascii() and value.isdigit() and 0 < int(value) <= operator_views.MAX_ROWS):
        raise invalid("INVALID_QUERY", f"limit must be an integer from 1 to {operator_views.MAX_ROWS}")
    return int(value)


@guard
async def list_tasks(request: Request) -> Response:
    operator(request)
    state, query = request.query_params.get("state", ""), request.query_params.get("q", "")
    if len(state) > 32 or len(query) > 255:
        raise invalid("INVALID_QUERY", "state is at most 32 characters, q at most 255")
    async with api_of(request).service.engine.connect() as conn:
        counts = await operator_views.state_counts(conn)
        rows = await operator_views.tasks(conn, state=state, query=query, limit=_limit(request))
    return _json({"counts": counts, "tasks": rows})


@guard
async def task_timeline(request: Request) -> Response:
    operator(request)
    async with api_of(request).service.engine.connect() as conn:
        found = await operator_views.timeline(conn, request.path_params["task_id"])
    if found is None:
        raise DomainError(ErrorKind.NOT_FOUND, "TASK_NOT_FOUND", "no such task")
    return _json(found)


@guard
async def outbox_backlog(request: Request) -> Response:
    operator(request)
    api = api_of(request)
    async with api.service.engine.connect() as conn:
        now = api.service.clock()
        return _json(
            {"backlog": await operator_views.backlog(conn, now), **await outbox_admin.stats(conn, now)}
        )


@guard
async def dead_rows(request: Request) -> Response:
    operator(request)
    async with api_of(request).service.engine.connect() as conn:
        rows = await outbox_admin.list_dead(conn, DEAD_LIST_LIMIT)
    return _json(
        {
            "dead": [
                {
                    "id": r.id,
                    "taskId": r.aggregate_id,
                    "version": r.aggregate_version,
                    "channel": r.channel,
                    "projection": r.projection,
                    "attempts": r.attempts,
                    "lastError": r.last_error,
                    "createdAt": r.created_at.isoformat(timespec="milliseconds") + "Z",
                }
                for r in rows
            ]
        }
    )


async def _ids(request: Request) -> list[int]:
    body = await read_json(request)
    ids = body.get("ids") if isinstance(body, dict) else None
    if (
        not isinstance(ids, list)
        or not 0 < len(ids) <= MAX_IDS
        or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids)
    ):
        raise invalid("INVALID_IDS", f"ids must be a list of 1 to {MAX_IDS} positive row ids")
    return sorted(set(ids))


@guard
async def dead_action(request: Request) -> Response:
    caller = operator(request)
    action = request.path_params["action"]
    if action not in ("requeue", "delete"):
        raise DomainError(ErrorKind.NOT_FOUND, "NOT_FOUND", "unknown action")
    ids = await _ids(request)
    api = api_of(request)
    async with api.service.engine.begin() as conn:
        now = api.service.clock()
        if action == "requeue":
            affected = await outbox_admin.requeue_dead(conn, ids, now)
        else:
            affected = await outbox_admin.delete_dead(conn, ids)
        await operator_views.record(
            conn,
            operator_id=caller.producer_id,
            action=f"dead.{action}",
            target=ids,
            affected=affected,
            now=now,
        )
    audit_log.info(
        "outbox dead %s operator=%s ids=%s affected=%d", action, caller.producer_id, ids[:50], affected
    )
    return _json({"affected": affected})


@guard
async def relays(request: Request) -> Response:
    operator(request)
    api = api_of(request)
    async with api.service.engine.connect() as conn:
        return _json(await operator_views.relays(conn, api.service.clock()))


@guard
async def audit(request: Request) -> Response:
    operator(request)
    async with api_of(request).service.engine.connect() as conn:
        return _json({"actions": await operator_views.audit(conn, _limit(request))})


routes = [
    Route("/admin/ui/", page, methods=["GET", "HEAD"]),
    Route("/admin/ui/{name}", page, methods=["GET", "HEAD"]),
    Route("/admin/v1/tasks", list_tasks, methods=["GET"]),
    Route("/admin/v1/tasks/{task_id}/timeline", task_timeline, methods=["GET"]),
    Route("/admin/v1/outbox/backlog", outbox_backlog, methods=["GET"]),
    Route("/admin/v1/outbox/dead", dead_rows, methods=["GET"]),
    Route("/admin/v1/outbox/dead/{action}", dead_action, methods=["POST"]),
    Route("/admin/v1/relays", relays, methods=["GET"]),
    Route("/admin/v1/audit", audit, methods=["GET"]),
]
