"""Client telemetry (seed §14.1 client metrics): ``POST /api/telemetry/client``.

client-js (``client-js/src/telemetry.js``) sends, in batches and rate-limited, what one browser
saw: connection attempts and successes, reconnects, recoveries with ``recovered=false``, snapshot
load times, unknown operation codes / data schemas, notice display latency and the
commit→visible delay (``now - committedAt`` of each pushed version it displayed). This module
validates a report (:func:`parse_report`, pure) and hands it to :class:`~status_api.metrics.StatusMetrics`.

A client's numbers are never trusted: the caller is an authenticated end user (the same
``user_auth`` as ``/api/tasks``), one report is bounded in bytes and samples, every count and
sample must lie in a sane range (else ``422 VALUE_OUT_OF_RANGE``, nothing of the report is
recorded), unknown fields are refused, the only label (``transport``) comes from a fixed set, and
each user gets ``telemetry.reports_per_minute`` reports per process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.http import api_of, error_response, guard
from status_api.json_input import JsonInputError
from status_api.json_input import parse as parse_json
from status_api.ratelimit import RateLimiter

SCHEMA_VERSION = 1
TRANSPORTS = frozenset({"websocket", "sse", "http_stream"})
#: Report counters: name -> metric meaning (see StatusMetrics.client_report).
COUNTS = (
    "connectAttempts",
    "connects",
    "connectFailures",
    "reconnects",
    "recoveries",
    "recoveredFalse",
    "unknownOperations",
    "unknownSchemas",
    "clockSkew",
)
#: Sample kinds and the largest sane value of each (milliseconds).
SAMPLES: dict[str, float] = {
    "commitToVisibleMs": 3_600_000.0,
    "snapshotLoadMs": 120_000.0,
    "noticeDisplayMs": 3_600_000.0,
}
#: The most one report may count per counter: a browser over ``reports_per_minute`` cannot do more.
MAX_COUNT = 10_000


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    enabled: bool = True
    max_body_bytes: int = 16384
    max_samples: int = 200


@dataclass(frozen=True, slots=True)
class ClientReport:
    """A validated report: ``transport`` is one of :data:`TRANSPORTS` or ``"other"``."""

    transport: str
    counts: Mapping[str, int]
    samples: Mapping[str, tuple[float, ...]]


def _out_of_range(field: str, message: str) -> DomainError:
    return DomainError(ErrorKind.INVALID, "VALUE_OUT_OF_RANGE", message, details={"field": field})


def _object(value: Any, field: str, allowed: frozenset[str] | tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid("INVALID_TELEMETRY", f"{field} must be an object")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise invalid("INVALID_TELEMETRY", f"{field}: unknown field {unknown[0][:40]!r}")
    return value


def parse_report(body: Any, max_samples: int) -> ClientReport:
    """Validate a report body (already JSON-decoded).

    Raises:
        DomainError: ``INVALID_TELEMETRY`` (shape, types, unknown fields, schema version),
            ``TOO_MANY_SAMPLES``, ``VALUE_OUT_OF_RANGE`` (with ``details.field``).
    """
    top = _object(body if isinstance(body, dict) else [], "report", ("v", "transport", "counts", "samples"))
    if top.get("v") != SCHEMA_VERSION:
        raise invalid("INVALID_TELEMETRY", f"v must be {SCHEMA_VERSION}")
    transport = top.get("transport", "")
    if not isinstance(transport, str):
        raise invalid("INVALID_TELEMETRY", "transport must be a string")
    counts: dict[str, int] = {}
    for name, value in _object(top.get("counts"), "counts", COUNTS).items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise invalid("INVALID_TELEMETRY", f"counts.{name} must be an integer")
        if not 0 <= value <= MAX_COUNT:
            raise _out_of_range(f"counts.{name}", f"counts.{name} must be 0..{MAX_COUNT}")
        counts[name] = value
    if counts.get("recoveredFalse", 0) > counts.get("recoveries", 0):
        raise _out_of_range("counts.recoveredFalse", "counts.recoveredFalse exceeds counts.recoveries")
    for part in ("connects", "connectFailures"):  # a success ratio above 1 is a lie
        if counts.get(part, 0) > counts.get("connectAttempts", 0):
            raise _out_of_range(f"counts.{part}", f"counts.{part} exceeds counts.connectAttempts")
    samples: dict[str, tuple[float, ...]] = {}
    total = 0
    for name, values in _object(top.get("samples"), "samples", tuple(SAMPLES)).items():
        if not isinstance(values, list):
            raise invalid("INVALID_TELEMETRY", f"samples.{name} must be an array")
        total += len(values)
        if total > max_samples:
            raise DomainError(
                ErrorKind.TOO_LARGE, "TOO_MANY_SAMPLES", f"at most {max_samples} samples per report"
            )
        out = []
        for v in values:
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise invalid("INVALID_TELEMETRY", f"samples.{name} must hold numbers")
            if not (math.isfinite(v) and 0 <= v <= SAMPLES[name]):
                raise _out_of_range(f"samples.{name}", f"samples.{name} must be 0..{SAMPLES[name]:.0f} ms")
            out.append(float(v))
        samples[name] = tuple(out)
    return ClientReport(transport if transport in TRANSPORTS else "other", counts, samples)


@guard
async def client_telemetry(request: Request) -> Response:
    """``POST /api/telemetry/client`` → 204; errors as the other user endpoints (coded JSON)."""
    settings: TelemetrySettings = request.app.state.telemetry_settings
    limiter: RateLimiter = request.app.state.telemetry_limiter
    metrics = request.app.state.metrics
    try:
        if not settings.enabled:
            raise DomainError(ErrorKind.NOT_FOUND, "NOT_FOUND", "telemetry is disabled")
        user = await api_of(request).user_auth.authenticate(request.headers)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise _too_large(settings)
        raw = bytearray()
        async for chunk in request.stream():  # cut at the bound, not after reading it all
            raw += chunk
            if len(raw) > settings.max_body_bytes:
                raise _too_large(settings)
        if not limiter.allow(f"{user.tenant_id}/{user.user_id}"):
            raise DomainError(ErrorKind.LIMIT, "RATE_LIMITED", "too many telemetry reports")
        try:
            body = parse_json(bytes(raw), 4)
        except JsonInputError as exc:
            raise invalid(exc.code, exc.message) from exc
        report = parse_report(body, settings.max_samples)
    except DomainError as err:
        metrics.telemetry_rejected(err.code)
        return error_response(err)
    metrics.client_report(report)
    return Response(status_code=204)


def _too_large(settings: TelemetrySettings) -> DomainError:
    return DomainError(
        ErrorKind.TOO_LARGE,
        "BODY_TOO_LARGE",
        f"a telemetry report is at most {settings.max_body_bytes} bytes",
    )


routes = [Route("/api/telemetry/client", client_telemetry, methods=["POST"])]
